// Memory model: the bytes one rank's arena will hold for a config, per category, before launch.
// It follows what strata allocates (model/activations.cc, model/params.cc, parallel/*.cc,
// optim/*.cc, train/trainer.cc), not a textbook formula, so that on this machine it predicts the
// arena totals that a run reports in metrics.jsonl ("mem"); docs/PLANNER.md shows the validation.
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/arena.h"
#include "core/tensor.h"  // Device
#include "run/config.h"

namespace strata {

struct MemoryEstimate {
  std::array<int64_t, kNumMemCategories> bytes{};  // per arena category (MemCategory order)
  int64_t total = 0;                               // their sum: the rank's arena peak
  int pp_rank = 0;                                 // the pipeline rank this estimate is for
  int64_t activation_bytes_per_layer = 0;          // what one layer keeps for one micro-batch
  int64_t micro_batches_in_flight = 0;             // activation sets the schedule holds at once
  std::vector<std::string> explain;                // the arithmetic, one line per category
  // Assumptions the numbers rest on that a reader must know (always filled, also without the
  // explanation): MoE with ep > 1 sizes the experts' buffers for the worst-case routing.
  std::vector<std::string> notes;
  int64_t category(MemCategory c) const { return bytes[static_cast<int>(c)]; }
};

struct MemoryModelOptions {
  // How the ranks start. `strata train` on one rank without a launcher runs without MPI, on
  // one-rank groups at ZeRO stage 0 (parallel.zero does not apply); under mpirun, srun or `strata
  // launch` even one rank keeps parallel.zero. false: assume the former when world == 1.
  bool under_launcher = false;
  // OpenMP threads per rank, which size the attention kernels' per-thread backward scratch.
  // 0: system.threads, or when that is 0 too, omp_get_max_threads() of this process (a rank
  // started with the same OMP_NUM_THREADS sees the same).
  int threads = 0;
  bool explain = true;  // fill MemoryEstimate::explain (the search can skip the strings)
  // The device the ranks run on: cuda multiplies 16-bit operands natively, so none is counted as
  // widened to f32 whatever this CPU's kernel level (a GPU cluster planned on an AVX2 laptop);
  // cpu: this CPU's level decides. Unset: system.device.
  std::optional<Device> device;
};

// One rank of pipeline stage `pp_rank` (tp rank 0, dp rank 0) of `config` run on `world` ranks
// (parallel.dp = 0 is derived from world as the engine does). The config must be validated.
MemoryEstimate estimate_rank_memory(const RunConfig& config, int64_t world, int pp_rank);
MemoryEstimate estimate_rank_memory(const RunConfig& config, int64_t world, int pp_rank,
                                    const MemoryModelOptions& options);

// The rank with the largest total over all pipeline stages (the first such stage on a tie; the
// first stage usually, but the last one when its logits outweigh the first's micro-batches in
// flight).
MemoryEstimate estimate_memory(const RunConfig& config, int64_t world);
MemoryEstimate estimate_memory(const RunConfig& config, int64_t world,
                               const MemoryModelOptions& options);

}  // namespace strata
