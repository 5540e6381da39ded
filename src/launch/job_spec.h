// Jobs for schedulers (`strata launch --emit slurm|k8s`): the same N ranks `strata launch` would
// supervise, written as an sbatch script or as Kubernetes manifests for a gang-scheduled job,
// instead of being started here. Pure functions of a JobSpec, so every case is unit-tested.
//
// Placement: every node holds the same number of ranks, consecutive ranks share a node (rank
// order is Megatron's, tp fastest), and that number must be a multiple of the tensor-parallel
// size, so that each tp group (whose collectives sit inside every layer) stays inside one node.
//
// slurm: #SBATCH lines (job name, nodes, tasks per node, cpus per task, time, output, working
//        directory, GPUs), then `srun --mpi=pmix --distribution=block:block ... strata train`
//        (or `strata launch --max-restarts K` for restarts, which starts srun itself).
// k8s:   a ConfigMap holding the config file, and an MPIJob (kubeflow.org/v2beta1, the MPI
//        Operator: one launcher pod running mpirun, one worker pod per node with
//        slotsPerWorker = ranks per node) or a Volcano Job (batch.volcano.sh/v1alpha1); both
//        gang-scheduled: every pod of the job is placed at once or none is (MPIJob
//        runPolicy.schedulingPolicy.minAvailable, Volcano minAvailable = all pods).
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "core/enum_names.h"

namespace strata {
namespace launch {
// --k8s-kind: the MPI Operator's MPIJob, or a Volcano Job.
enum class K8sKind { mpijob, volcano };
}  // namespace launch
template <>
struct EnumNames<launch::K8sKind> {
  static constexpr std::string_view names[] = {"mpijob", "volcano"};
};
}  // namespace strata

namespace strata::launch {

struct JobSpec {
  std::string name;  // job name (SLURM job name, Kubernetes object names)
  int ranks = 1;     // world size
  int tp = 1, pp = 1, dp = 1;
  int nodes = 0;          // 0: from gpus_per_node (one rank per GPU), else 1
  int gpus_per_node = 0;  // 0: CPU ranks
  int cpus_per_task = 1;  // threads per rank (OMP_NUM_THREADS)
  std::string time = "24:00:00";
  std::string partition;  // sbatch --partition ("" : the cluster's default)
  std::string memory;     // per node: sbatch --mem ("64G"), k8s memory ("64Gi"); "": unset
  int max_restarts = 0;
  // What every rank runs: STRATA train CONFIG ARGS...
  std::string strata = "strata";
  std::string config;                                    // the config file as the job sees it
  std::vector<std::string> args;                         // after CONFIG (--set k=v, --deepspeed F)
  std::string workdir;                                   // sbatch --chdir; k8s workingDir
  std::vector<std::pair<std::string, std::string>> env;  // forwarded to every rank
  // Kubernetes
  K8sKind k8s_kind = K8sKind::mpijob;
  std::string image;  // container image with strata on PATH
  std::string k8s_namespace;
  std::string pvc;  // a PersistentVolumeClaim mounted at workdir (run directories, data)
  // Files placed in the ConfigMap and mounted at /etc/strata (name, text): the config and a
  // DeepSpeed JSON; config/args name them by their /etc/strata path.
  std::vector<std::pair<std::string, std::string>> files;
};

struct Placement {
  int nodes = 1, ranks_per_node = 1;
};

// Checks the spec (ranks = tp x pp x dp, whole nodes, tp inside a node, GPUs) and places the
// ranks; throws naming the option to change.
Placement place(const JobSpec& spec);

std::string emit_sbatch(const JobSpec& spec);

// The Kubernetes documents (ConfigMap, then the MPIJob or Volcano Job), and their YAML.
std::vector<nlohmann::ordered_json> k8s_documents(const JobSpec& spec);
std::string emit_k8s(const JobSpec& spec);

// Block-style YAML of a JSON document (strings quoted where YAML would read them otherwise).
std::string to_yaml(const nlohmann::ordered_json& doc);

}  // namespace strata::launch
