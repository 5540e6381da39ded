#include "launch/prepare_job.h"

#include <sstream>

#include "core/error.h"
#include "launch/command.h"

namespace strata::launch {

std::string emit_prepare_sbatch(const PrepareJobSpec& spec) {
  STRATA_CHECK(spec.workers >= 1, "strata prepare --emit slurm: --workers must be at least 1, not ",
               spec.workers);
  STRATA_CHECK(spec.cpus_per_task >= 1,
               "strata prepare --emit slurm: --cpus-per-task must be at "
               "least 1, not ",
               spec.cpus_per_task);
  std::vector<std::string> prepare = {spec.strata, "prepare"};
  prepare.insert(prepare.end(), spec.args.begin(), spec.args.end());
  const std::string base = format_command(prepare);
  const std::string workers = std::to_string(spec.workers);
  // Each job's command, as sbatch --wrap runs it (sh -c); the task id expands in the task.
  const std::string array_worker = " --workers " + workers + " --worker \\$SLURM_ARRAY_TASK_ID";
  std::vector<std::string> common = {
      "--job-name=" + spec.name,
      "--time=" + spec.time,
      "--ntasks=1",
      "--cpus-per-task=" + std::to_string(spec.cpus_per_task),
      "--output=%x-%A_%a.out",
      "--export=ALL,OMP_NUM_THREADS=" + std::to_string(spec.cpus_per_task)};
  if (!spec.partition.empty()) common.push_back("--partition=" + spec.partition);
  if (!spec.memory.empty()) common.push_back("--mem=" + spec.memory);
  if (!spec.workdir.empty()) common.push_back("--chdir=" + spec.workdir);
  const std::string array = "--array=0-" + std::to_string(spec.workers - 1);

  std::ostringstream s;
  s << "#!/usr/bin/env bash\n"
    << "# strata prepare as SLURM jobs, written by `strata prepare --emit slurm`: run it with "
       "bash\n"
    << "# (it submits four jobs; with SBATCH_WAIT=1 in the environment each submission waits for\n"
    << "# its job to end). The scan and encode stages are arrays of " << workers
    << " task(s), one\n"
    << "# worker each; the plan and the assembly are one task each; every job starts when the one\n"
    << "# before succeeded. A failed or cancelled job leaves its finished units recorded in the\n"
    << "# output's .prepare folder: submitting again resumes from them, to the same output.\n"
    << "set -euo pipefail\n"
    << "common=(" << format_command(common) << ")\n"
    << "submit() { local id; id=$(sbatch --parsable \"${common[@]}\" \"$@\"); echo \"${id%%;*}\"; "
       "}\n"
    << "# What every task runs (sbatch --wrap: sh -c), then its stage and worker.\n"
    << "prepare=" << format_command({base}) << "\n"
    << "scan=$(submit " << array << " --wrap \"$prepare --stage scan" << array_worker << "\")\n"
    << "plan=$(submit --dependency=afterok:$scan --wrap \"$prepare --stage plan --workers 1 "
       "--worker 0\")\n"
    << "encode=$(submit " << array << " --dependency=afterok:$plan --wrap \"$prepare --stage encode"
    << array_worker << "\")\n"
    << "assemble=$(submit --dependency=afterok:$encode --wrap \"$prepare --stage assemble "
       "--workers 1 --worker 0\")\n"
    << "echo \"strata prepare: submitted scan $scan, plan $plan, encode $encode, assemble "
       "$assemble\"\n";
  return s.str();
}

}  // namespace strata::launch
