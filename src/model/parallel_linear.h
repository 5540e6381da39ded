// ParallelLinear: the linear layers of a block as Megatron-LM's tensor parallelism splits them,
// in the model's precision. Beside TensorParallel (its collectives), it owns the three pieces
// every family's block is built from:
//   column_input: a column-parallel layer's input from the rows this rank holds (sp: gathered),
//                 f32 or its 16-bit copy under mixed precision;
//   forward / backward: y = x W^T + bias and its gradients (f32, or 16-bit GEMMs with f32
//                 accumulation on the LowpWeights copy);
//   row_parallel: a row-parallel layer + bias + residual, its partial sums reduced over tp
//                 (sp: reduce-scattered to this rank's rows) before the bias is added once.
// Weights and biases are ParamStore indices (-1: none), looked up at each use: a hook may have
// bound the group to a gathered buffer.
#pragma once
#include <cstdint>

#include "core/dtype.h"
#include "kernels/backend.h"
#include "model/activations.h"
#include "model/lowp_weights.h"
#include "model/params.h"
#include "model/shard.h"
#include "model/tensor_parallel.h"

namespace strata {

// A GEMM input: f32, or under mixed precision its 16-bit copy; exactly one is set.
struct LinearInput {
  const float* f32 = nullptr;
  const uint16_t* lowp = nullptr;
};

class ParallelLinear {
 public:
  ParallelLinear() = default;
  ParallelLinear(Backend& backend, const TensorParallel& tp, const ModelShard& shard,
                 ParamStore& params, GradScratch& scratch, LowpWeights& lowp_weights,
                 DType precision, int64_t d_model)
      : k_(&backend),
        tp_(&tp),
        shard_(&shard),
        params_(&params),
        s_(&scratch),
        lowp_weights_(&lowp_weights),
        precision_(precision),
        c_(d_model) {}

  bool lowp() const { return precision_ != DType::f32; }
  DType precision() const { return precision_; }

  // y[n, out] = x W^T + bias (bias -1: none).
  void forward(float* y, LinearInput x, int w, int bias, int64_t n, int64_t in, int64_t out);
  // dx = dy W; dw += dy^T x; dbias += column sums of dy (null dw: dx only, for a tied head whose
  // weight gradient comes later; null dbias: no bias).
  void backward(float* dx, float* dw, float* dbias, const float* dy, LinearInput x, int w,
                int64_t n, int64_t in, int64_t out);
  // The input of a column-parallel layer from x, the [ns, c] rows this rank holds: f32 gathered
  // into gather32 under sp, or (mixed precision) x rounded into `keep` (the 16-bit copy the layer
  // keeps for backward; `convert` false: keep already holds it) and gathered in 16 bits.
  LinearInput column_input(const float* x, uint16_t* keep, float* gather32, int64_t n,
                           bool convert);
  // out[ns, c] = reduce(x W^T) + bias + residual, over the tp group.
  void row_parallel(float* out, LinearInput x, int w, int bias, const float* residual, int64_t n,
                    int64_t in);
  // The 16-bit working copy of parameter idx.
  const uint16_t* lowp_weight(int idx) { return lowp_weights_->get(idx); }

 private:
  // The 16-bit path's buffers in the gradient scratch.
  LowpScratch scratch() const { return {s_->dy_lp, s_->dy_capacity, s_->lowp_wide}; }

  Backend* k_ = nullptr;
  const TensorParallel* tp_ = nullptr;
  const ModelShard* shard_ = nullptr;
  ParamStore* params_ = nullptr;
  GradScratch* s_ = nullptr;
  LowpWeights* lowp_weights_ = nullptr;
  DType precision_ = DType::f32;
  int64_t c_ = 0;
};

}  // namespace strata
