#include "launch/failure.h"

#include <algorithm>
#include <csignal>
#include <cstring>
#include <regex>
#include <vector>

#include "core/error.h"

namespace strata::launch {

namespace {

// The comm layer ends a rank whose collective timed out with this status (comm.h,
// kCommTimeoutExit); kept as a literal so that launch does not depend on comm.
constexpr int kCommTimeoutStatus = 124;

std::vector<std::string> split_lines(std::string_view text) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string line(text.substr(start, end - start));
    if (!line.empty() && line.back() == '\r') line.pop_back();
    lines.push_back(std::move(line));
    start = end + 1;
  }
  return lines;
}

int signal_number(const std::string& name) {
  // srun names the signal in words (strsignal's text); map back to a number.
  for (int s = 1; s < 32; ++s)
    if (const char* text = ::strsignal(s); text && name == text) return s;
  return 0;
}

struct Candidate {
  RankFailure failure;
  bool consequence = false;  // killed by the launcher after the job was already failing
};

}  // namespace

std::string RankFailure::describe() const {
  const std::string who = rank >= 0 ? cat("rank ", rank) : std::string("a rank");
  std::string text;
  if (signal > 0) {
    const char* name = ::strsignal(signal);
    text = cat(who, " was killed by signal ", signal, name ? cat(" (", name, ")") : "");
  } else if (exit_code >= 0) {
    text = cat(who, " failed with exit status ", exit_code);
    if (exit_code == kCommTimeoutStatus && detail.empty()) text += " (communication timeout)";
  } else {
    text = cat(who, " failed");
  }
  if (!detail.empty()) text += cat(" (", detail, ")");
  return text;
}

int RankFailure::exit_status() const {
  if (signal > 0) return 128 + signal;
  if (exit_code > 0) return exit_code;
  return 1;
}

bool is_failure_report_line(std::string_view line) {
  static constexpr const char* keys[] = {"Process name:",
                                         "Exit code:",
                                         "exited on signal",
                                         "process rank",
                                         "MPI_ABORT",
                                         "errorcode",
                                         ": task",
                                         "step aborted",
                                         "CANCELLED",
                                         "Terminating StepId",
                                         "forcing job termination",
                                         "start process rank",
                                         "Peer host:",
                                         "connect() to",
                                         "ssh: "};
  for (const char* key : keys)
    if (line.find(key) != std::string_view::npos) return true;
  return false;
}

std::optional<std::string> parse_lost_host(std::string_view output) {
  static const std::regex peer(R"(Peer host:\s*(\S+))");
  static const std::regex connect(R"(connect\(\) to ([^\s:]+):\d+ failed)");
  std::vector<std::pair<std::string, int>> counts;  // in order of first mention
  std::smatch m;
  for (const std::string& line : split_lines(output)) {
    if (!std::regex_search(line, m, peer) && !std::regex_search(line, m, connect)) continue;
    const std::string host = m[1];
    auto it =
        std::find_if(counts.begin(), counts.end(), [&](const auto& c) { return c.first == host; });
    if (it == counts.end())
      counts.emplace_back(host, 1);
    else
      ++it->second;
  }
  if (counts.empty()) return std::nullopt;
  return std::max_element(counts.begin(), counts.end(),
                          [](const auto& a, const auto& b) { return a.second < b.second; })
      ->first;
}

std::optional<std::string> parse_unreachable_host(std::string_view output) {
  static const std::regex connect(R"(ssh: connect to host (\S+) port \d+: )");
  static const std::regex resolve(R"(ssh: Could not resolve hostname ([^\s:]+))");
  std::smatch m;
  for (const std::string& line : split_lines(output))
    if (std::regex_search(line, m, connect) || std::regex_search(line, m, resolve)) return m[1];
  return std::nullopt;
}

