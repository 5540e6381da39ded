// CPU kernels of a Mixture-of-Experts FFN (GitHub issue 21): routing, balancing losses, the
// dispatch plan, permutation of token rows into expert-sorted order, the experts' grouped GEMM
// and the weighted combine. Same conventions as kernels.h:
//   * "n" is the number of tokens, "e" the number of experts, "k" the experts per token (top-k),
//     "c" the model width; all buffers row-major and contiguous, f32 unless typed otherwise.
//   * Parameter gradients ACCUMULATE (+=); activation gradients are OVERWRITTEN (=), except the
//     balancing losses' backwards, which add into dlogits (it already holds the routing gradient).
//   * OpenMP over tokens, rows or experts; results never depend on scheduling (no float atomics)
//     and reductions over tokens run in fixed blocks, so not on the thread count either.
// The flat int arrays of one forward (llm.c style), rows = offsets[e] <= n*k:
//   expert_idx[n,k]   int32  experts of token t in slots s = 0..k-1, by descending score
//   offsets[e+1]      int64  rows of expert x are [offsets[x], offsets[x+1]) of the sorted order
//   row_token[rows]   int32  token of each row; rows of an expert in increasing token order
//   row_slot[rows]    int32  slot of each row (token_row[row_token[r]*k + row_slot[r]] == r)
//   token_row[n,k]    int32  row of (token, slot), -1 when capacity dropped it
// Each kernel has a naive reference in kernels/cpu/moe_reference.h and tests against it
// (tests/kernels/test_moe.cc).
#pragma once
#include <cstdint>

