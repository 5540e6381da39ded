#include "launch/command.h"

#include <algorithm>
#include <cctype>
#include <string_view>

#include "core/error.h"

namespace strata::launch {

namespace {

// Huge pages for the big arenas' malloc fallback; harmless where the kernel has none.
constexpr const char* kDefaultGlibcTunables = "glibc.malloc.hugetlb=1";

const std::string* find_var(const LaunchEnv& env, const std::string& name) {
  for (const auto& [k, v] : env.vars)
    if (k == name) return &v;
  return nullptr;
}

int ranks_per_host(const LaunchOptions& options, const LaunchEnv& env) {
  const int hosts = std::max(1, env.hosts);
  return (options.ranks + hosts - 1) / hosts;
}

// Variables the launcher adds (name, value) because the environment does not set them.
std::vector<std::pair<std::string, std::string>> defaults_to_add(const LaunchOptions& options,
                                                                 const LaunchEnv& env) {
  std::vector<std::pair<std::string, std::string>> add;
  if (!find_var(env, "OMP_NUM_THREADS"))
    add.emplace_back("OMP_NUM_THREADS", std::to_string(threads_per_rank(options, env)));
  if (!find_var(env, "GLIBC_TUNABLES")) add.emplace_back("GLIBC_TUNABLES", kDefaultGlibcTunables);
  return add;
}

}  // namespace

int threads_per_rank(const LaunchOptions& options, const LaunchEnv& env) {
  return std::max(1, env.cores / std::max(1, ranks_per_host(options, env)));
}

std::vector<std::string> build_command(const LaunchOptions& options, const LaunchEnv& env) {
  STRATA_CHECK(options.ranks >= 1, "strata launch: -n must be at least 1 (got ", options.ranks,
               ")");
  const std::string program = options.program.empty() ? env.self_exe : options.program;
  STRATA_CHECK(!program.empty(), "strata launch: no program to run");
  const auto added = defaults_to_add(options, env);
  std::vector<std::string> cmd;
  if (env.in_slurm) {
    // srun passes the whole environment by default (--export=ALL); only the added defaults need
    // naming. --kill-on-bad-exit: one failed rank ends the step, instead of its peers waiting
    // in a collective until their timeout.
    cmd = {"srun", "--mpi=pmix", "-n", std::to_string(options.ranks), "--kill-on-bad-exit=1"};
    if (!added.empty()) {
      std::string exports = "--export=ALL";
      for (const auto& [k, v] : added) exports += cat(",", k, "=", v);
      cmd.push_back(exports);
    }
  } else {
    cmd = {"mpirun", "-np", std::to_string(options.ranks)};
    if (!options.hostfile.empty()) cmd.insert(cmd.end(), {"--hostfile", options.hostfile});
    if (env.is_root) cmd.push_back("--allow-run-as-root");
    // One host: ranks beyond the cores are what the user asked for (e.g. tests), so never refuse.
    if (options.hostfile.empty() || ranks_per_host(options, env) > env.cores)
      cmd.push_back("--oversubscribe");
    // Each rank runs its own OpenMP threads; binding each rank to one core would serialise them.
    cmd.insert(cmd.end(), {"--bind-to", "none"});
    // Remote ranks see only what -x forwards. Set variables forward by name, defaults by value.
    std::vector<std::string> names;
    for (const auto& [k, v] : env.vars) names.push_back(k);
    for (const auto& [k, v] : added) names.push_back(cat(k, "=", v));
    std::sort(names.begin(), names.end());
    for (const std::string& n : names) cmd.insert(cmd.end(), {"-x", n});
  }
  cmd.push_back(program);
  cmd.insert(cmd.end(), options.args.begin(), options.args.end());
  return cmd;
}

std::string format_command(const std::vector<std::string>& argv) {
  std::string out;
  for (const std::string& a : argv) {
    if (!out.empty()) out += ' ';
    const bool plain = !a.empty() && std::all_of(a.begin(), a.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) ||
             std::string_view("-_./=:,+@%").find(c) != std::string_view::npos;
    });
    if (plain) {
      out += a;
      continue;
    }
    out += '\'';
    for (char c : a) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    out += '\'';
  }
  return out;
}

int count_hostfile_hosts(const std::string& text) {
  int hosts = 0;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(start, end - start);
    if (size_t hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    if (line.find_first_not_of(" \t\r") != std::string::npos) ++hosts;
    start = end + 1;
  }
  return hosts;
}

}  // namespace strata::launch
