// Out-of-memory diagnosis: for a layout that does not fit, which categories take the memory and
// by how much the rank overflows, and the best layouts of the same GPUs and global batch that fit.
#pragma once
#include <string>

#include "plan/layout_search.h"

namespace strata {

// A few lines: the total against the capacity, the categories largest first with their share and
// what would shrink each, and the proposed layouts (from `alternatives`, which may be empty).
std::string explain_oom(const PlannedLayout& given, const SearchResult& alternatives);

}  // namespace strata

namespace strata {

// `strata diagnose` on a run that ran out of memory: its config (RUN_DIR/config.json, which rank 0
// writes at start) and world size (its logs/rank_N.log files; one process without them), planned
// against `cluster`: what overflowed and the layouts of the same ranks that fit. Empty when the
// run directory has no config.
std::string plan_failed_run(const std::string& run_dir, const ClusterProfile& cluster);

}  // namespace strata
