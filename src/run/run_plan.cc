#include "run/run_plan.h"

#include <algorithm>

namespace strata {

int64_t micro_batches_per_step(const RunConfig& config) {
  return config.parallel.micro_batches > 0 ? config.parallel.micro_batches
                                           : config.train.grad_accum;
}

DType train_precision(const TrainConfig& train) {
  return train.precision == "bf16"   ? DType::bf16
         : train.precision == "fp16" ? DType::f16
                                     : DType::f32;
}

RecomputePolicy recompute_policy(const TrainConfig& train) {
  return {recompute_from_name(train.recompute), train.recompute_layers};
}

DataParallelOptions data_parallel_options(const ParallelConfig& p) {
  DataParallelOptions opt;
  opt.zero = static_cast<int>(p.zero);
  opt.bucket_elements = std::max<int64_t>(1, static_cast<int64_t>(p.bucket_mb * (1 << 20) / 4));
  opt.overlap = p.overlap;
  opt.reduce_dtype = p.grad_reduce_dtype == "bf16" ? DType::bf16 : DType::f32;
  return opt;
}

int64_t offload_chunk_elements(const OptimConfig& optim) {
  return std::max<int64_t>(1024, static_cast<int64_t>(optim.offload_chunk_mb * (1 << 20) / 4));
}

}  // namespace strata
