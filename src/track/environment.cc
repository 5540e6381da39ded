#include "track/environment.h"

#include <omp.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <thread>

#include "io/atomic_file.h"
#include "kernels/cpu/isa.h"

#ifndef STRATA_GIT_COMMIT
#define STRATA_GIT_COMMIT "unknown"
#endif

namespace strata {

namespace {

// The value of "key : value" lines of a /proc file, or "".
std::string proc_field(const char* path, const std::string& key) {
  std::ifstream f(path);
  for (std::string line; std::getline(f, line);) {
    if (line.rfind(key, 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const size_t begin = line.find_first_not_of(" \t", colon + 1);
    return begin == std::string::npos ? "" : line.substr(begin);
  }
  return "";
}

std::string utc_now() {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace

nlohmann::json environment_facts() {
  nlohmann::json j;
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) == 0) j["host"] = host;
  j["cpu"] = proc_field("/proc/cpuinfo", "model name");
  j["logical_cores"] = std::thread::hardware_concurrency();
  const std::string mem = proc_field("/proc/meminfo", "MemTotal");  // "131072000 kB"
  if (!mem.empty()) j["memory_gb"] = std::strtod(mem.c_str(), nullptr) / (1024.0 * 1024.0);
  utsname u{};
  if (uname(&u) == 0) j["os"] = std::string(u.sysname) + " " + u.release + " " + u.machine;
  j["omp_max_threads"] = omp_get_max_threads();
  // The CPU kernels' level (kernels/cpu/isa.h) and where it came from.
  try {
    j["cpu_isa"] = kernels::isa::describe(kernels::isa::active());
    j["cpu_isa_source"] = kernels::isa::source();
  } catch (const std::exception& e) {
    j["cpu_isa"] = std::string("unavailable: ") + e.what();
  }
#if defined(__clang__)
  j["compiler"] = std::string("clang ") + __clang_version__;
#elif defined(__GNUC__)
  j["compiler"] = std::string("gcc ") + __VERSION__;
#endif
  j["strata_commit"] = STRATA_GIT_COMMIT;
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"})
    if (const char* v = std::getenv(var)) {
      j["world_size"] = std::atoi(v);
      break;
    }
  nlohmann::json vars = nlohmann::json::object();
  for (const char* var :
       {"OMP_NUM_THREADS", "OMP_PROC_BIND", "OPENBLAS_CORETYPE", "GLIBC_TUNABLES",
        "STRATA_COMM_POLL", "STRATA_CPU_ISA", "ONEDNN_MAX_CPU_ISA", "SLURM_JOB_ID"})
    if (const char* v = std::getenv(var)) vars[var] = v;
  j["env"] = vars;
  return j;
}

void write_environment(const std::string& run_dir) {
  try {
    nlohmann::json j = environment_facts();
    j["recorded_at"] = utc_now();
    io::write_file_atomic((std::filesystem::path(run_dir) / "environment.json").string(),
                          j.dump(2) + "\n");
  } catch (const std::exception&) {
    // A report without the environment is still a report; training must not stop for it.
  }
}

}  // namespace strata
