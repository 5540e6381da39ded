// Which rank failed, and how: read from the launcher's own report (mpirun's or srun's output),
// because the launcher's exit status alone names no rank and loses signals.
#pragma once
#include <optional>
#include <string>
#include <string_view>

namespace strata::launch {

struct RankFailure {
  int rank = -1;       // -1: the job failed but no rank was named
  int exit_code = -1;  // the rank's exit status, when it exited
  int signal = 0;      // the signal that ended it, when one did
  std::string detail;  // e.g. "MPI_Abort", "could not be started", "no heartbeat for 300 s"

  // "rank 1 failed with exit status 3", "rank 1 was killed by signal 11 (Segmentation fault)".
  std::string describe() const;
  // The status the supervisor exits with: the rank's exit status, 128 + signal, or 1.
  int exit_status() const;
};

// Finds the failed rank in a launcher's output (mpirun 4.x or srun; the text may contain the
// ranks' own output too). When several ranks are reported, the cause is preferred over the
// consequences: an explicit MPI_Abort first, then the first rank that failed on its own, before
// the ranks the launcher killed afterwards. Nothing when the output names no failed rank.
std::optional<RankFailure> parse_failure(std::string_view output);

// A host the job lost, when the launcher names none of its ranks: every process of a host killed,
// or its link cut, shows in mpirun's output only as the surviving ranks' peers disconnecting
// ("Peer host: 10.77.9.12") or failing to connect ("connect() to 10.77.9.12:1025 failed").
// The host most named; nothing when none is.
std::optional<std::string> parse_lost_host(std::string_view output);

// A host the launcher could not start its daemon on, from the remote-start agent's report (ssh's
// words, which scripts/emulated_hosts.sh's agent repeats): "ssh: connect to host 10.77.9.13 port
// 22: No route to host" (or "Connection timed out", "Connection refused"), "ssh: Could not
// resolve hostname node7: ...". Such a host is down, not merely slow to start. Nothing when none.
std::optional<std::string> parse_unreachable_host(std::string_view output);

// True for a line parse_failure or parse_lost_host may need: the supervisor keeps only these
// from a long run.
bool is_failure_report_line(std::string_view line);

}  // namespace strata::launch
