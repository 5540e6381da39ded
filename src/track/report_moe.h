// strata report's expert-load section for a mixture-of-experts run: per MoE layer, a heat map of
// each expert's share of the layer's assignments over the steps (inline SVG, like the other
// plots: no scripts), and a table of the last step's load and balancing losses. A router that
// sends most tokens to a few experts shows as a dark row; a balanced one stays near white.
#pragma once
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

namespace strata::report {

// The section's HTML from metrics.jsonl's records by step (their "moe" records: tokens_per_expert,
// one list of counts per MoE layer, and layers.L's aux_loss, z_loss and dropped), or "" when no
// record has tokens per expert (a dense run).
std::string moe_section(const std::map<int64_t, nlohmann::json>& metrics);

// The heat map's colour ("#rrggbb") for `share` of a layer's assignments among `experts`: the
// neutral white at the fair share 1/experts, red above it and blue below, on a log scale of
// share / fair share that reaches its darkest red at 1 (every assignment on one expert) and its
// darkest blue at 1/experts of the fair share or less. Grey for a share that is not a number.
std::string share_color(double share, int64_t experts);

}  // namespace strata::report
