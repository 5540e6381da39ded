#include "launch_emit.h"

#include <sys/stat.h>

#include <cctype>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "core/error.h"
#include "io/atomic_file.h"
#include "launch/command.h"
#include "launch/job_spec.h"

namespace strata::cli {

namespace fs = std::filesystem;

namespace {

// A Kubernetes object name (RFC 1123 label: lowercase letters, digits and '-', at most 63
// characters with room for "-config"), which also suits SLURM.
std::string job_name(const RunConfig& config) {
  fs::path dir = fs::path(config.run.dir).lexically_normal();
  if (dir.filename().empty()) dir = dir.parent_path();
  std::string name = "strata-" + fs::absolute(dir).filename().string();
  for (char& c : name) {
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '-';
  }
  if (name.size() > 50) name.resize(50);
  while (!name.empty() && name.back() == '-') name.pop_back();
  return name;
}

}  // namespace

void add_emit_options(CLI::App* app, EmitArgs& a) {
  const std::string g = "Scheduler jobs (--emit)";
  app->add_option_function<std::string>(
         "--emit", [&a](const std::string& v) { a.emit = parse_enum<EmitKind>("--emit", v); },
         "write a job for a scheduler instead of starting the ranks: slurm (an sbatch "
         "script) or k8s (a ConfigMap and a gang-scheduled MPIJob or Volcano Job)")
      ->check(CLI::IsMember({"slurm", "k8s"}))
      ->group(g);
  app->add_option("--out", a.out, "file to write the job to (default: standard output)")->group(g);
  app->add_option("--nodes", a.nodes,
                  "nodes (default: -n / --gpus-per-node, else 1); each holds -n / nodes ranks")
      ->check(CLI::NonNegativeNumber)
      ->group(g);
  app->add_option("--gpus-per-node", a.gpus_per_node, "GPUs per node, one rank each (0: CPU)")
      ->check(CLI::NonNegativeNumber)
      ->group(g);
  app->add_option("--cpus-per-task", a.cpus_per_task,
                  "threads per rank (default: this machine's cores / ranks per node)")
      ->check(CLI::NonNegativeNumber)
      ->group(g);
  app->add_option("--time", a.time, "time limit (sbatch --time)")->capture_default_str()->group(g);
  app->add_option("--partition", a.partition, "SLURM partition")->group(g);
  app->add_option("--mem", a.memory, "memory per node (sbatch --mem 64G; k8s 64Gi)")->group(g);
  app->add_option("--job-name", a.name, "job name (default: strata-<run directory name>)")
      ->group(g);
  app->add_option("--workdir", a.workdir,
                  "working directory of the ranks (default: here for slurm, /workspace for k8s)")
      ->group(g);
  app->add_option("--image", a.image, "k8s: container image with strata and Open MPI")->group(g);
  app->add_option_function<std::string>(
         "--k8s-kind",
         [&a](const std::string& v) { a.k8s_kind = parse_enum<launch::K8sKind>("--k8s-kind", v); },
         "k8s: mpijob (MPI Operator, the default) or volcano")
      ->check(CLI::IsMember({"mpijob", "volcano"}))
      ->group(g);
  app->add_option("--namespace", a.k8s_namespace, "k8s: namespace")->group(g);
  app->add_option("--pvc", a.pvc,
                  "k8s: PersistentVolumeClaim mounted at the working directory (run "
                  "directories, data)")
      ->group(g);
}

int emit_job(const EmitArgs& a, const RunPlan& plan, const std::vector<std::string>& command,
             int ranks, int max_restarts) {
  const RunConfig& config = plan.config;
  const bool k8s = a.emit == EmitKind::k8s;
  launch::JobSpec spec;
  spec.name = a.name.empty() ? job_name(config) : a.name;
  spec.ranks = ranks;
  spec.tp = plan.layout.tp;
  spec.pp = plan.layout.pp;
  spec.dp = plan.layout.dp;
  spec.nodes = a.nodes;
  spec.gpus_per_node = a.gpus_per_node;
  spec.time = a.time;
  spec.partition = a.partition;
  spec.memory = a.memory;
  spec.max_restarts = max_restarts;
  spec.image = a.image;
  spec.k8s_kind = a.k8s_kind;
  spec.k8s_namespace = a.k8s_namespace;
  spec.pvc = a.pvc;
  const launch::Placement p = launch::place(spec);
  const launch::LaunchEnv env = launch::detect_launch_env(launch::LaunchOptions{});
  spec.cpus_per_task =
      a.cpus_per_task > 0 ? a.cpus_per_task : std::max(1, env.cores / p.ranks_per_node);

  // The files the ranks read: absolute paths on a shared filesystem (SLURM), or copies in the
  // ConfigMap mounted at /etc/strata (Kubernetes).
  const auto place_file = [&](const std::string& path) -> std::string {
    if (!k8s) return fs::absolute(path).lexically_normal().string();
    const std::string name = fs::path(path).filename().string();
    spec.files.emplace_back(name, io::read_file(path));
    return "/etc/strata/" + name;
  };
  spec.config = place_file(command.front());
  for (size_t i = 1; i < command.size(); ++i) {
    const std::string& arg = command[i];
    if (arg == "--deepspeed" && i + 1 < command.size()) {
      spec.args.insert(spec.args.end(), {arg, place_file(command[++i])});
    } else if (arg.rfind("--deepspeed=", 0) == 0) {
      spec.args.push_back("--deepspeed=" + place_file(arg.substr(12)));
    } else {
      spec.args.push_back(arg);
    }
  }
  if (k8s) {
    spec.workdir = a.workdir.empty() ? "/workspace" : a.workdir;
  } else {
    spec.strata = env.self_exe.empty() ? "strata" : env.self_exe;
    spec.workdir = fs::absolute(a.workdir.empty() ? fs::current_path() : fs::path(a.workdir))
                       .lexically_normal()
                       .string();
    spec.env = env.vars;  // STRATA_*, GLIBC_TUNABLES, as strata launch forwards them
  }

  const std::string text = k8s ? launch::emit_k8s(spec) : launch::emit_sbatch(spec);
  if (a.out.empty() || a.out == "-") {
    std::cout << text;
    return 0;
  }
  io::write_file_atomic(a.out, text);
  if (!k8s) ::chmod(a.out.c_str(), 0755);
  std::fprintf(stderr, "strata launch: wrote %s (%s: %d ranks on %d node%s, %d per node)%s\n",
               a.out.c_str(),
               k8s ? (a.k8s_kind == launch::K8sKind::mpijob ? "MPIJob" : "Volcano Job") : "sbatch",
               ranks, p.nodes, p.nodes == 1 ? "" : "s", p.ranks_per_node,
               k8s ? "; apply with kubectl apply -f" : "; submit with sbatch");
  return 0;
}

}  // namespace strata::cli
