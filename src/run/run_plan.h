// How a RunConfig becomes what the ranks build: read by the trainer (build_model, make_optimizer)
// and by the planner (plan/memory_model.cc), so that both size the same buffers.
#pragma once
#include <cstdint>

#include "core/dtype.h"
#include "model/activations.h"
#include "parallel/data_parallel.h"
#include "run/config.h"

namespace strata {

int64_t micro_batches_per_step(const RunConfig& config);  // parallel.micro_batches or grad_accum
DType train_precision(const TrainConfig& train);          // f32, bf16 or f16
RecomputePolicy recompute_policy(const TrainConfig& train);
DataParallelOptions data_parallel_options(const ParallelConfig& parallel);
int64_t offload_chunk_elements(const OptimConfig& optim);

}  // namespace strata
