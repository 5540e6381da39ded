// detect_launch_env: the one place that reads the machine for the launch command.
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string_view>
#include <thread>

#include "core/error.h"
#include "io/atomic_file.h"
#include "launch/command.h"

extern char** environ;

namespace strata::launch {

namespace {

bool on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  if (!path) return false;
  std::string_view rest(path);
  while (!rest.empty()) {
    const size_t colon = rest.find(':');
    const std::string dir(rest.substr(0, colon));
    const std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) return true;
    if (colon == std::string_view::npos) break;
    rest.remove_prefix(colon + 1);
  }
  return false;
}

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  // SLURM writes per-node counts like "2(x3)"; the leading number is the one that matters here.
  const int n = std::atoi(v);
  return n > 0 ? n : fallback;
}

}  // namespace

LaunchEnv detect_launch_env(const LaunchOptions& options) {
  LaunchEnv env;
  env.in_slurm = std::getenv("SLURM_JOB_ID") != nullptr && on_path("srun");
  env.is_root = ::geteuid() == 0;
  // Cores this process may use (the affinity mask, as a container or cgroup allows).
  cpu_set_t mask;
  CPU_ZERO(&mask);
  env.cores = ::sched_getaffinity(0, sizeof mask, &mask) == 0
                  ? CPU_COUNT(&mask)
                  : static_cast<int>(std::thread::hardware_concurrency());
  env.cores = std::max(1, env.cores);
  if (env.in_slurm) {
    env.cores = env_int("SLURM_CPUS_ON_NODE", env.cores);
    env.hosts = env_int("SLURM_JOB_NUM_NODES", env_int("SLURM_NNODES", 1));
  } else if (!options.hostfile.empty()) {
    env.hosts = std::max(1, count_hostfile_hosts(io::read_file(options.hostfile)));
  }
  std::error_code ec;
  env.self_exe = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  for (char** e = environ; e && *e; ++e) {
    const std::string_view entry(*e);
    const size_t eq = entry.find('=');
    if (eq == std::string_view::npos) continue;
    const std::string name(entry.substr(0, eq));
    if (name == "OMP_NUM_THREADS" || name == "GLIBC_TUNABLES" || name.rfind("STRATA_", 0) == 0)
      env.vars.emplace_back(name, std::string(entry.substr(eq + 1)));
  }
  std::sort(env.vars.begin(), env.vars.end());
  return env;
}

}  // namespace strata::launch
