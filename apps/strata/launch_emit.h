// `strata launch --emit slurm|k8s`: the options, and writing the job (src/launch/job_spec.h)
// for a config that cmd_launch.cc has read.
#pragma once
#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "launch/job_spec.h"
#include "run/run_plan.h"

namespace strata::cli {

// --emit: start the ranks (none), or write an sbatch script or Kubernetes manifests.
enum class EmitKind { none, slurm, k8s };
}  // namespace strata::cli
namespace strata {
template <>
struct EnumNames<cli::EmitKind> {
  static constexpr std::string_view names[] = {"none", "slurm", "k8s"};
};
}  // namespace strata
namespace strata::cli {

struct EmitArgs {
  EmitKind emit = EmitKind::none;
  std::string out;  // "": stdout
  std::string name, time = "24:00:00", partition, memory, image, k8s_namespace, pvc, workdir;
  launch::K8sKind k8s_kind = launch::K8sKind::mpijob;
  int nodes = 0, gpus_per_node = 0, cpus_per_task = 0;
};

void add_emit_options(CLI::App* app, EmitArgs& args);

// Writes the job for `ranks` ranks of `strata train COMMAND...` (COMMAND = CONFIG [args]);
// `config` is the config as read (layout, run directory). Returns the exit status.
int emit_job(const EmitArgs& args, const RunPlan& plan, const std::vector<std::string>& command,
             int ranks, int max_restarts);

}  // namespace strata::cli
