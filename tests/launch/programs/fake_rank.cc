// A stand-in for a training rank, for the supervisor tests: launched under mpirun (or srun) it
// "trains" for a few steps, writing heartbeats like the trainer, and fails as its environment
// says. Not an MPI program: the launchers report its exit status all the same.
//
//   fake_rank RUN_DIR        (RUN_DIR also marks the processes of one test for pgrep)
//
// STRATA_FAKE_STEPS (5), STRATA_FAKE_STEP_MS (100): the run.
// STRATA_FAKE_FAIL_RANK, STRATA_FAKE_FAIL_STEP (2), STRATA_FAKE_FAIL_STATUS (3): exit with that
//   status at that step; STRATA_FAKE_FAIL_SIGNAL: raise that signal instead;
//   STRATA_FAKE_FAIL_ATTEMPTS: fail only in the first N job attempts (STRATA_LAUNCH_ATTEMPT).
// STRATA_FAKE_HANG_RANK, STRATA_FAKE_HANG_STEP (2): stop beating and sleep forever;
//   STRATA_FAKE_IGNORE_TERM=1: and ignore SIGTERM (only SIGKILL ends it).
// STRATA_FAKE_NO_HEARTBEAT=1: never write a heartbeat.
// STRATA_FAKE_QUIET=1: print nothing (a job whose launcher would not notice a closed console).
// Every rank appends its attempt number to RUN_DIR/attempts_rank_R.txt when it starts.
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#include "launch/heartbeat.h"

namespace {

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

int my_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID"})
    if (std::getenv(name)) return env_int(name, 0);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: fake_rank RUN_DIR\n");
    return 2;
  }
  const std::string run_dir = argv[1];
  const int rank = my_rank();
  const int attempt = env_int("STRATA_LAUNCH_ATTEMPT", 1);
  const int steps = env_int("STRATA_FAKE_STEPS", 5);
  const int step_ms = env_int("STRATA_FAKE_STEP_MS", 100);
  const bool fails = env_int("STRATA_FAKE_FAIL_RANK", -1) == rank &&
                     attempt <= env_int("STRATA_FAKE_FAIL_ATTEMPTS", 1 << 30);
  const int fail_step = env_int("STRATA_FAKE_FAIL_STEP", 2);
  const bool hangs = env_int("STRATA_FAKE_HANG_RANK", -1) == rank;
  const int hang_step = env_int("STRATA_FAKE_HANG_STEP", 2);
  const bool beats = env_int("STRATA_FAKE_NO_HEARTBEAT", 0) == 0;
  const bool quiet = env_int("STRATA_FAKE_QUIET", 0) != 0;

  const rlimit no_core{0, 0};  // a deliberate crash should not leave core files around
  ::setrlimit(RLIMIT_CORE, &no_core);
  std::ofstream(run_dir + "/attempts_rank_" + std::to_string(rank) + ".txt", std::ios::app)
      << attempt << "\n";
  if (beats) strata::launch::write_heartbeat(run_dir, rank, 0, "init");
  for (int step = 1; step <= steps; ++step) {
    std::this_thread::sleep_for(std::chrono::milliseconds(step_ms));
    if (fails && step == fail_step) {
      std::printf("fake rank %d failing at step %d\n", rank, step);
      std::fflush(stdout);
      if (const int sig = env_int("STRATA_FAKE_FAIL_SIGNAL", 0)) ::raise(sig);
      return env_int("STRATA_FAKE_FAIL_STATUS", 3);
    }
    if (hangs && step == hang_step) {
      std::printf("fake rank %d hanging at step %d\n", rank, step);
      std::fflush(stdout);
      if (env_int("STRATA_FAKE_IGNORE_TERM", 0)) ::signal(SIGTERM, SIG_IGN);
      for (;;) ::pause();
    }
    if (beats) strata::launch::write_heartbeat(run_dir, rank, step, "step");
    if (rank == 0 && !quiet) std::printf("fake rank 0 step %d\n", step);
    std::fflush(stdout);
  }
  if (beats) strata::launch::write_heartbeat(run_dir, rank, steps, strata::launch::kPhaseDone);
  return 0;
}
