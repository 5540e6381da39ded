#include "launch/job_spec.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <sstream>

#include "core/error.h"
#include "launch/command.h"

namespace strata::launch {

namespace {

using ojson = nlohmann::ordered_json;

constexpr const char* kConfigMount = "/etc/strata";

// ---- YAML ------------------------------------------------------------------------------------

bool plain_safe(const std::string& s) {
  if (s.empty() || s.front() == '-' || s.back() == ':') return false;
  for (char c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) &&
        std::string("_./=:-").find(c) == std::string::npos)
      return false;
  std::string lower = s;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (const char* word : {"y", "n", "yes", "no", "on", "off", "true", "false", "null", "~"})
    if (lower == word) return false;
  char* end = nullptr;
  std::strtod(s.c_str(), &end);
  return end != s.c_str() + s.size();  // a number written as a string stays a string
}

std::string scalar(const ojson& v) {
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    return plain_safe(s) ? s : v.dump();  // JSON's double-quoted form is valid YAML
  }
  if (v.is_object() || v.is_array()) return v.dump();  // only ever empty here
  return v.dump();
}

// A multi-line string that a literal block scalar ("|", or "|-" without a final newline) keeps
// exactly: printable lines, no carriage returns, not starting with a space, at most one final
// newline.
bool literal_ok(const ojson& v) {
  if (!v.is_string()) return false;
  const std::string s = v.get<std::string>();
  if (s.find('\n') == std::string::npos || s.front() == ' ' || s.front() == '\n') return false;
  if (s.size() >= 2 && s.compare(s.size() - 2, 2, "\n\n") == 0) return false;
  return std::all_of(s.begin(), s.end(),
                     [](char c) {
                       return c == '\n' || c == '\t' || static_cast<unsigned char>(c) >= 0x20;
                     }) &&
         s.find('\x7f') == std::string::npos;
}

void emit_literal(const std::string& s, const std::string& pad, std::string& out) {
  out.append(s.back() == '\n' ? " |\n" : " |-\n");
  size_t at = 0;
  while (at < s.size()) {
    size_t eol = s.find('\n', at);
    if (eol == std::string::npos) eol = s.size();
    if (eol > at) out.append(pad).append("  ").append(s, at, eol - at);
    out.append("\n");
    at = eol + 1;
  }
}

bool is_block(const ojson& v) {
  return (v.is_object() || v.is_array()) && !v.empty();
}

void emit(const ojson& j, int indent, std::string& out) {
  const std::string pad(static_cast<size_t>(indent), ' ');
  if (j.is_object()) {
    for (const auto& [k, v] : j.items()) {
      out.append(pad).append(scalar(ojson(k))).append(":");
      if (literal_ok(v)) {
        emit_literal(v.get<std::string>(), pad, out);
      } else if (!is_block(v)) {
        out.append(" ").append(scalar(v)).append("\n");
      } else {
        out += "\n";
        emit(v, v.is_array() ? indent : indent + 2, out);
      }
    }
  } else if (j.is_array()) {
    for (const ojson& item : j) {
      if (!is_block(item)) {
        out.append(pad).append("- ").append(scalar(item)).append("\n");
      } else if (item.is_object()) {
        std::string inner;
        emit(item, indent + 2, inner);
        out += pad;
        out += "- ";
        out.append(inner, static_cast<size_t>(indent) + 2, std::string::npos);
      } else {
        out.append(pad).append("- ").append(item.dump()).append("\n");  // a nested list: flow
      }
    }
  } else {
    out.append(pad).append(scalar(j)).append("\n");
  }
}

// ---- shared pieces ---------------------------------------------------------------------------

std::vector<std::pair<std::string, std::string>> rank_env(const JobSpec& spec) {
  std::vector<std::pair<std::string, std::string>> env = {
      {"OMP_NUM_THREADS", std::to_string(spec.cpus_per_task)}};
  bool tunables = false;
  for (const auto& [k, v] : spec.env) {
    if (k == "OMP_NUM_THREADS") continue;  // the job's own threads per rank
    tunables = tunables || k == "GLIBC_TUNABLES";
    env.emplace_back(k, v);
  }
  if (!tunables) env.emplace_back("GLIBC_TUNABLES", "glibc.malloc.hugetlb=1");
  return env;
}

std::vector<std::string> train_argv(const JobSpec& spec) {
  std::vector<std::string> argv = {spec.strata, "train", spec.config};
  argv.insert(argv.end(), spec.args.begin(), spec.args.end());
  return argv;
}

std::string layout_line(const JobSpec& spec, const Placement& p) {
  return cat(spec.ranks, " ranks = tp ", spec.tp, " x pp ", spec.pp, " x dp ", spec.dp, " on ",
             p.nodes, p.nodes == 1 ? " node" : " nodes", ", ", p.ranks_per_node, " per node",
             spec.gpus_per_node > 0 ? cat(" (", spec.gpus_per_node, " GPUs each)") : "");
}