namespace strata::kernels {

enum class MoeGating {
  softmax_topk,  // Mixtral, Qwen3-MoE: probs = softmax(logits), top-k of probs
  sigmoid_bias,  // DeepSeek-V3: probs = sigmoid(logits), top-k of probs + bias (choice only)
};

// ---- Routing ------------------------------------------------------------------------------------
// logits[n,e] -> probs[n,e] (softmax or sigmoid of each row), expert_idx[n,k] (the k largest
// scores: probs, plus bias[e] for sigmoid_bias, where bias may be null; ties to the lower expert;
// slots by descending score, as torch.topk(sorted=True)) and weight[n,k] = the chosen probs,
// divided by their sum when `normalize` (Mixtral; Qwen3-MoE's norm_topk_prob; DeepSeek-V3), then
// times `scale` (DeepSeek's routed_scaling_factor; 1 otherwise). Requires 1 <= k <= e.
void moe_route_forward(MoeGating gating, int32_t* expert_idx, float* weight, float* probs,
                       const float* logits, const float* bias, int64_t n, int64_t e, int64_t k,
                       bool normalize, float scale);
// dlogits[n,e] (overwritten) from dweight[n,k], through the chosen probs only (the choice is
// piecewise constant). Needs the forward's probs and expert_idx, same normalize and scale.
void moe_route_backward(MoeGating gating, float* dlogits, const float* dweight, const float* probs,
                        const int32_t* expert_idx, int64_t n, int64_t e, int64_t k, bool normalize,
                        float scale);

// ---- Balancing losses (each backward ACCUMULATES into dlogits) ----------------------------------
// Switch/GShard auxiliary loss: coeff * e * sum_x f_x P_x with f_x = tokens_per_expert[x] / (n*k)
// (the routing's choices before capacity drops, a constant: no gradient) and P_x the mean over
// tokens of the token's probability of x. For sigmoid_bias the probs are first normalised per
// token to sum to 1 (DeepSeek-V3's sequence-wise balance loss; call it once per sequence for
// exactly that, n = the sequence's tokens). Returns the loss; for the gradient of a scaled loss
// pass coeff times the scale to the backward.
double moe_aux_loss_forward(MoeGating gating, const float* probs, const int64_t* tokens_per_expert,
                            int64_t n, int64_t e, int64_t k, float coeff);
void moe_aux_loss_backward(MoeGating gating, float* dlogits, const float* probs,
                           const int64_t* tokens_per_expert, int64_t n, int64_t e, int64_t k,
                           float coeff);
// Router z-loss (ST-MoE): coeff * mean over tokens of logsumexp(logits row)^2. Backward reads the
// logits again (it recomputes logsumexp and softmax).
double moe_z_loss_forward(const float* logits, int64_t n, int64_t e, float coeff);
void moe_z_loss_backward(float* dlogits, const float* logits, int64_t n, int64_t e, float coeff);
// DeepSeek-V3's auxiliary-loss-free balancing, after each step: bias[x] += rate * sign(mean load -
// tokens_per_expert[x]) (0 for an expert at exactly the mean). Not a gradient step.
void moe_update_bias(float* bias, const int64_t* tokens_per_expert, int64_t e, float rate);

// ---- Dispatch plan ------------------------------------------------------------------------------
// A stable counting sort of the n*k (token, slot) assignments by expert (layouts in the header
// comment). capacity > 0 keeps the first `capacity` tokens (by token index) of each expert and
// drops the rest (token_row -1: they add nothing to the combine); capacity <= 0 is dropless.
// tokens_per_expert[e] counts the assignments before dropping (the aux loss's f, the bias
// update's load). row_slot may be null. Returns the number of dropped assignments. Throws
// strata::Error on an expert index outside [0, e).
int64_t moe_dispatch_plan(int64_t* offsets, int32_t* row_token, int32_t* row_slot,
                          int32_t* token_row, int64_t* tokens_per_expert, const int32_t* expert_idx,
                          int64_t n, int64_t e, int64_t k, int64_t capacity);

// ---- Permutation: token rows <-> expert-sorted rows ---------------------------------------------
// xs[r,c] = x[row_token[r],c] for r < rows (a gather).
void moe_permute_forward(float* xs, const float* x, const int32_t* row_token, int64_t rows,
                         int64_t c);
// dx[t,c] (overwritten) = sum over t's kept slots, in slot order, of dxs[token_row[t*k+s],c]; 0 for
// a token whose every slot was dropped.
void moe_permute_backward(float* dx, const float* dxs, const int32_t* token_row, int64_t n,
                          int64_t k, int64_t c);

// ---- Experts' linear layers: one GEMM per expert with rows ------------------------------------
// w[e,out,in] (each expert an nn.Linear without bias); for every expert x,
// ys[rows of x, out] = xs[rows of x, in] * w[x]^T.
void moe_grouped_linear_forward(float* ys, const float* xs, const float* w, const int64_t* offsets,
                                int64_t e, int64_t in, int64_t out);
// dxs[rows,in] = dys * w[x] per expert (overwritten; may be null to skip); dw[x] += dys^T xs (may
// be null). An expert without rows leaves dw[x] as it was.
void moe_grouped_linear_backward(float* dxs, float* dw, const float* dys, const float* xs,
                                 const float* w, const int64_t* offsets, int64_t e, int64_t in,
                                 int64_t out);

// ---- Combine: expert rows back to tokens, weighted --------------------------------------------
// y[t,c] (overwritten) = sum over t's kept slots s, in slot order, of
// weight[t,s] * ys[token_row[t*k + s],c]; 0 for a token whose every slot was dropped.
void moe_combine_forward(float* y, const float* ys, const float* weight, const int32_t* token_row,
                         int64_t n, int64_t k, int64_t c);
// dys[rows,c] = weight * dy[token] (overwritten, every row); dweight[n,k] = dot(dy[t], ys[row])
// (overwritten; 0 for a dropped slot).
void moe_combine_backward(float* dys, float* dweight, const float* dy, const float* ys,
                          const float* weight, const int32_t* token_row, int64_t n, int64_t k,
                          int64_t c);

}  // namespace strata::kernels
