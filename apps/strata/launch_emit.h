// `strata launch --emit slurm|k8s`: the options, and writing the job (src/launch/job_spec.h)
// for a config that cmd_launch.cc has read.
#pragma once
#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "run/config.h"

namespace strata::cli {

struct EmitArgs {
  std::string emit;  // "", "slurm" or "k8s"
  std::string out;   // "": stdout
  std::string name, time = "24:00:00", partition, memory, image, k8s_kind = "mpijob", k8s_namespace,
                    pvc, workdir;
  int nodes = 0, gpus_per_node = 0, cpus_per_task = 0;
};

void add_emit_options(CLI::App* app, EmitArgs& args);

// Writes the job for `ranks` ranks of `strata train COMMAND...` (COMMAND = CONFIG [args]);
// `config` is the config as read (layout, run directory). Returns the exit status.
int emit_job(const EmitArgs& args, const RunConfig& config, const std::vector<std::string>& command,
             int ranks, int max_restarts);

}  // namespace strata::cli
