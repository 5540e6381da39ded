// `strata launch`: supervises N ranks of `strata train CONFIG [--set ...]` (src/launch).
// This file only turns the command line into LaunchOptions; the config is read here, where every
// layer is linked, because the launch layer must not depend on train.
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "commands.h"
#include "core/error.h"
#include "launch/supervisor.h"
#include "launch_emit.h"
#include "run/config.h"
#include "run/deepspeed_config.h"
#include "run/run_plan.h"

namespace strata::cli {

namespace {

// The --set values among the arguments that follow CONFIG (both "--set k=v" and "--set=k=v").
std::vector<std::string> overrides_in(const std::vector<std::string>& args) {
  std::vector<std::string> out;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--set" && i + 1 < args.size())
      out.push_back(args[++i]);
    else if (args[i].rfind("--set=", 0) == 0)
      out.push_back(args[i].substr(6));
  }
  return out;
}

// The --deepspeed file among the arguments that follow CONFIG ("--deepspeed F" or
// "--deepspeed=F"), or "".
std::string deepspeed_in(const std::vector<std::string>& args) {
  std::string out;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--deepspeed" && i + 1 < args.size())
      out = args[++i];
    else if (args[i].rfind("--deepspeed=", 0) == 0)
      out = args[i].substr(12);
  }
  return out;
}

// Plans elastic restarts: tp and pp stay (the model's split does not depend on the ranks
// lost), data parallelism takes what remains, and the global batch (micro-batch x accumulation
// x dp) is kept by raising the accumulation, never the micro-batch (its memory is what fitted).
// The largest dp whose accumulation comes out whole wins.
std::function<std::optional<launch::ElasticPlan>(int)> elastic_planner(const RunPlan& run) {
  const RunConfig& config = run.config;
  const int64_t model_ranks = run.layout.tp * run.layout.pp;
  const int64_t global = config.train.batch_size * config.train.grad_accum * run.layout.dp;
  return [=](int available) -> std::optional<launch::ElasticPlan> {
    for (int64_t d = available / model_ranks; d >= 1; --d) {
      if (global % (config.train.batch_size * d) != 0) continue;
      const int64_t accum = global / (config.train.batch_size * d);
      launch::ElasticPlan plan;
      plan.ranks = static_cast<int>(d * model_ranks);
      plan.extra_args = {"--set", cat("parallel.dp=", d), "--set", cat("train.grad_accum=", accum)};
      plan.description = cat("parallel.dp = ", d, ", train.grad_accum = ", accum,
                             " (global batch of ", global, " sequences kept)");
      return plan;
    }
    return std::nullopt;
  };
}

// `strata launch -n N --emit slurm [SLURM options] -- prepare PREPARE-ARGS`: the same jobs as
// `strata prepare PREPARE-ARGS --emit slurm --workers N`, with the launch's SLURM options.
int emit_prepare_job(const EmitArgs& emit, int ranks, const std::vector<std::string>& command) {
  STRATA_CHECK(emit.emit == EmitKind::slurm,
               "strata launch -- prepare: a prepare is launched as SLURM jobs (--emit slurm); to "
               "run it here on N processes, run `mpirun -n N strata prepare ...`");
  std::vector<std::string> argv = {"strata"};
  argv.insert(argv.end(), command.begin(), command.end());
  argv.insert(argv.end(), {"--emit", "slurm", "--workers", std::to_string(ranks)});
  for (const auto& [flag, value] : {std::pair<std::string, std::string>{"--job-file", emit.out},
                                    {"--job-name", emit.name},
                                    {"--time", emit.time},
                                    {"--partition", emit.partition},
                                    {"--mem", emit.memory},
                                    {"--workdir", emit.workdir}})
    if (!value.empty()) argv.insert(argv.end(), {flag, value});
  if (emit.cpus_per_task > 0)
    argv.insert(argv.end(), {"--cpus-per-task", std::to_string(emit.cpus_per_task)});
  STRATA_CHECK(emit.nodes == 0 && emit.gpus_per_node == 0,
               "strata launch -- prepare: --nodes and --gpus-per-node are for training jobs; a "
               "prepare's array tasks are placed by SLURM (-n sets their number)");
  CLI::App app("strata");
  app.require_subcommand(1);
  const Command prepare = add_prepare_command(app);
  std::vector<const char*> args;
  for (const std::string& a : argv) args.push_back(a.c_str());
  try {
    app.parse(static_cast<int>(args.size()), args.data());
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return prepare.run();
}

}  // namespace

