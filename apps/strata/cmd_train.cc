#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "comm/layout.h"
#include "comm/mpi_runtime.h"
#include "comm/process_groups.h"
#include "commands.h"
#include "model/shard.h"
#include "run/config.h"
#include "run/deepspeed_config.h"
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
            if (env.launcher == "none" && config.parallel.tp * config.parallel.pp *
                                                  std::max<int64_t>(1, config.parallel.dp) ==
                                              1) {
              resolve_deepspeed_batch(config, ds, args->overrides, 1);
              const std::string run_dir = config.run.dir;
              try {
                Trainer trainer(std::move(config));  // one process: no MPI at all
                trainer.run();
              } catch (const std::exception& e) {
                append_event(run_dir, 0, "error", -1, {{"message", e.what()}});
                throw;
              }
              return 0;
            }
            // One rank of a job (mpirun, srun, or strata launch): the layout is checked
            // against the world size before any work starts.
            MpiSession mpi;
            const ParallelConfig& p = config.parallel;
            Layout layout;
            try {
              // DeepSpeed's train_batch_size counts every data-parallel rank: resolved here,
              // where the world size is known.
              resolve_deepspeed_batch(config, ds, args->overrides, mpi_world_size());
              layout = resolve_layout(static_cast<int>(p.tp), static_cast<int>(p.pp),
                                      static_cast<int>(p.dp), static_cast<int>(p.zero),
                                      mpi_world_size());
              // The model must split over tp (heads, kv heads, MLP, vocabulary), sp and the
              // pipeline stages: checked here, once, for rank 0 to report.
              ModelConfig model = config.model;
              model.finalize();
              make_shard(model, layout.tp, 0, p.sp, layout.pp, 0, static_cast<int>(p.vpp),
                         config.train.batch_size * config.train.seq_len, p.stage_layers);
            } catch (const std::exception& e) {
              // Every rank finds the same problem: one of them says it.
              if (mpi_world_rank() == 0) std::fprintf(stderr, "\nerror: %s\n", e.what());
              std::fflush(stderr);
              std::_Exit(1);
            }
            const std::string run_dir = config.run.dir;
            try {
              ProcessGroups groups = ProcessGroups::create(layout);
              Trainer trainer(std::move(config), &groups);
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