std::optional<RankFailure> parse_failure(std::string_view output) {
  // mpirun (Open MPI 4.x):
  //   Process name: [[3607,1],1]          followed by    Exit code:    3
  //   mpirun noticed that process rank 1 with PID 0 on node vm exited on signal 11 (Segmentation
  //   fault). mpirun has exited due to process rank 1 with PID 0 on       (exit without
  //   MPI_Finalize) MPI_ABORT was invoked on rank 1 in communicator MPI_COMM_WORLD     with
  //   errorcode 7. while attempting to start process rank 0.                   (executable not
  //   found)
  // srun (SLURM 22.05):
  //   srun: error: vm: task 1: Exited with exit code 3
  //   srun: error: vm: task 1: Segmentation fault        srun: error: vm: task 0: Killed
  //   srun: error: vm: tasks 0-1: Exited with exit code 3          (the first task named is taken)
  //   after which srun ends the step, and what it kills then are consequences:
  //   srun: Job step aborted: ...     slurmstepd-vm: error: *** STEP 5.0 ON vm CANCELLED AT ...
  //   srun: launch/slurm: _step_signal: Terminating StepId=9.0    srun: forcing job termination
  static const std::regex process_name(R"(Process name:\s*\[\[\d+,\d+\],(\d+)\])");
  static const std::regex exit_code(R"(Exit code:\s*(-?\d+))");
  static const std::regex mpirun_signal(
      R"(process rank (\d+) with PID \d+ on node \S+ exited on signal (\d+)(?: \(([^)]*)\))?)");
  static const std::regex mpirun_improper(R"(exited due to process rank (\d+) with PID)");
  static const std::regex mpi_abort(R"(MPI_ABORT was invoked on rank (\d+))");
  static const std::regex abort_code(R"(with errorcode (-?\d+))");
  static const std::regex not_started(R"(while attempting to start process rank (\d+))");
  static const std::regex srun_exit(R"(: tasks? (\d+)[-,\d]*: Exited with exit code (\d+))");
  static const std::regex srun_signal(
      R"(: tasks? (\d+)[-,\d]*: ([A-Z][A-Za-z -]*[a-z])\s*(\(core dumped\))?\s*$)");

  const std::vector<std::string> lines = split_lines(output);
  std::vector<Candidate> found;
  std::optional<RankFailure> aborted;
  bool step_aborted = false;  // srun is now killing the remaining tasks itself
  std::smatch m;
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string& line = lines[i];
    if (line.find("Job step aborted") != std::string::npos ||
        line.find("CANCELLED AT") != std::string::npos ||
        line.find("Terminating StepId") != std::string::npos ||
        line.find("forcing job termination") != std::string::npos) {
      step_aborted = true;
      continue;
    }
    Candidate c;
    if (std::regex_search(line, m, mpi_abort)) {
      if (aborted) continue;  // the first abort is the cause
      RankFailure f;
      f.rank = std::stoi(m[1]);
      f.detail = "MPI_Abort";
      for (size_t k = i; k < lines.size() && k < i + 3; ++k)
        if (std::regex_search(lines[k], m, abort_code)) {
          f.exit_code = std::stoi(m[1]);
          break;
        }
      aborted = f;
      continue;
    }
    if (std::regex_search(line, m, process_name)) {
      c.failure.rank = std::stoi(m[1]);
      for (size_t k = i + 1; k < lines.size() && k < i + 4; ++k)
        if (std::regex_search(lines[k], m, exit_code)) {
          c.failure.exit_code = std::stoi(m[1]);
          break;
        }
    } else if (std::regex_search(line, m, mpirun_signal)) {
      c.failure.rank = std::stoi(m[1]);
      c.failure.signal = std::stoi(m[2]);
    } else if (std::regex_search(line, m, mpirun_improper)) {
      c.failure.rank = std::stoi(m[1]);
      c.failure.detail = "exited without finalizing MPI";
    } else if (std::regex_search(line, m, not_started)) {
      c.failure.rank = std::stoi(m[1]);
      c.failure.detail = "could not be started";
    } else if (std::regex_search(line, m, srun_exit)) {
      c.failure.rank = std::stoi(m[1]);
      c.failure.exit_code = std::stoi(m[2]);
    } else if (std::regex_search(line, m, srun_signal)) {
      const int sig = signal_number(m[2]);
      if (sig == 0) continue;
      c.failure.rank = std::stoi(m[1]);
      c.failure.signal = sig;
      c.consequence = step_aborted && (sig == SIGKILL || sig == SIGTERM);
    } else {
      continue;
    }
    found.push_back(c);
  }
  if (aborted) return aborted;
  for (const Candidate& c : found)
    if (!c.consequence) return c.failure;
  if (!found.empty()) return found.front().failure;
  return std::nullopt;
}

}  // namespace strata::launch
