#include "launch/hostfile.h"

#include <regex>
#include <sstream>

namespace strata::launch {

std::vector<HostfileEntry> parse_hostfile(const std::string& text) {
  static const std::regex slots(R"((?:^|\s)(?:slots|max_slots)\s*=\s*(\d{1,6}))");
  std::vector<HostfileEntry> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::string body = line.substr(0, line.find('#'));
    std::istringstream words(body);
    HostfileEntry e;
    if (!(words >> e.host)) continue;
    std::smatch m;
    if (std::regex_search(body, m, slots)) e.slots = std::stoi(m[1]);
    e.line = line;
    out.push_back(std::move(e));
  }
  return out;
}

std::string hostfile_without(const std::string& text, const std::string& host,
                             std::vector<HostfileEntry>& removed) {
  removed.clear();
  std::string out;
  for (HostfileEntry& e : parse_hostfile(text)) {
    if (e.host == host)
      removed.push_back(std::move(e));
    else
      out += e.line + "\n";
  }
  return out;
}

}  // namespace strata::launch
