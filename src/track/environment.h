// The machine and build a run ran on, for reports: RUN_DIR/environment.json, written by rank 0
// when its metrics sink opens (so a report shows where the numbers came from).
#pragma once
#include <nlohmann/json.hpp>
#include <string>

namespace strata {

// Host name, CPU model, logical cores, memory, OS, OpenMP threads, compiler, the commit strata
// was configured at, the MPI world size (from the launcher's environment) and the environment
// variables that change performance (OMP_NUM_THREADS, OPENBLAS_CORETYPE, GLIBC_TUNABLES, ...).
nlohmann::json environment_facts();
// Writes environment_facts() (plus "recorded_at") to RUN_DIR/environment.json; never throws.
void write_environment(const std::string& run_dir);

}  // namespace strata
