// CUDA kernels: the device twins of kernels/cpu/kernels.h, with the same names, layouts and
// semantics (read the conventions there: parameter gradients accumulate, activation gradients are
// overwritten unless a comment says "accumulates"). Every pointer is device memory; every
// function enqueues its work on `stream` (the last argument) and returns without waiting.
// Differences from the CPU side, all for the same reason (a kernel cannot return a value or throw
// without a synchronisation):
//   * reductions that return a number on the CPU (cross-entropy's total, sum_squares) write it to
//     device memory instead;
//   * argument errors the host can see (shapes) throw strata::Error at the call; data errors the
//     host cannot see without a copy (a target >= v) turn into NaN losses.
// Determinism: no float atomics; every sum has a fixed order that depends on the shapes only, so
// a run repeats bit for bit on the same GPU model. Accumulation is in f32 (double where the CPU
// uses double). bf16 values are raw uint16_t bit patterns, as on the CPU, so host code needs no
// cuda_bf16.h.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/rope_spec.h"
#include "kernels/shapes.h"

namespace strata::cuda {

// ---- LayerNorm (biased variance, eps inside the sqrt) ----------------------------------------
// y = (x - mean) * rstd * w + bias; saves mean[n] and rstd[n] for backward.
void layernorm_forward(float* y, float* mean, float* rstd, const float* x, const float* w,
                       const float* bias, int64_t n, int64_t c, float eps, cudaStream_t stream);
// Floats of scratch layernorm_backward needs: per-chunk-of-rows partial sums of dw and dbias,
// added in chunk order afterwards (deterministic without atomics).
int64_t layernorm_backward_scratch_floats(int64_t n, int64_t c);
// dx ACCUMULATES (+=); dw += ; dbias += . scratch: layernorm_backward_scratch_floats(n, c).
void layernorm_backward(float* dx, float* dw, float* dbias, float* scratch, const float* dy,
                        const float* x, const float* w, const float* mean, const float* rstd,
                        int64_t n, int64_t c, cudaStream_t stream);

// ---- RMSNorm: y = x * rstd * w, rstd = 1/sqrt(mean(x^2) + eps) --------------------------------
void rmsnorm_forward(float* y, float* rstd, const float* x, const float* w, int64_t n, int64_t c,
                     float eps, cudaStream_t stream);
int64_t rmsnorm_backward_scratch_floats(int64_t n, int64_t c);
// dx ACCUMULATES (+=); dw += . scratch: rmsnorm_backward_scratch_floats(n, c).
void rmsnorm_backward(float* dx, float* dw, float* scratch, const float* dy, const float* x,
                      const float* w, const float* rstd, int64_t n, int64_t c, cudaStream_t stream);

// ---- GELU, tanh approximation (GPT-2's) --------------------------------------------------------
void gelu_forward(float* y, const float* x, int64_t count, cudaStream_t stream);
// The same values rounded to bf16 (round to nearest even).
void gelu_forward_bf16(uint16_t* y, const float* x, int64_t count, cudaStream_t stream);
// dx = dy * gelu'(x); dx may alias dy.
void gelu_backward(float* dx, const float* x, const float* dy, int64_t count, cudaStream_t stream);

// ---- SwiGLU: gate_up[n, 2f], gate in columns [0,f), up in [f,2f); y[n,f] = silu(gate) * up ----
void swiglu_forward(float* y, const float* gate_up, int64_t n, int64_t f, cudaStream_t stream);
// dgate_up[n,2f] (overwritten) from dy[n,f].
void swiglu_backward(float* dgate_up, const float* gate_up, const float* dy, int64_t n, int64_t f,
                     cudaStream_t stream);

// ---- RoPE (Hugging Face Llama rotate_half) on qkv[b*t, (nh + 2*nkv)*hd], in place -------------
// Rotates the q and k heads; the position of row r is positions[r] (device int32 per row: context
// parallelism's global positions, document masking's restarts), or r % t when positions is null;
// inv_freq[i] = rope_inv_freq(rope, i, hd) (kernels/rope_spec.h).
void rope_forward(float* qkv, const AttentionShape& s, const RopeSpec& rope,
                  const int32_t* positions, cudaStream_t stream);
// The rotation by -angle, in place on dqkv.
void rope_backward(float* dqkv, const AttentionShape& s, const RopeSpec& rope,
                   const int32_t* positions, cudaStream_t stream);

// ---- Per-head RMSNorm of q and k (Qwen3), in place on qkv; as kernels/cpu/kernels.h -----------
void head_rmsnorm_forward(float* qkv, float* pre, float* rstd, const float* wq, const float* wk,
                          const AttentionShape& s, float eps, cudaStream_t stream);
int64_t head_rmsnorm_backward_scratch_floats(const AttentionShape& s);
// In place on dqkv's q and k parts; dwq += , dwk += . scratch: the floats above.
void head_rmsnorm_backward(float* dqkv, float* dwq, float* dwk, float* scratch, const float* pre,
                           const float* rstd, const float* wq, const float* wk,
                           const AttentionShape& s, cudaStream_t stream);

// ---- Embedding: out[b,t,:] = wte[tokens[b,t],:] (+ wpe[t,:] when wpe is not null) -----------
void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                       int64_t b, int64_t t, int64_t c, cudaStream_t stream);
// dwte[tok,:] += dout[b,t,:]; dwpe[t,:] += sum_b dout[b,t,:] (dwpe may be null). Every element's
// additions happen in token order, as on the CPU, so the result equals the CPU's bit for bit.
void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                        int64_t b, int64_t t, int64_t c, cudaStream_t stream);

