// The supervisor behind `strata launch`: starts the ranks through mpirun or srun, passes their
// output through, watches their heartbeats, and when the job fails or hangs names the rank and
// the cause in one line, then restarts it (up to max_restarts) or exits with the rank's status.
//
// Exit status: 0 when the job succeeded; otherwise the failed rank's exit status (128 + signal
// when a signal ended it), 124 when the job was killed as hung (like timeout(1), and the status
// the comm layer gives a rank whose collective timed out), 128 + signal when the supervisor
// itself was interrupted (Ctrl-C), or the launcher's own status when it named no rank.
#pragma once
#include <string>
#include <vector>

#include "launch/launch_options.h"

namespace strata::launch {

// Exit status of a job killed as hung.
inline constexpr int kHungExitStatus = 124;

struct LaunchReport {
  int exit_status = 0;
  int attempts = 0;                   // job attempts started
  std::vector<std::string> failures;  // one line per failed attempt, as printed
  bool interrupted = false;           // the supervisor was asked to stop (SIGINT, SIGTERM, SIGHUP)
};

// Runs the job to its end; never waits forever while the watchdog is on (the default).
LaunchReport supervise_job(const LaunchOptions& options);

// The same, returning the exit status only (what `strata launch` exits with).
int supervise(const LaunchOptions& options);

}  // namespace strata::launch
