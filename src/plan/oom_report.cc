#include "plan/oom_report.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <utility>
#include <vector>

#include "core/error.h"
#include "plan/units.h"

namespace strata {

namespace {

// What shrinks each category in strata (the keys a user sets).
const char* remedy(MemCategory c) {
  switch (c) {
    case MemCategory::params:
      return "split the model (parallel.tp, parallel.pp) or shard it (parallel.zero = 3)";
    case MemCategory::grads:
      return "split the model (parallel.tp, parallel.pp) or shard gradients (parallel.zero >= 2)";
    case MemCategory::master:
      return "shard master weights (parallel.zero >= 1), offload them (optim.offload = \"nvme\") "
             "or split the model";
    case MemCategory::optimizer:
      return "shard the Adam moments (parallel.zero >= 1), offload them (optim.offload = "
             "\"nvme\") or split the model";
    case MemCategory::activations:
      return "recompute (train.recompute), a smaller micro-batch (train.batch_size), or split "
             "them (parallel.tp with parallel.sp, parallel.pp, parallel.cp over the sequence)";
    case MemCategory::comm:
      return "smaller gradient buckets (parallel.bucket_mb)";
    case MemCategory::workspace:
      return "a smaller micro-batch (train.batch_size) or parallel.tp";
  }
  return "";
}

}  // namespace

std::string explain_oom(const PlannedLayout& given, const SearchResult& alternatives) {
  const MemoryEstimate& m = given.memory;
  std::string out = cat("does not fit: a rank (pipeline stage ", m.pp_rank, ") needs ",
                        format_bytes(m.total), " but has ", format_bytes(given.capacity),
                        ": over by ", format_bytes(m.total - given.capacity), " (",
                        m.total / std::max<int64_t>(1, given.capacity), ".",
                        (m.total * 10 / std::max<int64_t>(1, given.capacity)) % 10, "x)\n");
  std::vector<std::pair<int64_t, MemCategory>> by_size;
  for (int c = 0; c < kNumMemCategories; ++c)
    if (m.bytes[c] > 0) by_size.emplace_back(m.bytes[c], static_cast<MemCategory>(c));
  std::sort(by_size.begin(), by_size.end(), [](const auto& a, const auto& b) { return a > b; });
  int64_t model_states = 0;
  for (MemCategory c :
       {MemCategory::params, MemCategory::grads, MemCategory::master, MemCategory::optimizer})
    model_states += m.category(c);
  const bool moe = given.config.model.moe.enabled();
  for (const auto& [bytes, c] : by_size) {
    const double share = 100.0 * static_cast<double>(bytes) / static_cast<double>(m.total);
    char pct[16];
    std::snprintf(pct, sizeof pct, "%.0f%%", share);
    // A Mixture-of-Experts model's model states are mostly experts, which parallel.ep splits.
    const bool state = c == MemCategory::params || c == MemCategory::grads ||
                       c == MemCategory::master || c == MemCategory::optimizer;
    out += cat("  ", mem_category_name(c), ": ", format_bytes(bytes), " (", pct, " of the total",
               bytes > given.capacity ? ", alone more than the device holds" : "", "): ", remedy(c),
               moe && state ? "; or split the experts (parallel.ep)" : "", "\n");
  }
  if (model_states > given.capacity)
    out += cat("  model states (parameters, gradients, master weights, optimizer) alone need ",
               format_bytes(model_states), " per rank: only splitting or sharding them helps\n");
  if (!alternatives.ranked.empty()) {
    out += cat("layouts on the same ", given.world, " ranks and global batch of ",
               alternatives.global_batch, " sequences that fit, fastest first:\n");
    const size_t n = std::min<size_t>(3, alternatives.ranked.size());
    for (size_t i = 0; i < n; ++i) {
      const PlannedLayout& l = alternatives.ranked[i];
      out += cat("  ", i + 1, ". ", l.describe(), ": ", format_bytes(l.memory.total), " per rank");
      if (l.step.step_s > 0) {
        char perf[96];
        std::snprintf(perf, sizeof perf, ", %.0f tokens/s, MFU %.1f%%", l.step.tokens_per_s,
                      100 * l.step.mfu);
        out += perf;
      }
      out += "\n";
    }
  } else if (!alternatives.closest.empty()) {
    out += cat("no layout on ", given.world, " ranks fits; the smallest footprint is ",
               alternatives.closest.front().describe(), " at ",
               format_bytes(alternatives.closest.front().memory.total),
               " per rank: use more GPUs, offload (optim.offload = \"nvme\") or a smaller model\n");
  }
  return out;
}

std::string plan_failed_run(const std::string& run_dir, const ClusterProfile& cluster) {
  namespace fs = std::filesystem;
  const fs::path config_path = fs::path(run_dir) / "config.json";
  if (!fs::exists(config_path)) return "";
  std::ifstream in(config_path);
  RunConfig config = config_from_json(nlohmann::json::parse(in));
  int64_t world = 0;
  static const std::regex rank_log(R"(rank_\d+\.log)");
  const fs::path logs = fs::path(run_dir) / "logs";
  if (fs::is_directory(logs))
    for (const fs::directory_entry& e : fs::directory_iterator(logs))
      if (std::regex_match(e.path().filename().string(), rank_log)) ++world;
  world = std::max<int64_t>(1, world);
  const PlannedLayout given = evaluate_layout(config, world, &cluster, 0);
  SearchOptions options;
  options.gpus = world;
  options.top = 3;
  options.capacity = given.capacity;
  const SearchResult alternatives = search_layouts(config, cluster, options);
  std::string out = cat("planned (strata plan): ", given.describe(), " on ", world, " rank(s)\n");
  if (given.fits())
    return out + cat("  the planner predicts ",
                     format_bytes(static_cast<double>(given.memory.total)),
                     " per rank, within the ", format_bytes(static_cast<double>(given.capacity)),
                     " limit: the overflow came from outside the planned buffers\n");
  return out + explain_oom(given, alternatives);
}

}  // namespace strata
