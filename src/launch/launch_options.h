// What `strata launch` is asked to do (LaunchOptions) and what it found on this machine
// (LaunchEnv). Kept apart so that command building is a pure function of the two.
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace strata::launch {

// An elastic restart: how many ranks to start, and the arguments that give the ranks their new
// layout (appended to the rank command, so later --set values win).
struct ElasticPlan {
  int ranks = 0;
  std::vector<std::string> extra_args;
  std::string description;  // "parallel.dp = 2, train.grad_accum = 2 (global batch 16 kept)"
};

struct LaunchOptions {
  int ranks = 1;
  std::string hostfile;            // mpirun only; empty: this host alone
  int max_restarts = 0;            // a failed or hung job is started again up to this many times
  double heartbeat_timeout = 300;  // seconds of silence that make a rank hung; <= 0: no watchdog
  double startup_timeout = 600;    // seconds until the first heartbeat must appear; <= 0: no limit
  double kill_grace = 5;           // seconds between SIGTERM and SIGKILL when the job must be ended
  double restart_delay = 1;        // seconds before a restart, so that ports and files are released
  bool dry_run = false;            // print the command and exit 0
  // --elastic: when the same rank fails again right after a restart (it cannot be brought back),
  // restart on the ranks that remain, with the layout `shrink` plans for that many ranks.
  bool elastic = false;
  std::function<std::optional<ElasticPlan>(int available_ranks)> shrink;

  // What every rank runs: `program args...`. cmd_launch sets the strata binary and
  // {"train", CONFIG, "--set", ...}; tests set a fake rank. Empty program: the strata binary.
  std::string program;
  std::vector<std::string> args;

  // The run directory: heartbeats are read from RUN_DIR/heartbeat and the launcher's output is
  // appended to RUN_DIR/launch.log. Empty: no log file and no watchdog.
  std::string run_dir;
};

// The machine, as far as the launch command depends on it (detect_launch_env fills it).
struct LaunchEnv {
  bool in_slurm = false;  // inside an allocation (SLURM_JOB_ID set) with srun on PATH
  bool is_root = false;   // mpirun refuses root without --allow-run-as-root
  int cores = 1;          // per host
  int hosts = 1;          // from the hostfile, or the SLURM allocation
  std::string self_exe;   // the strata binary (/proc/self/exe)
  // Variables of the launcher's environment that the ranks need forwarded: OMP_NUM_THREADS,
  // GLIBC_TUNABLES and every STRATA_* one, sorted by name.
  std::vector<std::pair<std::string, std::string>> vars;
};

}  // namespace strata::launch
