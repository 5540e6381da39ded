// `strata launch` as users type it: the binary, its options, its output and its exit status.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include "launch/heartbeat.h"
#include "launch_test_util.h"

namespace strata::launch {
namespace {

using namespace strata::launch::testing;

struct ShellRun {
  int status = -1;
  std::string out;  // stdout and stderr together
};

ShellRun run_shell(const std::string& cmd) {
  ShellRun r;
  if (FILE* p = ::popen((cmd + " 2>&1").c_str(), "r")) {
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
    const int ws = ::pclose(p);
    r.status = WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
  }
  return r;
}

const std::string kStrata = STRATA_CLI;
const std::string kConfig = std::string(STRATA_SOURCE_DIR) + "/configs/tiny.toml";

TEST(LaunchCli, DryRunPrintsTheTrainCommand) {
  const ShellRun r = run_shell(kStrata + " launch -n 3 --dry-run -- " + kConfig +
                               " --set train.steps=3 --set run.dir=/tmp/x");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(r.out.rfind("mpirun -np 3 ", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("--bind-to none"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(kStrata + " train " + kConfig + " --set train.steps=3 --set run.dir=/tmp/x"),
            std::string::npos)
      << r.out;
}

TEST(LaunchCli, SetBeforeTheSeparatorIsPassedOn) {
  const ShellRun r =
      run_shell(kStrata + " launch -n 2 --dry-run " + kConfig + " --set train.steps=3");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find(" train " + kConfig + " --set train.steps=3"), std::string::npos) << r.out;
}

TEST(LaunchCli, InsideSlurmUsesSrun) {
  io::TempDir dir;
  // A stand-in srun on PATH, and the variable an allocation sets: nothing is run (--dry-run).
  io::write_file_atomic(dir.file("srun"), "#!/bin/sh\nexit 0\n");
  ASSERT_EQ(::chmod(dir.file("srun").c_str(), 0755), 0);
  const ShellRun r = run_shell("SLURM_JOB_ID=42 PATH=" + dir.path() + ":$PATH " + kStrata +
                               " launch -n 2 --dry-run -- " + kConfig);
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(r.out.rfind("srun --mpi=pmix -n 2 --kill-on-bad-exit=1 ", 0), 0u) << r.out;
}

TEST(LaunchCli, BadConfigFailsBeforeStartingRanks) {
  const ShellRun r = run_shell(kStrata + " launch -n 2 -- /nonexistent.toml");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("/nonexistent.toml"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("mpirun"), std::string::npos) << r.out;
}

TEST(LaunchCli, FailedRankLineAndExitStatus) {
  io::TempDir dir;
  const ShellRun r = run_shell("STRATA_FAKE_FAIL_RANK=1 STRATA_FAKE_FAIL_STATUS=7 " + kStrata +
                               " launch -n 2 --max-restarts 1 --heartbeat-timeout 5 --program " +
                               STRATA_FAKE_RANK + " --run-dir " + dir.path() + " -- " + dir.path());
  EXPECT_EQ(r.status, 7) << r.out;
  EXPECT_NE(r.out.find("strata launch: rank 1 failed with exit status 7 (job attempt 1 of 2); "
                       "restarting in 1 s"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("strata launch: rank 1 failed with exit status 7 (job attempt 2 of 2); "
                       "no restarts left"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(leftover_processes(dir.path()), "");
}

TEST(LaunchCli, KilledSupervisorTakesTheJobWithIt) {
  io::TempDir dir;
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setenv("STRATA_FAKE_STEPS", "1000", 1);
    // Silent ranks: mpirun must not learn of the supervisor's death from a broken pipe.
    ::setenv("STRATA_FAKE_QUIET", "1", 1);
    ::execl(STRATA_CLI, STRATA_CLI, "launch", "-n", "2", "--program", STRATA_FAKE_RANK, "--run-dir",
            dir.path().c_str(), "--", dir.path().c_str(), nullptr);
    ::_exit(127);
  }
  ASSERT_GT(pid, 0);
  // Wait until both ranks run, then kill the supervisor the way nothing can catch.
  for (int i = 0; i < 100 && !(read_heartbeat(dir.path(), 0) && read_heartbeat(dir.path(), 1)); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_NE(leftover_processes(dir.path(), 0), "");
  ::kill(pid, SIGKILL);
  int ws = 0;
  ::waitpid(pid, &ws, 0);
  EXPECT_TRUE(WIFSIGNALED(ws));
  EXPECT_EQ(leftover_processes(dir.path(), 10), "");
}

}  // namespace
}  // namespace strata::launch