// ---- Kubernetes ------------------------------------------------------------------------------

ojson env_list(const JobSpec& spec) {
  ojson list = ojson::array();
  for (const auto& [k, v] : rank_env(spec)) list.push_back({{"name", k}, {"value", v}});
  return list;
}

ojson worker_resources(const JobSpec& spec, const Placement& p) {
  ojson r = {{"cpu", std::to_string(p.ranks_per_node * spec.cpus_per_task)}};
  if (!spec.memory.empty()) r["memory"] = spec.memory;
  if (spec.gpus_per_node > 0) r["nvidia.com/gpu"] = spec.gpus_per_node;
  return {{"requests", r}, {"limits", r}};
}

ojson volume_mounts(const JobSpec& spec) {
  ojson m = ojson::array({{{"name", "strata-config"}, {"mountPath", kConfigMount}}});
  if (!spec.pvc.empty()) m.push_back({{"name", "workspace"}, {"mountPath", spec.workdir}});
  return m;
}

ojson volumes(const JobSpec& spec) {
  ojson v =
      ojson::array({{{"name", "strata-config"}, {"configMap", {{"name", spec.name + "-config"}}}}});
  if (!spec.pvc.empty())
    v.push_back({{"name", "workspace"}, {"persistentVolumeClaim", {{"claimName", spec.pvc}}}});
  return v;
}

ojson container(const JobSpec& spec, const std::string& name, const ojson& command,
                const ojson& resources) {
  ojson c = {{"name", name}, {"image", spec.image}, {"imagePullPolicy", "IfNotPresent"}};
  c["command"] = command;
  if (!spec.workdir.empty()) c["workingDir"] = spec.workdir;
  c["env"] = env_list(spec);
  c["resources"] = resources;
  c["volumeMounts"] = volume_mounts(spec);
  return c;
}

ojson labels(const JobSpec& spec) {
  return {{"app.kubernetes.io/name", "strata"},
          {"app.kubernetes.io/instance", spec.name},
          {"strata/world-size", std::to_string(spec.ranks)},
          {"strata/layout", cat("tp", spec.tp, "-pp", spec.pp, "-dp", spec.dp)}};
}

ojson metadata(const JobSpec& spec, const std::string& name) {
  ojson m = {{"name", name}};
  if (!spec.k8s_namespace.empty()) m["namespace"] = spec.k8s_namespace;
  m["labels"] = labels(spec);
  return m;
}

// mpirun's arguments: -np N over the hosts given, consecutive ranks filling a host's slots
// first (tp groups inside a node), no binding (each rank runs its own OpenMP threads), and the
// rank environment forwarded by name.
std::vector<std::string> mpirun_argv(const JobSpec& spec) {
  std::vector<std::string> argv = {
      "mpirun",    "-np",  std::to_string(spec.ranks), "--map-by", "slot",
      "--bind-to", "none", "--allow-run-as-root"};
  for (const auto& [k, v] : rank_env(spec)) argv.insert(argv.end(), {"-x", k});
  const std::vector<std::string> train = train_argv(spec);
  argv.insert(argv.end(), train.begin(), train.end());
  return argv;
}

ojson mpijob(const JobSpec& spec, const Placement& p) {
  const ojson launcher_resources = {{"requests", {{"cpu", "1"}, {"memory", "1Gi"}}}};
  ojson launcher_pod = {
      {"metadata", {{"labels", labels(spec)}}},
      {"spec",
       {{"containers",
         ojson::array({container(spec, "launcher", ojson(mpirun_argv(spec)), launcher_resources)})},
        {"volumes", volumes(spec)}}}};
  ojson worker_pod = {
      {"metadata", {{"labels", labels(spec)}}},
      {"spec",
       {{"containers",
         ojson::array({container(spec, "worker", ojson::array({"/usr/sbin/sshd", "-De"}),
                                 worker_resources(spec, p))})},
        {"volumes", volumes(spec)}}}};
  ojson job = {{"apiVersion", "kubeflow.org/v2beta1"}, {"kind", "MPIJob"}};
  job["metadata"] = metadata(spec, spec.name);
  job["spec"] = {
      {"slotsPerWorker", p.ranks_per_node},
      {"mpiImplementation", "OpenMPI"},
      {"launcherCreationPolicy", "WaitForWorkersReady"},
      {"runPolicy",
       {{"cleanPodPolicy", "Running"},
        {"backoffLimit", spec.max_restarts},
        // Gang scheduling (the operator's volcano or scheduler-plugins integration): the
        // launcher and every worker are placed together or not at all.
        {"schedulingPolicy", {{"minAvailable", p.nodes + 1}}}}},
      {"mpiReplicaSpecs",
       {{"Launcher", {{"replicas", 1}, {"restartPolicy", "OnFailure"}, {"template", launcher_pod}}},
        {"Worker",
         {{"replicas", p.nodes}, {"restartPolicy", "OnFailure"}, {"template", worker_pod}}}}}};
  return job;
}