Command add_launch_command(CLI::App& parent) {
  struct Args {
    launch::LaunchOptions options;
    std::vector<std::string> command;  // CONFIG [--set k=v ...], or the --program's arguments
    std::vector<std::string> sets;     // --set given before `--`
    std::string deepspeed;             // --deepspeed given before `--`
    EmitArgs emit;                     // --emit slurm|k8s: write a job instead (launch_emit.h)
  };
  auto args = std::make_shared<Args>();
  CLI::App* app = parent.add_subcommand(
      "launch",
      "run N ranks of `strata train CONFIG` under mpirun (or srun inside a SLURM allocation), "
      "restart failed jobs and kill hung ones. Usage: strata launch -n N [options] -- CONFIG "
      "[--set key=value ...]; or strata launch -n N --emit slurm -- prepare ARGS (a prepare as "
      "SLURM array jobs of N workers)");
  launch::LaunchOptions& o = args->options;
  app->add_option("-n,--ranks", o.ranks, "number of ranks")->required()->check(CLI::PositiveNumber);
  app->add_option("--hostfile", o.hostfile, "Open MPI hostfile (mpirun only)")
      ->check(CLI::ExistingFile);
  app->add_option("--max-restarts", o.max_restarts,
                  "start a failed or hung job again up to K times (it resumes from the run's "
                  "latest checkpoint)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app->add_option("--heartbeat-timeout", o.heartbeat_timeout,
                  "seconds without a heartbeat after which a rank is hung and the job is killed "
                  "(0: no watchdog)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app->add_option("--startup-timeout", o.startup_timeout,
                  "seconds for the first heartbeat to appear (0: no limit)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app->add_option("--kill-grace", o.kill_grace,
                  "seconds between SIGTERM and SIGKILL when the job must be stopped")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app->add_flag("--dry-run", o.dry_run, "print the command that starts the ranks, and exit");
  app->add_flag(
      "--elastic", o.elastic,
      "when a rank fails again right after a restart, or a host of the --hostfile is down "
      "(its remote start fails, or it is lost again after a restart), restart on the "
      "remaining ranks (data parallelism shrinks, the global batch is kept by gradient "
      "accumulation)");
  app->add_option("--set", args->sets, "override a config key, as for `strata train`")
      ->take_all()
      ->expected(1);
  app->add_option("--deepspeed", args->deepspeed,
                  "DeepSpeed JSON config, as for `strata train` (also accepted after CONFIG)");
  // For tests and tools: run PROGRAM ARGS... as the ranks instead of `strata train`; the run
  // directory (heartbeats, launch.log) then comes from --run-dir, as there is no config to read.
  app->add_option("--program", o.program, "run this program instead of `strata train`")->group("");
  app->add_option("--run-dir", o.run_dir, "run directory when --program is used")->group("");
  app->add_option("command", args->command, "-- CONFIG [--set key=value ...]")->required();
  add_emit_options(app, args->emit);

  return {app, [args] {
            launch::LaunchOptions options = args->options;
            std::vector<std::string> command = args->command;
            for (const std::string& s : args->sets) command.insert(command.end(), {"--set", s});
            if (!args->deepspeed.empty())
              command.insert(command.end(), {"--deepspeed", args->deepspeed});
            if (!command.empty() && command.front() == "prepare" && options.program.empty())
              return emit_prepare_job(args->emit, options.ranks, command);
            STRATA_CHECK(options.program.empty() || args->emit.emit == EmitKind::none,
                         "strata launch: --emit writes a training job; it does not take --program");
            if (!options.program.empty()) {
              // mpirun and srun resolve a bare name on PATH; a relative path is made absolute so
              // that it does not depend on the ranks' working directory.
              if (options.program.find('/') != std::string::npos)
                options.program = std::filesystem::absolute(options.program).string();
              options.args = command;
            } else {
              STRATA_CHECK(options.run_dir.empty(),
                           "strata launch: --run-dir is for --program; the run directory of a "
                           "training job is its config's run.dir (--set run.dir=...)");
              // Read now, so that a bad config fails once here rather than on every rank.
              const std::vector<std::string> rest(command.begin() + 1, command.end());
              const std::vector<std::string> sets = overrides_in(rest);
              DeepSpeedConfig ds;
              if (const std::string f = deepspeed_in(rest); !f.empty()) ds = read_deepspeed(f);
              RunConfig config = load_config_with_deepspeed(command.front(), ds, sets);
              resolve_deepspeed_batch(config, ds, sets, options.ranks);
              // The layout against the ranks asked for, once here rather than on every rank.
              const RunPlan plan = resolve_run_plan(config, options.ranks, true);
              options.run_dir = config.run.dir;
              if (args->emit.emit != EmitKind::none)
                return emit_job(args->emit, plan, command, options.ranks, options.max_restarts);
              if (options.elastic) options.shrink = elastic_planner(plan);
              options.args = {"train"};
              options.args.insert(options.args.end(), command.begin(), command.end());
            }
            return launch::supervise(options);
          }};
}

}  // namespace strata::cli
