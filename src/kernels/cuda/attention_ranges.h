// Attention with a key range per query row on the GPU: the device twin of
// kernels/cpu/attention_ranges.h (same layouts, strides, mask rule and merge rule; read the
// specification there). It is the block computation of context parallelism (a ring step's key
// block) and of document masking, so that ContextAttention runs unchanged on a CudaBackend.
//
// Implementation (attention_ranges.cu): f32 on CUDA cores, a warp per (query row, head) in the
// forward and dq passes, a warp per (key row, kv head) in the dk/dv pass; within a warp a lane
// per key (or query) of a tile of 32 for the scores, and a lane per head-dim column for the
// products. Online softmax in the forward; the backward recomputes P from the final lse and
// D_i = dout_i . out_i where it needs them (no workspace, so the planner's count is the CPU's).
// Every output element is written by one warp in a fixed order: no atomics, results repeat bit
// for bit on the same GPU. It is the correctness-first kernel (a key row is read once per query
// row that sees it, from L2), not a tensor-core one: the causal flash kernels remain the fast
// path without context parallelism or document masking.
//
// Head dims up to 256 (others throw strata::Error). All pointers are device pointers; the work
// is enqueued on `stream`.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/shapes.h"

namespace strata::cuda {

constexpr int64_t kRangeAttentionMaxHeadDim = 256;

// out, lse overwritten (a row with an empty range: out 0, lse -infinity).
void attention_ranges_forward(float* out, float* lse, const float* q, int64_t q_stride,
                              const float* k, const float* v, int64_t kv_stride,
                              const int32_t* key_begin, const int32_t* key_end,
                              const RangeAttentionShape& s, cudaStream_t stream);

// (out_acc, lse_acc) <- their log-sum-exp merge with (out_part, lse_part), in place.
void attention_ranges_merge(float* out_acc, float* lse_acc, const float* out_part,
                            const float* lse_part, const RangeAttentionShape& s,
                            cudaStream_t stream);

// ACCUMULATES dq, dk, dv for this key block from the final out and lse (see the CPU header).
void attention_ranges_backward(float* dq, float* dk, float* dv, const float* dout, const float* q,
                               int64_t q_stride, const float* k, const float* v, int64_t kv_stride,
                               const float* out, const float* lse, const int32_t* key_begin,
                               const int32_t* key_end, const RangeAttentionShape& s,
                               cudaStream_t stream);

}  // namespace strata::cuda
