// The post-training hand-off ([post_train]): once the final checkpoint is committed, rank 0
// registers it in the model registry (track/registry.h) and runs an evaluation command on it,
// whose exit status and output are recorded with the version.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "run/config.h"

namespace strata {

// Runs [post_train] for a run that finished at `final_step` (call on rank 0, after the last
// checkpoint is committed). Does nothing when neither registering nor evaluating is asked for.
// Throws when the final checkpoint is missing or registering fails (naming the command that
// registers it by hand); a failing evaluation command is logged as a warning and recorded.
void run_post_train(const RunConfig& config, int64_t final_step);

struct CommandResult {
  int exit_status = 0;  // the exit code, or 128 + signal
  double seconds = 0;
  std::string output;  // stdout and stderr together, the last `max_output` bytes
};

// Runs `command` with /bin/sh -c, with `env` added to the environment (Open MPI's and PMIx's
// variables removed, so that a strata command inside is not taken for a rank of this job).
CommandResult run_shell_command(const std::string& command,
                                const std::vector<std::pair<std::string, std::string>>& env,
                                size_t max_output = 64 << 10);

// eval_command with {checkpoint}, {ref}, {name}, {version} and {run_dir} replaced; path values
// are single-quoted for the shell.
std::string expand_eval_command(const std::string& command, const std::string& checkpoint,
                                const std::string& name, int64_t version,
                                const std::string& run_dir);

}  // namespace strata
