#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "train/config.h"
#include "train/trainer.h"

namespace strata::cli {

Command add_train_command(CLI::App& parent) {
  struct Args {
    std::string config;
    std::vector<std::string> overrides;
  };
  auto args = std::make_shared<Args>();
  CLI::App* app = parent.add_subcommand("train", "train a model from a TOML config (one rank, or "
                                                 "one rank of a job started by mpirun/srun)");
  app->add_option("config", args->config, "config file, e.g. configs/tiny.toml")->required();
  app->add_option("--set", args->overrides, "override a config key: --set train.steps=100")
      ->take_all()
      ->expected(1);
  return {app, [args] {
            Trainer trainer(load_config(args->config, args->overrides));
            trainer.run();
            return 0;
          }};
}

}  // namespace strata::cli