// ---- Fused softmax + cross-entropy over the vocabulary ---------------------------------------
// losses[i] = -log softmax(logits[i])[targets[i]]; rows whose target is < 0 are ignored (loss 0,
// gradient 0); a target >= v gives a NaN loss (the host cannot check targets without a copy).
// No total is returned: the caller reduces losses[n] with sum_losses (on the device) or on the
// host after copying them back.
void cross_entropy_forward(float* losses, const float* logits, const int32_t* targets, int64_t n,
                           int64_t v, cudaStream_t stream);
// Same, and overwrites logits in place with dlogits = (softmax - onehot) * grad_scale.
void cross_entropy_forward_backward(float* losses, float* logits, const int32_t* targets, int64_t n,
                                    int64_t v, float grad_scale, cudaStream_t stream);
// *total (one double, device memory, overwritten) = the sum of losses[i] over rows with
// targets[i] >= 0: the CPU kernels' return value.
void sum_losses(double* total, const float* losses, const int32_t* targets, int64_t n,
                cudaStream_t stream);
// The same loss, with the gradient written as bf16 (round to nearest even) over the logits' own
// storage: reinterpret_cast<uint16_t*>(logits)[i * v + j] is dL/dlogit(i, j) (the CPU's
// cross_entropy_forward_backward_bf16). Row i's bf16 row overwrites f32 rows i / 2 (and, for
// i = 0, its own first half), so the rows run in launches of doubling blocks {0}, {1}, {2, 3},
// {4..7}, ...: every row a block overwrites was finished by an earlier launch (log2(n) + 1
// launches). Row 0, which overwrites itself, writes in chunks behind a barrier.
void cross_entropy_forward_backward_bf16(float* losses, float* logits, const int32_t* targets,
                                         int64_t n, int64_t v, float grad_scale,
                                         cudaStream_t stream);

// ---- Tensor-parallel pieces (vocab_parallel.cu; kernels/cpu/kernels.h has the contracts) -------
// out[n, c] = wte_rows[tokens[i] - vocab_begin] for tokens in range, 0 for the others.
void embedding_range_forward(float* out, const int32_t* tokens, const float* wte_rows,
                             int64_t vocab_begin, int64_t vocab_count, int64_t n, int64_t c,
                             cudaStream_t stream);
// dwte_rows[tok - vocab_begin] += dout[i] for tokens in range, every element's additions in token
// order (the CPU's, so the result is the CPU's bit for bit; no atomics).
void embedding_range_backward(float* dwte_rows, const float* dout, const int32_t* tokens,
                              int64_t vocab_begin, int64_t vocab_count, int64_t n, int64_t c,
                              cudaStream_t stream);
