// parse_failure on output captured from the real launchers on this project's machines: Open MPI
// 4.1.4's mpirun and SLURM 22.05's srun (--mpi=pmix), each running a 2- or 3-rank program whose
// rank 1 (or 2) exits with a status, crashes, is killed, aborts or cannot start.
#include <gtest/gtest.h>
#include <signal.h>

#include "launch/failure.h"

namespace strata::launch {
namespace {

// mpirun -np 3 ./fail: rank 1 returns 3 from main after MPI_Finalize.
constexpr const char* kMpirunExitCode = R"(rank 1 of 3
rank 2 of 3
rank 0 of 3
--------------------------------------------------------------------------
Primary job  terminated normally, but 1 process returned
a non-zero exit code. Per user-direction, the job has been aborted.
--------------------------------------------------------------------------
--------------------------------------------------------------------------
mpirun detected that one or more processes exited with non-zero status, thus causing
the job to be terminated. The first process to do so was:

  Process name: [[3607,1],1]
  Exit code:    3
--------------------------------------------------------------------------
)";

// mpirun -np 3 ./fail: rank 1 raises SIGSEGV (Open MPI's own backtrace handler prints first).
constexpr const char* kMpirunSegfault = R"(rank 2 of 3
rank 1 of 3
[vm:25360] *** Process received signal ***
[vm:25360] Signal: Segmentation fault (11)
[vm:25360] Signal code:  (-6)
[vm:25360] Failing at address: 0x6310
[vm:25360] [ 0] /lib/x86_64-linux-gnu/libc.so.6(+0x3c050)[0x7f8715e5a050]
[vm:25360] [ 1] /lib/x86_64-linux-gnu/libc.so.6(+0x8aeec)[0x7f8715ea8eec]
[vm:25360] [ 2] /lib/x86_64-linux-gnu/libc.so.6(gsignal+0x12)[0x7f8715e59fb2]
[vm:25360] [ 3] ./fail(+0xbca3)[0x55a8838c0ca3]
[vm:25360] [ 4] /lib/x86_64-linux-gnu/libc.so.6(+0x2724a)[0x7f8715e4524a]
[vm:25360] [ 5] /lib/x86_64-linux-gnu/libc.so.6(__libc_start_main+0x85)[0x7f8715e45305]
[vm:25360] [ 6] ./fail(+0xbb21)[0x55a8838c0b21]
[vm:25360] *** End of error message ***
rank 0 of 3
--------------------------------------------------------------------------
Primary job  terminated normally, but 1 process returned
a non-zero exit code. Per user-direction, the job has been aborted.
--------------------------------------------------------------------------
--------------------------------------------------------------------------
mpirun noticed that process rank 1 with PID 0 on node vm exited on signal 11 (Segmentation fault).
--------------------------------------------------------------------------
)";

// mpirun -np 3 ./fail: rank 1 raises SIGKILL (what the kernel's OOM killer does).
constexpr const char* kMpirunKilled = R"(rank 0 of 3
rank 1 of 3
rank 2 of 3
--------------------------------------------------------------------------
Primary job  terminated normally, but 1 process returned
a non-zero exit code. Per user-direction, the job has been aborted.
--------------------------------------------------------------------------
--------------------------------------------------------------------------
mpirun noticed that process rank 1 with PID 0 on node vm exited on signal 9 (Killed).
--------------------------------------------------------------------------
)";

// mpirun -np 3 nompi.sh: a program that is not an MPI program; rank 2 exits with 5.
constexpr const char* kMpirunNonMpi = R"(rank 2
rank 0
rank 1
--------------------------------------------------------------------------
Primary job  terminated normally, but 1 process returned
a non-zero exit code. Per user-direction, the job has been aborted.
--------------------------------------------------------------------------
--------------------------------------------------------------------------
mpirun detected that one or more processes exited with non-zero status, thus causing
the job to be terminated. The first process to do so was:

  Process name: [[3915,1],2]
  Exit code:    5
--------------------------------------------------------------------------
)";

// mpirun -np 2 ./fin0: rank 1 calls exit(0) without MPI_Finalize (mpirun exits with 1).
constexpr const char* kMpirunNoFinalize =
    R"(--------------------------------------------------------------------------
