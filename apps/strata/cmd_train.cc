#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "comm/mpi_runtime.h"
#include "comm/process_groups.h"
#include "commands.h"
#include "run/config.h"
#include "run/deepspeed_config.h"
#include "run/run_plan.h"
#include "track/events.h"
#include "train/trainer.h"

namespace strata::cli {

Command add_train_command(CLI::App& parent) {
  struct Args {
    std::string config;
    std::string deepspeed;
    std::vector<std::string> overrides;
  };
  auto args = std::make_shared<Args>();
  CLI::App* app = parent.add_subcommand("train",
                                        "train a model from a TOML config (one rank, or "
                                        "one rank of a job started by mpirun/srun)");
  app->add_option("config", args->config, "config file, e.g. configs/tiny.toml")->required();
  app->add_option("--set", args->overrides, "override a config key: --set train.steps=100")
      ->take_all()
      ->expected(1);
  app->add_option("--deepspeed", args->deepspeed,
                  "DeepSpeed JSON config whose training keys (batch, precision, ZeRO, optimizer, "
                  "scheduler, ...) override the TOML's; --set still applies last "
                  "(docs/DEEPSPEED.md)");
  return {app, [args] {
            const RankEnv env = detect_rank_env();
            const DeepSpeedConfig ds =
                args->deepspeed.empty() ? DeepSpeedConfig{} : read_deepspeed(args->deepspeed);
            RunConfig config = load_config_with_deepspeed(args->config, ds, args->overrides);
            if (!ds.source.empty() && env.rank == 0) {
              for (const std::string& w : ds.warnings)
                std::fprintf(stderr, "warning: %s: %s\n", ds.source.c_str(), w.c_str());
              std::fprintf(stderr, "deepspeed: %s -> %s\n", ds.source.c_str(),
                           describe_deepspeed(ds).c_str());
            }
            if (env.launcher == Launcher::none) {  // one plain process: no MPI at all
              resolve_deepspeed_batch(config, ds, args->overrides, 1);
              // A layout of more than one rank is refused here, saying what would fit.
              RunPlan plan = resolve_run_plan(config, 1, false);
              const std::string run_dir = config.run.dir;
              try {
                Trainer trainer(std::move(plan));
                trainer.run();
              } catch (const std::exception& e) {
                append_event(run_dir, 0, "error", -1, {{"message", e.what()}});
                throw;
              }
              return 0;
            }
            // One rank of a job (mpirun, srun, or strata launch): the plan is checked against
            // the world size before any work starts.
            MpiSession mpi;
            RunPlan plan;
            try {
              // DeepSpeed's train_batch_size counts every data-parallel rank: resolved here,
              // where the world size is known.
              resolve_deepspeed_batch(config, ds, args->overrides, mpi_world_size());
              plan = resolve_run_plan(config, mpi_world_size(), true);
            } catch (const std::exception& e) {
              // Every rank finds the same problem: one of them says it.
              if (mpi_world_rank() == 0) std::fprintf(stderr, "\nerror: %s\n", e.what());
              std::fflush(stderr);
              std::_Exit(1);
            }
            const std::string run_dir = config.run.dir;
            try {
              ProcessGroups groups = ProcessGroups::create(plan.layout);
              Trainer trainer(std::move(plan), &groups);
              trainer.run();
            } catch (const std::exception& e) {
              append_event(run_dir, mpi_world_rank(), "error", -1, {{"message", e.what()}});
              // The other ranks cannot see this error: end the whole job now rather than let
              // them wait for their communication timeout.
              std::fprintf(stderr, "\n[rank %d] error: %s\n", mpi_world_rank(), e.what());
              mpi_abort(1);
            }
            return 0;
          }};
}

}  // namespace strata::cli
