// The command that starts the ranks: `srun --mpi=pmix ...` inside a SLURM allocation, otherwise
// `mpirun ...`. Pure functions of the options and the environment, so every case is unit-tested.
#pragma once
#include <string>
#include <vector>

#include "launch/launch_options.h"

namespace strata::launch {

std::vector<std::string> build_command(const LaunchOptions& options, const LaunchEnv& env);

// Threads per rank when OMP_NUM_THREADS is not set: the host's cores shared by its ranks.
int threads_per_rank(const LaunchOptions& options, const LaunchEnv& env);

// The command as a shell would need it typed (for --dry-run and the log).
std::string format_command(const std::vector<std::string>& argv);

// Hosts named in an Open MPI hostfile's text (non-empty lines that are not comments).
int count_hostfile_hosts(const std::string& text);

// Reads the machine: SLURM variables, srun on PATH, uid, cores, the hostfile, /proc/self/exe and
// the variables to forward.
LaunchEnv detect_launch_env(const LaunchOptions& options);

}  // namespace strata::launch