mpirun has exited due to process rank 1 with PID 0 on
node vm exiting improperly. There are three reasons this could occur:

1. this process did not call "init" before exiting, but others in
the job did. This can cause a job to hang indefinitely while it waits
for all processes to call "init". By rule, if one process calls "init",
then ALL processes must call "init" prior to termination.

2. this process called "init", but exited without calling "finalize".
By rule, all processes that call "init" MUST call "finalize" prior to
exiting or it will be considered an "abnormal termination"
)";

// mpirun -np 2 ./abort: rank 1 calls MPI_Abort(MPI_COMM_WORLD, 7).
constexpr const char* kMpirunAbort =
    R"(--------------------------------------------------------------------------
MPI_ABORT was invoked on rank 1 in communicator MPI_COMM_WORLD
with errorcode 7.

NOTE: invoking MPI_ABORT causes Open MPI to kill all MPI processes.
You may or may not see output from other processes, depending on
exactly when Open MPI kills them.
--------------------------------------------------------------------------
)";

// mpirun -np 2 /nonexistent.
constexpr const char* kMpirunNotFound =
    R"(--------------------------------------------------------------------------
mpirun was unable to launch the specified application as it could not access
or execute an executable:

Executable: /nonexistent
Node: vm

while attempting to start process rank 0.
--------------------------------------------------------------------------
2 total processes failed to start
)";

// salloc -n 2 srun --mpi=pmix -n 2 ./fail: rank 1 returns 3.
constexpr const char* kSrunExitCode = R"(salloc: Granted job allocation 2
rank 0 of 2
rank 1 of 2
srun: error: vm: task 1: Exited with exit code 3
salloc: Relinquishing job allocation 2
)";

// The same, rank 1 raises SIGSEGV.
constexpr const char* kSrunSegfault = R"(salloc: Granted job allocation 3
rank 1 of 2
rank 0 of 2
[vm:26147] *** Process received signal ***
[vm:26147] Signal: Segmentation fault (11)
[vm:26147] Signal code:  (-6)
[vm:26147] Failing at address: 0x6623
[vm:26147] *** End of error message ***
srun: error: vm: task 1: Segmentation fault
salloc: Relinquishing job allocation 3
)";

// The same, rank 1 raises SIGKILL.
constexpr const char* kSrunKilled = R"(salloc: Granted job allocation 4
rank 0 of 2
rank 1 of 2
srun: error: vm: task 1: Killed
srun: Force Terminated StepId=4.0
salloc: Relinquishing job allocation 4
salloc: Job allocation 4 has been revoked.
)";

// Rank 1 exits with 3 without MPI_Finalize while rank 0 waits: srun then kills rank 0. The cause
// is rank 1, although srun's own exit status (137) is rank 0's.
constexpr const char* kSrunExitThenKill = R"(salloc: Granted job allocation 5
rank 0 of 2
rank 1 of 2
srun: error: vm: task 1: Exited with exit code 3
slurmstepd-vm: error:  mpi/pmix_v4: _errhandler: vm [0]: pmixp_client_v2.c:211: Error handler invoked: status = -61, source = [slurm.pmix.5.0:1]
srun: Job step aborted: Waiting up to 7 seconds for job step to finish.
slurmstepd-vm: error: *** STEP 5.0 ON vm CANCELLED AT 2026-11-29T14:17:44 ***
srun: error: vm: task 0: Killed
salloc: Relinquishing job allocation 5
)";

// Rank 1 calls MPI_Abort(7) under srun: srun reports the rank it killed (0) first.
constexpr const char* kSrunAbort = R"(salloc: Granted job allocation 7
--------------------------------------------------------------------------
MPI_ABORT was invoked on rank 1 in communicator MPI_COMM_WORLD
with errorcode 7.

NOTE: invoking MPI_ABORT causes Open MPI to kill all MPI processes.
You may or may not see output from other processes, depending on
exactly when Open MPI kills them.
--------------------------------------------------------------------------
srun: Job step aborted: Waiting up to 7 seconds for job step to finish.
slurmstepd-vm: error: *** STEP 7.0 ON vm CANCELLED AT 2026-11-29T14:17:45 ***
srun: error: vm: task 0: Killed
srun: error: vm: task 1: Exited with exit code 7
salloc: Relinquishing job allocation 7
)";

