// What `strata plan` prints: a planned layout as JSON, the ranking as a table, a memory breakdown.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "plan/layout_search.h"

namespace strata {

nlohmann::json planned_layout_json(const PlannedLayout& layout);
nlohmann::json cluster_json(const ClusterProfile& cluster);

// One line per category with its bytes, then the total against the capacity.
std::string format_memory(const PlannedLayout& layout);
// The step time and its shares, one line.
std::string format_step(const StepEstimate& step);
// The ranking: one row per layout with memory, step time, tokens/s, MFU and the time shares.
std::string format_ranking(const std::vector<PlannedLayout>& layouts);

}  // namespace strata
