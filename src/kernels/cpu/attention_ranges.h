// Attention with an explicit key range per query row, tiled (FlashAttention-2 style), f32: the
// one primitive behind context parallelism (ring attention: a local query chunk against the key
// chunks that arrive, merged block by block) and document masking of packed sequences.
//
// Shapes: b items of tq query rows and tk key rows each (tq may differ from tk: a query chunk
// against a remote key chunk); nh query heads, nkv kv heads (nh a multiple of nkv; query head h
// reads kv head h / (nh / nkv)); hd head dim; scores scaled by 1/sqrt(hd).
// Operands are rows with a stride, so that they can point into the fused qkv buffer
// ([b*t, (nh + 2*nkv)*hd]: q = qkv, k = qkv + nh*hd, v = qkv + (nh + nkv)*hd, strides
// (nh + 2*nkv)*hd) or into separate buffers:
//   q: row i of item bb at q + (bb*tq + i)*q_stride, head h at + h*hd;
//   k, v: row j of item bb at k + (bb*tk + j)*kv_stride, head g at + g*hd (v likewise);
//   out[b*tq, nh*hd] contiguous; lse[b, nh, tq].
// Mask: query row i of item bb attends key j iff key_begin[bb*tq + i] <= j < key_end[bb*tq + i]
// (indices relative to this key block). Causal: [0, i + 1) with tq == tk; document masking:
// [doc_start(i), i + 1); a ring block fully visible: [0, tk). A row with an empty range sees no
// key: out = 0, lse = -infinity (the identity of attention_ranges_merge).
//
// Determinism: every output element is produced by exactly one task in a fixed order of
// operations, so results are bitwise independent of the thread count and of scheduling.
#pragma once
#include <cstdint>

#include "kernels/shapes.h"

namespace strata::kernels {

using ::strata::RangeAttentionShape;  // kernels/shapes.h

// out = softmax(q k^T / sqrt(hd), masked to each row's range) v; lse[bb, h, i] =
// log sum_{key_begin <= j < key_end} exp(q_i . k_j / sqrt(hd)). Both overwritten.
void attention_ranges_forward(float* out, float* lse, const float* q, int64_t q_stride,
                              const float* k, const float* v, int64_t kv_stride,
                              const int32_t* key_begin, const int32_t* key_end,
                              const RangeAttentionShape& s);

// Folds a partial result over another key block (out_part, lse_part) into an accumulated one
// (out_acc, lse_acc), in place, by the log-sum-exp rule: with m = max(lse_acc, lse_part),
// w_a = exp(lse_acc - m), w_p = exp(lse_part - m): out_acc = (w_a out_acc + w_p out_part) /
// (w_a + w_p), lse_acc = m + log(w_a + w_p). A side with lse = -infinity (no key seen) has weight
// 0; both -infinity leave out_acc and lse_acc as they are (0 and -infinity from the forward).
// Merging the blocks in any order gives the single-call result up to rounding.
// out_* [b*tq, nh*hd], lse_* [b, nh, tq].
void attention_ranges_merge(float* out_acc, float* lse_acc, const float* out_part,
                            const float* lse_part, int64_t b, int64_t tq, int64_t nh, int64_t hd);

// Floats of scratch attention_ranges_backward needs: per-thread tiles only, independent of tq and
// tk. `threads`: the OpenMP threads it will run on (0: omp_get_max_threads()).
int64_t attention_ranges_backward_scratch(int64_t hd, int threads = 0);

// ACCUMULATES dq += dL/dq, dk += dL/dk, dv += dL/dv for this key block (dq rows strided like q:
// q_stride; dk, dv like k, v: kv_stride), from dout[b*tq, nh*hd] and the FINAL out and lse (after
// every key block has been merged in): P = exp(S / sqrt(hd) - lse) is then this block's share of
// the full softmax and D_i = dout_i . out_i the full row term, so the per-block gradients sum to
// the gradient of the whole attention. A ring calls this once per key block, adding into the
// same dq and into each block's dk, dv. Zero the gradients first for a single block.
// Two passes, no float atomics: dk, dv by (item, kv head, key tile), the query heads of the group
// and the query tiles in a fixed order; dq by (item, head, query tile), the key tiles in order.
void attention_ranges_backward(float* dq, float* dk, float* dv, float* scratch, const float* dout,
                               const float* q, int64_t q_stride, const float* k, const float* v,
                               int64_t kv_stride, const float* out, const float* lse,
                               const int32_t* key_begin, const int32_t* key_end,
                               const RangeAttentionShape& s);

}  // namespace strata::kernels