// out[i] += wpe[pos(i)]; backward dwpe[pos(i)] += dout[i] in row order (bit for bit the CPU's),
// pos(i) = positions[first_row + i] (device int32 per row) or (first_row + i) % t when null.
void positions_add_forward(float* out, const float* wpe, int64_t first_row, int64_t n, int64_t t,
                           int64_t c, const int32_t* positions, cudaStream_t stream);
void positions_add_backward(float* dwpe, const float* dout, int64_t first_row, int64_t n, int64_t t,
                            int64_t c, const int32_t* positions, cudaStream_t stream);
// Vocabulary-parallel cross-entropy, the three local steps (the caller reduces over the ranks in
// between): row_max = local max; sum_exp = sum exp(x - row_max) (double exps and sum, as the CPU)
// and target_logit (0 when the target is not local); finish writes losses (0 for target < 0)
// and, with `backward`, the gradient over the logits. No total: sum_losses gives it.
void vocab_parallel_ce_max(float* row_max, const float* logits, int64_t n, int64_t v_local,
                           cudaStream_t stream);
void vocab_parallel_ce_sums(float* sum_exp, float* target_logit, const float* logits,
                            const float* row_max, const int32_t* targets, int64_t n,
                            int64_t v_local, int64_t vocab_begin, cudaStream_t stream);
void vocab_parallel_ce_finish(float* losses, float* logits, const float* row_max,
                              const float* sum_exp, const float* target_logit,
                              const int32_t* targets, int64_t n, int64_t v_local,
                              int64_t vocab_begin, bool backward, float grad_scale,
                              cudaStream_t stream);

// ---- Element-wise -------------------------------------------------------------------------------
// y[i,:] += bias
void add_bias(float* y, const float* bias, int64_t n, int64_t c, cudaStream_t stream);
// out = a + b; out may alias a or b
void add(float* out, const float* a, const float* b, int64_t count, cudaStream_t stream);
void add_inplace(float* y, const float* x, int64_t count, cudaStream_t stream);  // y += x
void scale_inplace(float* y, float s, int64_t count, cudaStream_t stream);       // y *= s
void fill(float* y, float value, int64_t count, cudaStream_t stream);            // y = value
// c[i * ldc + j] *= beta for i < m, j < n (beta = 0 writes zeros without reading): a GEMM with
// k = 0, which cuBLASLt does not take.
void scale_matrix(float* c, int64_t ldc, int64_t m, int64_t n, float beta, cudaStream_t stream);

// ---- bf16 storage (round to nearest even; bit-identical to core/dtype.h, NaN included) ---------
void to_bf16(uint16_t* out, const float* in, int64_t count, cudaStream_t stream);
void from_bf16(float* out, const uint16_t* in, int64_t count, cudaStream_t stream);
// ---- f16 storage (IEEE binary16, round to nearest even, overflow to inf; bit-identical to the
// CPU's to_lowp / from_lowp, NaN included: quiet, payload truncated / widened)
// -----------------------
void to_f16(uint16_t* out, const float* in, int64_t count, cudaStream_t stream);
void from_f16(float* out, const uint16_t* in, int64_t count, cudaStream_t stream);

// ---- Optimizer ---------------------------------------------------------------------------------
// PyTorch's AdamW, step >= 1: g' = g * grad_scale; p *= 1 - lr*wd; m = b1 m + (1-b1) g';
// v = b2 v + (1-b2) g'^2; p -= (lr / (1 - b1^step)) * m / (sqrt(v) / sqrt(1 - b2^step) + eps).
// The bias corrections are formed on the host in double, as on the CPU. With p_bf16 (may be
// null), the updated parameters are also written rounded to bf16 (bit-identical to to_bf16).
void adamw_update(float* p, const float* g, float* m, float* v, int64_t count, float lr,
                  float beta1, float beta2, float eps, float weight_decay, float grad_scale,
                  int64_t step, uint16_t* p_bf16, cudaStream_t stream);
// Doubles of scratch sum_squares needs (a constant).
int64_t sum_squares_scratch_doubles();
// *out (one double, device memory, overwritten) = sum of x[i]^2, in double: a fixed grid of
// blocks writes one partial each into scratch, and one block adds the partials in a fixed order,
// so the result does not depend on scheduling. For the global gradient norm.
void sum_squares(double* out, double* scratch, const float* x, int64_t count, cudaStream_t stream);

}  // namespace strata::cuda