ojson volcano_job(const JobSpec& spec, const Placement& p) {
  // The svc plugin writes the worker host names to /etc/volcano/worker.host; each becomes
  // HOST:SLOTS for mpirun, in order, so consecutive ranks fill one node first.
  const std::string hosts = cat("HOSTS=$(sed 's/$/:", p.ranks_per_node,
                                "/' /etc/volcano/worker.host | paste -sd, -) && exec ");
  std::vector<std::string> mpirun = mpirun_argv(spec);
  mpirun.insert(mpirun.begin() + 1, {"--host", "$HOSTS"});
  std::string line = format_command(mpirun);
  const std::string quoted_hosts = "'$HOSTS'";
  line.replace(line.find(quoted_hosts), quoted_hosts.size(), "\"$HOSTS\"");
  const ojson launcher_resources = {{"requests", {{"cpu", "1"}, {"memory", "1Gi"}}}};
  ojson launcher = {
      {"name", "launcher"},
      {"replicas", 1},
      {"policies", ojson::array({{{"event", "TaskCompleted"}, {"action", "CompleteJob"}}})},
      {"template",
       {{"spec",
         {{"containers",
           ojson::array({container(spec, "launcher", ojson::array({"/bin/sh", "-c", hosts + line}),
                                   launcher_resources)})},
          {"volumes", volumes(spec)},
          {"restartPolicy", "OnFailure"}}}}}};
  ojson worker = {
      {"name", "worker"},
      {"replicas", p.nodes},
      {"template",
       {{"spec",
         {{"containers",
           ojson::array({container(spec, "worker",
                                   ojson::array({"/bin/sh", "-c",
                                                 "mkdir -p /var/run/sshd && exec /usr/sbin/sshd "
                                                 "-De"}),
                                   worker_resources(spec, p))})},
          {"volumes", volumes(spec)},
          {"restartPolicy", "OnFailure"}}}}}};
  ojson job = {{"apiVersion", "batch.volcano.sh/v1alpha1"}, {"kind", "Job"}};
  job["metadata"] = metadata(spec, spec.name);
  job["spec"] = {{"schedulerName", "volcano"},
                 // Gang scheduling: every pod (the launcher and one worker per node, holding all
                 // world-size ranks) starts together or none does.
                 {"minAvailable", p.nodes + 1},
                 {"maxRetry", spec.max_restarts},
                 {"plugins", {{"ssh", ojson::array()}, {"svc", ojson::array()}}},
                 {"policies", ojson::array({{{"event", "PodEvicted"}, {"action", "RestartJob"}},
                                            {{"event", "PodFailed"}, {"action", "RestartJob"}}})},
                 {"tasks", ojson::array({launcher, worker})}};
  return job;
}

}  // namespace

Placement place(const JobSpec& spec) {
  STRATA_CHECK(spec.ranks >= 1, "-n must be at least 1");
  STRATA_CHECK(spec.tp * spec.pp * spec.dp == spec.ranks, "the layout tp ", spec.tp, " x pp ",
               spec.pp, " x dp ", spec.dp, " is ", spec.tp * spec.pp * spec.dp,
               " ranks, but -n asks for ", spec.ranks, "; change -n or parallel.dp");
  STRATA_CHECK(spec.nodes >= 0 && spec.gpus_per_node >= 0 && spec.cpus_per_task >= 1,
               "--nodes, --gpus-per-node and --cpus-per-task must not be negative");
  Placement p;
  p.nodes = spec.nodes > 0           ? spec.nodes
            : spec.gpus_per_node > 0 ? (spec.ranks + spec.gpus_per_node - 1) / spec.gpus_per_node
                                     : 1;
  STRATA_CHECK(spec.ranks % p.nodes == 0, spec.ranks, " ranks do not split evenly over ", p.nodes,
               " nodes; choose --nodes so that it divides -n");
  p.ranks_per_node = spec.ranks / p.nodes;
  STRATA_CHECK(spec.gpus_per_node == 0 || p.ranks_per_node <= spec.gpus_per_node, p.ranks_per_node,
               " ranks per node need as many GPUs, but --gpus-per-node is ", spec.gpus_per_node,
               "; use more --nodes");
  STRATA_CHECK(p.ranks_per_node % spec.tp == 0, "parallel.tp = ", spec.tp, " does not divide the ",
               p.ranks_per_node,
               " ranks per node: a tensor-parallel group would span nodes (its collectives are "
               "inside every layer); choose --nodes so that each node holds a multiple of ",
               spec.tp, " ranks");
  return p;
}

