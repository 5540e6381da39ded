#include "launch/heartbeat.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/fd.h"

namespace strata::launch {

namespace {

double unix_now() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "?";
  return buf;
}

// Temporary + rename without fsync (see heartbeat.h). The name is unique per process and call, so
// two writers never share a temporary.
void write_small_file_atomic(const std::string& path, const std::string& text) {
  static std::atomic<uint64_t> counter{0};
  const std::string temp = cat(path, ".tmp-", ::getpid(), "-", counter++);
  io::UniqueFd fd(::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666));
  if (!fd.valid()) {
    const int err = errno;
    fail("cannot write heartbeat '", path, "': ", io::errno_text(err));
  }
  if (int err = io::write_all(fd.get(), text.data(), text.size())) {
    ::unlink(temp.c_str());
    fail("cannot write heartbeat '", path, "': ", io::errno_text(err));
  }
  fd.reset();
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(temp.c_str());
    fail("cannot write heartbeat '", path, "': rename failed: ", io::errno_text(err));
  }
}

}  // namespace

std::string heartbeat_dir(const std::string& run_dir) {
  return run_dir + "/heartbeat";
}

std::string heartbeat_path(const std::string& run_dir, int rank) {
  char name[32];
  std::snprintf(name, sizeof name, "rank_%03d.json", rank);
  return heartbeat_dir(run_dir) + "/" + name;
}

std::string format_heartbeat(const Heartbeat& beat) {
  // Ordered: the file reads in the documented order (rank, step, time, phase, pid, host).
  const nlohmann::ordered_json j = {{"rank", beat.rank}, {"step", beat.step},
                                    {"time", beat.time}, {"phase", beat.phase},
                                    {"pid", beat.pid},   {"host", beat.host}};
  return j.dump() + "\n";
}

std::optional<Heartbeat> parse_heartbeat(const std::string& text) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("rank") || !j["rank"].is_number_integer() ||
      !j.contains("step") || !j["step"].is_number_integer() || !j.contains("time") ||
      !j["time"].is_number())
    return std::nullopt;
  Heartbeat beat;
  beat.rank = j["rank"].get<int>();
  beat.step = j["step"].get<int64_t>();
  beat.time = j["time"].get<double>();
  if (j.contains("phase") && j["phase"].is_string()) beat.phase = j["phase"].get<std::string>();
  if (j.contains("pid") && j["pid"].is_number_integer()) beat.pid = j["pid"].get<int64_t>();
  if (j.contains("host") && j["host"].is_string()) beat.host = j["host"].get<std::string>();
  return beat;
}

void write_heartbeat(const std::string& run_dir, const Heartbeat& beat) {
  // Cheap when the directory exists (one stat), and it may not yet on the first beat.
  std::error_code ec;
  if (!std::filesystem::is_directory(heartbeat_dir(run_dir), ec))
    io::make_dirs(heartbeat_dir(run_dir));
  write_small_file_atomic(heartbeat_path(run_dir, beat.rank), format_heartbeat(beat));
}

void write_heartbeat(const std::string& run_dir, int rank, int64_t step, const std::string& phase) {
  static const std::string host = host_name();
  Heartbeat beat;
  beat.rank = rank;
  beat.step = step;
  beat.time = unix_now();
  beat.phase = phase;
  beat.pid = ::getpid();
  beat.host = host;
  write_heartbeat(run_dir, beat);
}

std::optional<Heartbeat> read_heartbeat(const std::string& run_dir, int rank) {
  const std::string path = heartbeat_path(run_dir, rank);
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return std::nullopt;
  std::string text;
  try {
    text = io::read_file(path);
  } catch (const Error&) {
    return std::nullopt;  // removed between the check and the read
  }
  return parse_heartbeat(text);
}

void clear_heartbeats(const std::string& run_dir) {
  std::error_code ec;
  std::filesystem::directory_iterator it(heartbeat_dir(run_dir), ec);
  if (ec) return;  // no directory: nothing to clear
  for (const auto& entry : it) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("rank_", 0) == 0) std::filesystem::remove(entry.path(), ec);
  }
}

}  // namespace strata::launch
