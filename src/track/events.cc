#include "track/events.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/log.h"

namespace strata {

std::string events_path(const std::string& run_dir) {
  return (std::filesystem::path(run_dir) / "events.jsonl").string();
}

void append_event(const std::string& run_dir, int rank, const std::string& kind, int64_t step,
                  nlohmann::json details) {
  if (run_dir.empty()) return;
  details["time"] =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  details["rank"] = rank;
  details["kind"] = kind;
  details["step"] = step;
  const std::string line = details.dump() + "\n";
  std::error_code ec;
  std::filesystem::create_directories(run_dir, ec);
  const int fd =
      ::open(events_path(run_dir).c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0 || ::write(fd, line.data(), line.size()) != static_cast<ssize_t>(line.size()))
    log::warn("cannot append to ", events_path(run_dir), ": ", std::strerror(errno));
  if (fd >= 0) ::close(fd);
}

std::vector<nlohmann::json> read_events(const std::string& run_dir) {
  std::vector<nlohmann::json> out;
  std::ifstream in(events_path(run_dir));
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    try {
      out.push_back(nlohmann::json::parse(line));
    } catch (const nlohmann::json::exception&) {
      // a torn last line of a killed process: skip it
    }
  }
  return out;
}

}  // namespace strata