std::string emit_sbatch(const JobSpec& spec) {
  const Placement p = place(spec);
  std::ostringstream s;
  s << "#!/bin/bash\n"
    << "# strata training job for SLURM, written by `strata launch --emit slurm`; submit it with\n"
    << "# `sbatch FILE`. " << layout_line(spec, p) << ";\n"
    << "# consecutive ranks share a node (--distribution=block), so each tensor-parallel group of "
    << spec.tp << "\n# stays inside one node.\n";
  s << "#SBATCH --job-name=" << spec.name << "\n";
  s << "#SBATCH --nodes=" << p.nodes << "\n";
  s << "#SBATCH --ntasks=" << spec.ranks << "\n";
  s << "#SBATCH --ntasks-per-node=" << p.ranks_per_node << "\n";
  s << "#SBATCH --cpus-per-task=" << spec.cpus_per_task << "\n";
  if (spec.gpus_per_node > 0) s << "#SBATCH --gpus-per-node=" << spec.gpus_per_node << "\n";
  if (!spec.memory.empty()) s << "#SBATCH --mem=" << spec.memory << "\n";
  if (!spec.partition.empty()) s << "#SBATCH --partition=" << spec.partition << "\n";
  s << "#SBATCH --time=" << spec.time << "\n";
  if (!spec.workdir.empty()) s << "#SBATCH --chdir=" << spec.workdir << "\n";
  s << "#SBATCH --output=" << spec.name << "-%j.out\n";
  s << "set -euo pipefail\n";
  s << "# The rank environment: threads per rank, and what strata reads (srun gives each task\n"
       "# SLURM_PROCID and its PMIx rank; strata takes its rank and world size from MPI).\n";
  for (const auto& [k, v] : rank_env(spec))
    s << "export " << k << "="
      << (k == "OMP_NUM_THREADS" ? "${SLURM_CPUS_PER_TASK:-" + v + "}" : format_command({v}))
      << "\n";
  if (spec.max_restarts > 0) {
    // strata launch supervises the ranks (heartbeats, restarts from the last checkpoint) and
    // starts them with srun --mpi=pmix inside this allocation.
    std::vector<std::string> argv = {spec.strata,
                                     "launch",
                                     "-n",
                                     std::to_string(spec.ranks),
                                     "--max-restarts",
                                     std::to_string(spec.max_restarts),
                                     "--",
                                     spec.config};
    argv.insert(argv.end(), spec.args.begin(), spec.args.end());
    s << "exec " << format_command(argv) << "\n";
  } else {
    std::vector<std::string> argv = {"srun",
                                     "--mpi=pmix",
                                     "--distribution=block:block",
                                     "--kill-on-bad-exit=1",
                                     "--ntasks=" + std::to_string(spec.ranks),
                                     "--ntasks-per-node=" + std::to_string(p.ranks_per_node),
                                     "--cpus-per-task=" + std::to_string(spec.cpus_per_task)};
    const std::vector<std::string> train = train_argv(spec);
    argv.insert(argv.end(), train.begin(), train.end());
    s << "exec " << format_command(argv) << "\n";
  }
  return s.str();
}

std::vector<nlohmann::ordered_json> k8s_documents(const JobSpec& spec) {
  const Placement p = place(spec);
  STRATA_CHECK(!spec.image.empty(),
               "--emit k8s needs --image: a container image with strata "
               "on PATH (and Open MPI with sshd, as the MPI Operator expects)");
  ojson config_map = {{"apiVersion", "v1"}, {"kind", "ConfigMap"}};
  config_map["metadata"] = metadata(spec, spec.name + "-config");
  ojson data = ojson::object();
  for (const auto& [name, text] : spec.files) data[name] = text;
  config_map["data"] = data;
  return {config_map, spec.k8s_kind == K8sKind::mpijob ? mpijob(spec, p) : volcano_job(spec, p)};
}

std::string emit_k8s(const JobSpec& spec) {
  const std::vector<ojson> docs = k8s_documents(spec);
  const Placement p = place(spec);
  std::string out =
      cat("# strata training job for Kubernetes, written by `strata launch --emit "
          "k8s`; apply with\n# `kubectl apply -f FILE`. ",
          layout_line(spec, p), ".\n");
  for (const ojson& d : docs) out += "---\n" + to_yaml(d);
  return out;
}

std::string to_yaml(const nlohmann::ordered_json& doc) {
  std::string out;
  emit(doc, 0, out);
  return out;
}

}  // namespace strata::launch
