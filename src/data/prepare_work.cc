#include "data/prepare_work.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>

#include "core/error.h"
#include "core/log.h"
#include "data/file_util.h"

namespace strata::data {

namespace fs = std::filesystem;

namespace {

constexpr auto kPoll = std::chrono::milliseconds(50);
constexpr auto kReportEvery = std::chrono::seconds(60);

std::string job_file(const std::string& dir) {
  return (fs::path(dir) / "job.json").string();
}

std::string read_or_empty(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return {};
  return read_file(path);
}

// Creates `path` with `text` unless it exists (another worker may create it at the same moment:
// the first link wins, and every worker then reads the same file).
void create_exclusive(const std::string& path, const std::string& text) {
  const std::string temp =
      cat(path, ".tmp.", ::getpid(), ".", std::hash<std::thread::id>()(std::this_thread::get_id()));
  write_file_atomic(temp, text);
  const int rc = ::link(temp.c_str(), path.c_str());
  const int err = errno;
  std::error_code ec;
  fs::remove(temp, ec);
  STRATA_CHECK(rc == 0 || err == EEXIST, "prepare: cannot create '", path,
               "': ", std::strerror(err));
}

std::string unit_name(int64_t unit) {
  char name[32];
  std::snprintf(name, sizeof name, "%06lld", static_cast<long long>(unit));
  return name;
}

}  // namespace

PrepareWork::PrepareWork(const std::string& out_dir, const std::string& job, int worker)
    : dir_((fs::path(out_dir) / ".prepare").string()) {
  std::error_code ec;
  // What a prepare killed while removing its finished work folder left (remove()).
  if (worker == 0 && fs::is_directory(out_dir, ec))
    for (const auto& e : fs::directory_iterator(out_dir, ec))
      if (e.path().filename().string().rfind(".prepare.removing.", 0) == 0)
        fs::remove_all(e.path(), ec);
  fs::create_directories(dir_, ec);
  STRATA_CHECK(!ec, "prepare: cannot create the work folder '", dir_, "': ", ec.message());
  const std::string file = job_file(dir_);
  const auto start = std::chrono::steady_clock::now();
  auto last_report = start;
  for (;;) {
    const std::string found = read_or_empty(file);
    if (found == job) break;
    if (found.empty()) {
      create_exclusive(file, job);
      continue;  // read back what won
    }
    if (worker == 0) {
      log::info("prepare: the work folder ", dir_,
                " holds another job's records (other inputs or options): starting over");
      fs::remove_all(dir_, ec);
      STRATA_CHECK(!ec, "prepare: cannot clear '", dir_, "': ", ec.message());
      fs::create_directories(dir_, ec);
      STRATA_CHECK(!ec, "prepare: cannot create the work folder '", dir_, "': ", ec.message());
      continue;
    }
    if (std::chrono::steady_clock::now() - last_report > kReportEvery) {
      log::info("prepare: waiting for worker 0 to clear ", dir_, ", which holds another job");
      last_report = std::chrono::steady_clock::now();
    }
    std::this_thread::sleep_for(kPoll);
  }
  for (const char* sub : {"scan", "plan", "encode", "shards"}) {
    fs::create_directories(fs::path(dir_) / sub, ec);
    STRATA_CHECK(!ec, "prepare: cannot create '", dir_, "/", sub, "': ", ec.message());
  }
  if (worker == 0) fs::remove(fs::path(out_dir) / "manifest.json", ec);
}

std::string PrepareWork::scan(int64_t unit) const {
  return cat(dir_, "/scan/", unit_name(unit), ".rec");
}
std::string PrepareWork::sample(int64_t unit) const {
  return cat(dir_, "/scan/", unit_name(unit), ".sample");
}
std::string PrepareWork::docs(int64_t unit) const {
  return cat(dir_, "/scan/", unit_name(unit), ".docs");
}
std::string PrepareWork::plan() const {
  return cat(dir_, "/plan.rec");
}
std::string PrepareWork::removed(int64_t unit) const {
  return cat(dir_, "/plan/", unit_name(unit), ".removed");
}
std::string PrepareWork::sort_dir() const {
  return cat(dir_, "/plan/sort");
}
std::string PrepareWork::encode(int64_t unit) const {
  return cat(dir_, "/encode/", unit_name(unit), ".rec");
}
std::string PrepareWork::tokens(int64_t unit, const std::string& split) const {
  return cat(dir_, "/encode/", unit_name(unit), ".", split);
}
std::string PrepareWork::shard(const std::string& split, int64_t index) const {
  return cat(dir_, "/shards/", split, "_", unit_name(index), ".rec");
}

std::string PrepareWork::finished(int worker) const {
  return cat(dir_, "/shards/worker_", worker, ".done");
}

bool PrepareWork::done(const std::string& record) {
  std::error_code ec;
  return fs::exists(record, ec);
}

void PrepareWork::wait_for(const std::vector<std::string>& records, const std::string& what) {
  auto last_report = std::chrono::steady_clock::now();
  size_t next = 0;  // records before it exist
  while (next < records.size()) {
    if (done(records[next])) {
      ++next;
      continue;
    }
    if (std::chrono::steady_clock::now() - last_report > kReportEvery) {
      log::info("prepare: waiting for other workers: ", records.size() - next, " of ",
                records.size(), " ", what, " to go (next: ", records[next], ")");
      last_report = std::chrono::steady_clock::now();
    }
    std::this_thread::sleep_for(kPoll);
  }
}

void PrepareWork::require(const std::vector<std::string>& records, const std::string& stage) {
  size_t missing = 0;
  const std::string* first = nullptr;
  for (const std::string& r : records)
    if (!done(r)) {
      ++missing;
      if (!first) first = &r;
    }
  STRATA_CHECK(missing == 0, "prepare --stage ", stage, ": ", missing, " of ", records.size(),
               " records of the stage before are missing (the first: ", first ? *first : "",
               "); run that stage to the end first, with the same inputs and options");
}

void PrepareWork::remove() const {
  // Renamed first, in one step: a prepare killed while the files go must not leave a folder of
  // this job with some records and not the files they stand for.
  const std::string doomed = cat(dir_, ".removing.", ::getpid());
  std::error_code ec;
  fs::rename(dir_, doomed, ec);
  if (!ec) fs::remove_all(doomed, ec);
  if (ec) log::warn("prepare: could not remove the work folder ", dir_, ": ", ec.message());
}

}  // namespace strata::data