// strata launch (srun --kill-on-bad-exit=1) with fake ranks: rank 1 exits with 3, srun then
// terminates rank 0.
constexpr const char* kSrunExitThenTerminate = R"(salloc: Granted job allocation 9
fake rank 0 step 1
fake rank 0 step 2
fake rank 1 failing at step 2
fake rank 0 step 3
srun: error: vm: task 1: Exited with exit code 3
srun: launch/slurm: _step_signal: Terminating StepId=9.0
slurmstepd-vm: error: *** STEP 9.0 ON vm CANCELLED AT 2026-11-29T14:31:42 ***
srun: error: vm: task 0: Terminated
srun: Force Terminated StepId=9.0
)";

// Both ranks exit with 3: srun names them together.
constexpr const char* kSrunTasksExit = R"(salloc: Granted job allocation 12
srun: error: vm: tasks 0-1: Exited with exit code 3
salloc: Relinquishing job allocation 12
)";

// Both ranks exit on their own, one after the other, with different statuses.
constexpr const char* kSrunTwoExits = R"(salloc: Granted job allocation 13
srun: error: vm: task 0: Exited with exit code 4
srun: launch/slurm: _step_signal: Terminating StepId=13.0
srun: error: vm: task 1: Exited with exit code 5
salloc: Relinquishing job allocation 13
)";

// strata launch killed a hung job (SIGTERM to srun): srun reports the ranks it killed; no rank
// failed on its own, so the first one named is all there is.
constexpr const char* kSrunForcedTermination = R"(fake rank 0 step 39
srun: forcing job termination
srun: Job step aborted: Waiting up to 7 seconds for job step to finish.
slurmstepd-vm: error: *** STEP 10.0 ON vm CANCELLED AT 2026-11-29T14:31:48 ***
srun: error: vm: tasks 0-1: Killed
srun: launch/slurm: _step_signal: Terminating StepId=10.0
)";

struct Case {
  const char* name;
  const char* output;
  int rank, exit_code, signal;
  const char* describe;
  int exit_status;
};

TEST(ParseFailure, RealLauncherOutput) {
  const Case cases[] = {
      {"mpirun exit code", kMpirunExitCode, 1, 3, 0, "rank 1 failed with exit status 3", 3},
      {"mpirun segfault", kMpirunSegfault, 1, -1, SIGSEGV,
       "rank 1 was killed by signal 11 (Segmentation fault)", 139},
      {"mpirun killed", kMpirunKilled, 1, -1, SIGKILL, "rank 1 was killed by signal 9 (Killed)",
       137},
      {"mpirun non-MPI program", kMpirunNonMpi, 2, 5, 0, "rank 2 failed with exit status 5", 5},
      {"mpirun no finalize", kMpirunNoFinalize, 1, -1, 0,
       "rank 1 failed (exited without finalizing MPI)", 1},
      {"mpirun MPI_Abort", kMpirunAbort, 1, 7, 0, "rank 1 failed with exit status 7 (MPI_Abort)",
       7},
      {"mpirun not found", kMpirunNotFound, 0, -1, 0, "rank 0 failed (could not be started)", 1},
      {"srun exit code", kSrunExitCode, 1, 3, 0, "rank 1 failed with exit status 3", 3},
      {"srun segfault", kSrunSegfault, 1, -1, SIGSEGV,
       "rank 1 was killed by signal 11 (Segmentation fault)", 139},
      {"srun killed", kSrunKilled, 1, -1, SIGKILL, "rank 1 was killed by signal 9 (Killed)", 137},
      {"srun exit then kill", kSrunExitThenKill, 1, 3, 0, "rank 1 failed with exit status 3", 3},
      {"srun MPI_Abort", kSrunAbort, 1, 7, 0, "rank 1 failed with exit status 7 (MPI_Abort)", 7},
      {"srun exit then terminate", kSrunExitThenTerminate, 1, 3, 0,
       "rank 1 failed with exit status 3", 3},
      {"srun tasks exit", kSrunTasksExit, 0, 3, 0, "rank 0 failed with exit status 3", 3},
      {"srun two exits", kSrunTwoExits, 0, 4, 0, "rank 0 failed with exit status 4", 4},
      {"srun forced termination", kSrunForcedTermination, 0, -1, SIGKILL,
       "rank 0 was killed by signal 9 (Killed)", 137},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::optional<RankFailure> f = parse_failure(c.output);
    ASSERT_TRUE(f.has_value());
    EXPECT_EQ(f->rank, c.rank);
    EXPECT_EQ(f->exit_code, c.exit_code);
    EXPECT_EQ(f->signal, c.signal);
    EXPECT_EQ(f->describe(), c.describe);
    EXPECT_EQ(f->exit_status(), c.exit_status);
  }
}

