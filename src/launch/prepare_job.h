// `strata prepare --emit slurm`: a distributed prepare (src/data/prepare.h) as SLURM jobs whose
// tasks need not run at once: the scan and encode stages as array jobs of one task per worker, the
// plan and assembly as single tasks, each job starting when the one before succeeded
// (--dependency=afterok). What is written is a bash script that submits the four jobs (sbatch
// cannot chain jobs from inside one script); a pure function of the spec, so it is unit-tested.
#pragma once
#include <string>
#include <vector>

namespace strata::launch {

struct PrepareJobSpec {
  std::string name = "strata-prepare";
  int workers = 2;        // array tasks of the scan and encode stages
  int cpus_per_task = 1;  // threads per task (OMP_NUM_THREADS)
  std::string time = "24:00:00";
  std::string partition, memory, workdir;  // "": the cluster's default, here
  std::string strata = "strata";
  std::vector<std::string> args;  // of `strata prepare`, without --stage/--workers/--worker
};

std::string emit_prepare_sbatch(const PrepareJobSpec& spec);

}  // namespace strata::launch
