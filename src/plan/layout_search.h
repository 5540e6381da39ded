// Layout search: every layout of a model on N GPUs (tp, pp, dp, vpp, sequence parallelism, ZeRO
// stage, expert parallelism for MoE models, context parallelism with flash attention, micro-batch
// size, recomputation) that strata can run,
// evaluated with the memory and performance models; those that fit the device memory are ranked by
// predicted throughput.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "plan/cluster_profile.h"
#include "plan/memory_model.h"
#include "plan/perf_model.h"
#include "run/config.h"

namespace strata {

struct PlannedLayout {
  RunConfig config;  // the candidate: parallel.*, train.batch_size/grad_accum/recompute set
  int64_t world = 0;
  MemoryEstimate memory;  // the rank with the largest arena
  StepEstimate step;
  int64_t capacity = 0;  // bytes one rank may hold
  bool fits() const { return memory.total <= capacity; }
  std::string describe() const;  // "tp 8 pp 4 dp 2 ep 2 zero 1, micro-batch 1 x 64, ..."
};

struct SearchOptions {
  int64_t gpus = 0;
  int64_t global_batch = 0;  // sequences per optimizer step; 0: the config's
  int64_t top = 10;          // layouts kept in the ranking
  int64_t capacity = 0;      // bytes per rank; 0: the cluster device's memory
};

struct SearchResult {
  std::vector<PlannedLayout> ranked;   // fitting layouts, fastest first (at most `top`)
  std::vector<PlannedLayout> closest;  // when none fits: the smallest footprints
  int64_t enumerated = 0;              // candidates built
  int64_t fitting = 0;                 // candidates that fit
  int64_t global_batch = 0;
  double seconds = 0;  // search time
};

// The global batch (sequences per step) a config trains with on `world` ranks.
int64_t config_global_batch(const RunConfig& config, int64_t world);

// Evaluates the config's own layout (memory; step time when `cluster` is given).
PlannedLayout evaluate_layout(const RunConfig& config, int64_t world, const ClusterProfile* cluster,
                              int64_t capacity);

SearchResult search_layouts(const RunConfig& base, const ClusterProfile& cluster,
                            const SearchOptions& options);

// Bytes a rank may hold: options/the profile's device memory, or system.memory_limit_mb (the
// arena's limit) when that is set.
int64_t rank_capacity(const RunConfig& config, const ClusterProfile* cluster);
// The memory model's options for ranks on `cluster`'s device (a GPU: 16-bit products native,
// whatever this CPU's kernel level); null: the config's own device.
MemoryModelOptions memory_options(const ClusterProfile* cluster);

}  // namespace strata