TEST(ParseFailure, SuccessfulOrUnrelatedOutputNamesNoRank) {
  EXPECT_FALSE(parse_failure(""));
  EXPECT_FALSE(parse_failure("step 10 loss 3.2\nstep 20 loss 2.9\n"));
  EXPECT_FALSE(
      parse_failure("salloc: Granted job allocation 1\nrank 0 size 2\n"
                    "salloc: Relinquishing job allocation 1\n"));
}

TEST(ParseFailure, KeepsOnlyTheReportLinesThatMatter) {
  // The supervisor filters a long run's output with is_failure_report_line; what it keeps must
  // still parse to the same answer.
  for (const char* text : {kMpirunExitCode, kMpirunSegfault, kMpirunAbort, kSrunExitThenKill,
                           kSrunExitThenTerminate, kSrunTasksExit, kSrunForcedTermination}) {
    std::string kept;
    std::string_view rest(text);
    while (!rest.empty()) {
      const size_t nl = rest.find('\n');
      const std::string_view line = rest.substr(0, nl);
      if (is_failure_report_line(line)) kept += std::string(line) + "\n";
      rest.remove_prefix(nl == std::string_view::npos ? rest.size() : nl + 1);
    }
    const auto full = parse_failure(text), filtered = parse_failure(kept);
    ASSERT_TRUE(full && filtered);
    EXPECT_EQ(full->describe(), filtered->describe());
  }
}

// mpirun 4.1 when every process of one host is SIGKILLed (tests/launch/test_multihost.sh): no
// rank is named, only the surviving ranks' peers on that host (abridged, as captured).
constexpr const char* kMpirunLostHost = R"(step    14/30 | loss 9.0480
--------------------------------------------------------------------------
ORTE was unable to reliably start one or more daemons.
This usually is caused by:
--------------------------------------------------------------------------
WARNING: Open MPI failed to TCP connect to a peer MPI process.  This
should not happen.

  Local host: strata-9-h1
  PID:        30391
  Message:    connect() to 10.77.9.12:1025 failed
  Error:      Operation now in progress (115)
--------------------------------------------------------------------------
An MPI communication peer process has unexpectedly disconnected.  This
usually indicates a failure in the peer process (e.g., a crash or
otherwise exiting without calling MPI_FINALIZE first).

  Local host: strata-9-h1
  Local PID:  30389
  Peer host:  10.77.9.12
--------------------------------------------------------------------------
)";

TEST(ParseFailure, NamesTheLostHostWhenNoRankIsNamed) {
  EXPECT_FALSE(parse_failure(kMpirunLostHost));
  EXPECT_EQ(parse_lost_host(kMpirunLostHost), std::optional<std::string>("10.77.9.12"));
  // What the supervisor keeps of a long run still names it.
  std::string kept;
  std::string_view rest(kMpirunLostHost);
  while (!rest.empty()) {
    const size_t nl = rest.find('\n');
    const std::string_view line = rest.substr(0, nl);
    if (is_failure_report_line(line)) kept += std::string(line) + "\n";
    rest.remove_prefix(nl == std::string_view::npos ? rest.size() : nl + 1);
  }
  EXPECT_EQ(parse_lost_host(kept), std::optional<std::string>("10.77.9.12"));
  EXPECT_FALSE(parse_lost_host("step 10 loss 3.2\n"));
  EXPECT_FALSE(parse_lost_host(kMpirunExitCode));
}

TEST(RankFailure, CommTimeoutStatusIsExplained) {
  RankFailure f;
  f.rank = 3;
  f.exit_code = 124;
  EXPECT_EQ(f.describe(), "rank 3 failed with exit status 124 (communication timeout)");
}

}  // namespace
}  // namespace strata::launch
