// The supervisor end to end: real mpirun jobs of fake ranks (programs/fake_rank.cc) that succeed,
// fail, crash, hang or ignore SIGTERM. Each test checks what the user sees (the one line naming
// the rank, the exit status), that restarts happen as asked, and that no process is left behind.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "launch/heartbeat.h"
#include "launch/supervisor.h"
#include "launch_test_util.h"

namespace strata::launch {
namespace {

using namespace strata::launch::testing;
using Clock = std::chrono::steady_clock;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(Supervisor, SuccessExitsZero) {
  io::TempDir dir;
  ScopedEnv env;
  env.set("STRATA_FAKE_STEPS", "4");
  const LaunchReport r = supervise_job(fake_job(2, dir.path()));
  EXPECT_EQ(r.exit_status, 0);
  EXPECT_EQ(r.attempts, 1);
  EXPECT_TRUE(r.failures.empty());
  for (int rank = 0; rank < 2; ++rank) {
    const auto beat = read_heartbeat(dir.path(), rank);
    ASSERT_TRUE(beat) << "rank " << rank;
    EXPECT_EQ(beat->phase, kPhaseDone);
    EXPECT_EQ(beat->step, 4);
  }
  const std::string log = file_or_empty(dir.file("launch.log"));
  EXPECT_TRUE(contains(log, "fake rank 0 step 4")) << log;  // the ranks' output is logged too
  EXPECT_TRUE(contains(log, "job finished (job attempt 1 of 1")) << log;
  EXPECT_EQ(leftover_processes(dir.path()), "");
}

TEST(Supervisor, FailedRankIsNamedWithItsStatus) {
  io::TempDir dir;
  ScopedEnv env;
  env.set("STRATA_FAKE_FAIL_RANK", "1");
  env.set("STRATA_FAKE_FAIL_STATUS", "3");
  const LaunchReport r = supervise_job(fake_job(2, dir.path()));
  EXPECT_EQ(r.exit_status, 3);
  ASSERT_EQ(r.failures.size(), 1u);
  EXPECT_EQ(r.failures[0], "rank 1 failed with exit status 3 (job attempt 1 of 1)");
  EXPECT_TRUE(contains(file_or_empty(dir.file("launch.log")),
                       "strata launch: rank 1 failed with exit status 3 (job attempt 1 of 1)"));
  EXPECT_EQ(leftover_processes(dir.path()), "");
}

TEST(Supervisor, CrashedRankIsNamedWithItsSignal) {
  io::TempDir dir;
  ScopedEnv env;
  env.set("STRATA_FAKE_FAIL_RANK", "0");
  env.set("STRATA_FAKE_FAIL_SIGNAL", std::to_string(SIGSEGV));
  const LaunchReport r = supervise_job(fake_job(2, dir.path()));
  EXPECT_EQ(r.exit_status, 128 + SIGSEGV);
  ASSERT_EQ(r.failures.size(), 1u);
  EXPECT_EQ(r.failures[0],
            "rank 0 was killed by signal 11 (Segmentation fault) (job attempt 1 of 1)");
  EXPECT_EQ(leftover_processes(dir.path()), "");
}

TEST(Supervisor, RestartsUpToTheLimitThenReportsTheFinalStatus) {
  io::TempDir dir;
  ScopedEnv env;
  env.set("STRATA_FAKE_FAIL_RANK", "1");
  env.set("STRATA_FAKE_FAIL_STATUS", "5");
  LaunchOptions o = fake_job(2, dir.path());
  o.max_restarts = 2;
  const LaunchReport r = supervise_job(o);
  EXPECT_EQ(r.exit_status, 5);
  EXPECT_EQ(r.attempts, 3);
  ASSERT_EQ(r.failures.size(), 3u);
  for (int a = 0; a < 3; ++a)
    EXPECT_EQ(r.failures[a],
              cat("rank 1 failed with exit status 5 (job attempt ", a + 1, " of 3)"));
  // Every attempt really ran, and told its ranks its number.
  EXPECT_EQ(file_or_empty(dir.file("attempts_rank_0.txt")), "1\n2\n3\n");
  const std::string log = file_or_empty(dir.file("launch.log"));
  EXPECT_TRUE(contains(log, "restarting the job (job attempt 2 of 3) after: rank 1 failed")) << log;
  EXPECT_TRUE(contains(log, "(job attempt 3 of 3); no restarts left")) << log;
  EXPECT_EQ(leftover_processes(dir.path()), "");
}

TEST(Supervisor, RestartedJobThatSucceedsExitsZero) {
  io::TempDir dir;
  ScopedEnv env;
  env.set("STRATA_FAKE_FAIL_RANK", "0");
  env.set("STRATA_FAKE_FAIL_ATTEMPTS", "1");  // a transient failure: only the first attempt
  LaunchOptions o = fake_job(2, dir.path());
  o.max_restarts = 3;
  const LaunchReport r = supervise_job(o);
  EXPECT_EQ(r.exit_status, 0);
  EXPECT_EQ(r.attempts, 2);
  ASSERT_EQ(r.failures.size(), 1u);
  EXPECT_EQ(r.failures[0], "rank 0 failed with exit status 3 (job attempt 1 of 4)");
}

TEST(Supervisor, HungRankIsDetectedAndTheJobKilled) {
  io::TempDir dir;
  ScopedEnv env;
  env.set("STRATA_FAKE_HANG_RANK", "1");
  env.set("STRATA_FAKE_HANG_STEP", "2");
  env.set("STRATA_FAKE_STEPS", "50");
  LaunchOptions o = fake_job(2, dir.path());
  o.heartbeat_timeout = 2;
  const Clock::time_point start = Clock::now();
  const LaunchReport r = supervise_job(o);
  const double took = seconds_since(start);
  EXPECT_EQ(r.exit_status, kHungExitStatus);
  ASSERT_EQ(r.failures.size(), 1u);
  EXPECT_TRUE(contains(r.failures[0], "hung: rank 1 silent for")) << r.failures[0];
  EXPECT_TRUE(contains(r.failures[0], "last heartbeat: step 1, phase \"step\"")) << r.failures[0];
  EXPECT_FALSE(contains(r.failures[0], "rank 0")) << r.failures[0];  // rank 0 kept beating
  // Start-up, one step, the timeout, one poll, SIGTERM: well under timeout + grace + 5 s.
  EXPECT_LT(took, o.heartbeat_timeout + o.kill_grace + 5) << took;
  EXPECT_EQ(leftover_processes(dir.path()), "");
}

TEST(Supervisor, HungRankThatIgnoresSigtermIsKilled) {
  io::TempDir dir;
  ScopedEnv env;
  env.set("STRATA_FAKE_HANG_RANK", "0");
  env.set("STRATA_FAKE_HANG_STEP", "1");
  env.set("STRATA_FAKE_IGNORE_TERM", "1");
  env.set("STRATA_FAKE_STEPS", "50");
  LaunchOptions o = fake_job(2, dir.path());
  o.heartbeat_timeout = 2;
  o.max_restarts = 1;  // and the restart hangs the same way: killed twice
  const Clock::time_point start = Clock::now();
  const LaunchReport r = supervise_job(o);
  EXPECT_EQ(r.exit_status, kHungExitStatus);
  EXPECT_EQ(r.attempts, 2);
  ASSERT_EQ(r.failures.size(), 2u);
  EXPECT_TRUE(contains(r.failures[1], "hung: rank 0 silent for")) << r.failures[1];
  EXPECT_LT(seconds_since(start), 2 * (o.heartbeat_timeout + o.kill_grace + 4));
  EXPECT_EQ(leftover_processes(dir.path()), "");
}

TEST(Supervisor, JobThatNeverBeatsIsKilledAfterTheStartupTimeout) {
  io::TempDir dir;
  ScopedEnv env;
  env.set("STRATA_FAKE_NO_HEARTBEAT", "1");
  env.set("STRATA_FAKE_STEPS", "1000");
  LaunchOptions o = fake_job(2, dir.path());
  o.startup_timeout = 3;
  const Clock::time_point start = Clock::now();
  const LaunchReport r = supervise_job(o);
  EXPECT_EQ(r.exit_status, kHungExitStatus);
  ASSERT_EQ(r.failures.size(), 1u);
  EXPECT_TRUE(contains(r.failures[0], "no rank wrote a heartbeat within 3.0 s")) << r.failures[0];
  EXPECT_LT(seconds_since(start), o.startup_timeout + o.kill_grace + 4);
  EXPECT_EQ(leftover_processes(dir.path()), "");
}

TEST(Supervisor, InterruptStopsTheJobWithoutRestarting) {
  io::TempDir dir;
  ScopedEnv env;
  env.set("STRATA_FAKE_STEPS", "1000");
  LaunchOptions o = fake_job(2, dir.path());
  o.max_restarts = 5;
  // As a terminal's Ctrl-C or a scheduler's SIGTERM would, once the job runs.
  std::thread interrupter([] {
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    ::kill(::getpid(), SIGTERM);
  });
  const LaunchReport r = supervise_job(o);
  interrupter.join();
  EXPECT_TRUE(r.interrupted);
  EXPECT_EQ(r.exit_status, 128 + SIGTERM);
  EXPECT_EQ(r.attempts, 1);
  EXPECT_EQ(leftover_processes(dir.path()), "");
}

TEST(Supervisor, DryRunStartsNothing) {
  io::TempDir dir;
  LaunchOptions o = fake_job(2, dir.path());
  o.dry_run = true;
  ::testing::internal::CaptureStdout();
  const LaunchReport r = supervise_job(o);
  const std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_EQ(r.exit_status, 0);
  EXPECT_EQ(r.attempts, 0);
  EXPECT_EQ(out.rfind("mpirun -np 2 ", 0), 0u) << out;
  EXPECT_TRUE(contains(out, std::string(STRATA_FAKE_RANK) + " " + dir.path())) << out;
  EXPECT_FALSE(std::filesystem::exists(dir.file("launch.log")));
}

}  // namespace
}  // namespace strata::launch
