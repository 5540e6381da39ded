// Open MPI hostfiles ("node7 slots=4", comments after '#'), as far as an elastic restart needs
// them: which hosts, how many ranks each takes, and the same file without a host that is down.
#pragma once
#include <string>
#include <vector>

namespace strata::launch {

struct HostfileEntry {
  std::string host;
  int slots = 0;     // "slots=N"; 0 when the line gives none (Open MPI then counts the cores)
  std::string line;  // the line as written, kept when the file is written again
};

std::vector<HostfileEntry> parse_hostfile(const std::string& text);

// The hostfile's text without `host`'s lines; `removed` gets their entries (empty when the file
// does not name the host).
std::string hostfile_without(const std::string& text, const std::string& host,
                             std::vector<HostfileEntry>& removed);

}  // namespace strata::launch
