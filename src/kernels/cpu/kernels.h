// CPU kernels: pure functions over raw pointers and shapes, no knowledge of models or ranks.
// All buffers are row-major and contiguous unless a leading dimension says otherwise.
// Conventions used by every kernel below:
//   * "n" is the number of rows (tokens, B*T), "c" the channels of a row.
//   * Gradients of parameters (dw, db) are ACCUMULATED (+=), so micro-batches add up.
//   * Gradients of activations are OVERWRITTEN (=) unless the comment says "accumulates".
//   * Each kernel is parallelised with OpenMP over rows (or another deterministic split):
//     results do not depend on the thread count beyond floating-point reassociation inside
//     one row, and never on scheduling (no atomics on floats).
// Each kernel has a naive reference in kernels/cpu/reference.h and a test against it.
#pragma once
#include <cstdint>
#include <string>

#include "core/dtype.h"
#include "kernels/rope_spec.h"
#include "kernels/shapes.h"

namespace strata::kernels {

// ---- GEMM -----------------------------------------------------------------------------------
// C[M,N] = alpha * op(A)[M,K] * op(B)[K,N] + beta * C, row-major; op(X) = X or X^T.
// lda/ldb/ldc are row strides of A, B, C as stored.
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);
// Which library gemm uses ("onednn" or "openblas"): chosen at run time per CPU by the rule in
// gemm.cc (measured, docs/PERFORMANCE.md), or forced with STRATA_GEMM=onednn|openblas (an
// unknown name, or OpenBLAS where it cannot be used, throws strata::Error). bf16 products at the
// avx512bf16 level always run oneDNN's bf16 matmul.
std::string gemm_backend();
// The same with where the choice came from: "openblas (auto: AMD CPU without AVX-512, core zen)".
std::string describe_gemm_backend();

// ---- Low precision: bf16 / f16 storage (uint16_t), f32 accumulation (lowp.cc) ----------------
// Round-to-nearest-even conversions, bit-identical to core/dtype.h's scalar ones (NaN stays NaN,
// f16 overflows to inf), vectorised. `t` is DType::bf16 or DType::f16.
void to_lowp(DType t, uint16_t* out, const float* in, int64_t count);
void from_lowp(DType t, float* out, const uint16_t* in, int64_t count);
// C[M,N] = alpha * op(A) * op(B) + beta * C with A and B in bf16 and C (and the accumulation)
// in f32: oneDNN's bf16 matmul (avx512_core_bf16: about twice the f32 rate on a Zen 4). Only for
// the avx512bf16 level (isa.h): elsewhere oneDNN runs it as a reference loop, and linear layers
// widen instead (lowp_widens).
void gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
               const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, float beta, float* c,
               int64_t ldc);
// Linear layers on low-precision inputs: y[n,out] (f32) = x * w^T + bias. bf16 runs gemm_bf16
// where the CPU multiplies bf16 (isa::native_bf16); otherwise, and for f16 always, the operands
// are widened into f32_scratch (lowp_f32_scratch elements; may be null when lowp_widens(t) is
// false) and the f32 GEMM runs: the 16-bit numerics (values rounded to bf16/f16, f16 overflow to
// inf) at f32 speed.
void linear_forward_lowp(DType t, float* y, const uint16_t* x, const uint16_t* w, const float* bias,
                         int64_t n, int64_t in, int64_t out, float* f32_scratch);
// dx[n,in] (f32, overwritten, may be null) = dy * w; dw[out,in] (f32, may be null) += dy^T * x;
// dbias += column sums of dy. dy (f32) is rounded to t in blocks of rows that fit dy_lowp
// (capacity elements, at least `out`), so the output gradient never exists whole in t.
void linear_backward_lowp(DType t, float* dx, float* dw, float* dbias, const float* dy,
                          uint16_t* dy_lowp, int64_t capacity, const uint16_t* x, const uint16_t* w,
                          int64_t n, int64_t in, int64_t out, float* f32_scratch);
// Whether linear layers on t widen their operands to f32 at the active kernel level (and so need
// f32_scratch): f16 always, bf16 below avx512bf16.
bool lowp_widens(DType t);
// f32 scratch the widening path of the two functions above needs for shapes up to (n, in, out) with
// a dy_lowp of `capacity` elements.
int64_t lowp_f32_scratch(int64_t n, int64_t in, int64_t out, int64_t capacity);

// ---- Linear: y[n,out] = x[n,in] * w[out,in]^T + bias[out] (bias may be null) -----------------
void linear_forward(float* y, const float* x, const float* w, const float* bias, int64_t n,
                    int64_t in, int64_t out);
// dx[n,in] = dy * w (overwritten; dx may be null to skip); dw[out,in] += dy^T * x;
// dbias[out] += sum over rows of dy (dbias may be null).
void linear_backward(float* dx, float* dw, float* dbias, const float* dy, const float* x,
                     const float* w, int64_t n, int64_t in, int64_t out);

// ---- Embedding: out[b,t,:] = wte[tokens[b,t],:] (+ wpe[t,:] when wpe is not null) -----------
void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                       int64_t b, int64_t t, int64_t c);
// dwte[tok,:] += dout[b,t,:]; dwpe[t,:] += sum_b dout[b,t,:] (dwpe may be null).
// Deterministic: parallel over channel slices, not over tokens.
void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                        int64_t b, int64_t t, int64_t c);

// ---- LayerNorm (biased variance, eps inside the sqrt) ----------------------------------------
// y = (x - mean) * rstd * w + bias; saves mean[n] and rstd[n] for backward.
void layernorm_forward(float* y, float* mean, float* rstd, const float* x, const float* w,
                       const float* bias, int64_t n, int64_t c, float eps);
// dx ACCUMULATES (+=, it is the residual stream's gradient); dw += ; dbias += .
void layernorm_backward(float* dx, float* dw, float* dbias, const float* dy, const float* x,
                        const float* w, const float* mean, const float* rstd, int64_t n, int64_t c);

// ---- RMSNorm: y = x * rstd * w, rstd = 1/sqrt(mean(x^2) + eps) --------------------------------
void rmsnorm_forward(float* y, float* rstd, const float* x, const float* w, int64_t n, int64_t c,
                     float eps);
// dx ACCUMULATES (+=); dw += .
void rmsnorm_backward(float* dx, float* dw, const float* dy, const float* x, const float* w,
                      const float* rstd, int64_t n, int64_t c);

// ---- GELU, tanh approximation (GPT-2's) --------------------------------------------------------
void gelu_forward(float* y, const float* x, int64_t count);
// The same values rounded to bf16 (round to nearest even): the next GEMM's input, written once.
void gelu_forward_bf16(uint16_t* y, const float* x, int64_t count);
// dx = dy * gelu'(x); dx may alias dy.
void gelu_backward(float* dx, const float* x, const float* dy, int64_t count);

// ---- SwiGLU: gate_up[n, 2f] holds gate in columns [0,f) and up in [f,2f) ----------------------
// y[n,f] = silu(gate) * up, silu(g) = g * sigmoid(g).
void swiglu_forward(float* y, const float* gate_up, int64_t n, int64_t f);
// dgate_up[n,2f] (overwritten) from dy[n,f].
void swiglu_backward(float* dgate_up, const float* gate_up, const float* dy, int64_t n, int64_t f);

// ---- RoPE (Hugging Face Llama convention: rotate_half, pairs (i, i + hd/2)) --------------------
// qkv[b*t, (nh + 2*nkv)*hd]: q heads first, then k heads, then v heads. Rotates q and k in place,
// position of row (b, t) is t, or positions[b * t + t] when given (context parallelism's global
// positions, document masking's restarts). inv_freq[i] = rope_inv_freq(rope, i, hd), i < hd/2.
void rope_forward(float* qkv, const AttentionShape& s, const RopeSpec& rope,
                  const int32_t* positions = nullptr);
// The same rotation by -angle, applied in place to the gradient dqkv (q and k parts).
void rope_backward(float* dqkv, const AttentionShape& s, const RopeSpec& rope,
                   const int32_t* positions = nullptr);

// ---- Per-head RMSNorm of q and k (Qwen3), in place on qkv as in RoPE -------------------------
// Every q head (hd values) becomes x * rstd * wq, every k head x * rstd * wk, rstd = 1 /
// sqrt(mean(x^2) + eps); v is left alone. Keeps the inputs in pre[b*t, (nh + nkv) * hd] (each
// row's q heads, then its k heads) and rstd[b*t * (nh + nkv)] for backward.
void head_rmsnorm_forward(float* qkv, float* pre, float* rstd, const float* wq, const float* wk,
                          const AttentionShape& s, float eps);
// In place on dqkv's q and k parts: dL/d(normalised) in, dL/d(pre) out; dwq += , dwk += .
void head_rmsnorm_backward(float* dqkv, float* dwq, float* dwk, const float* pre, const float* rstd,
                           const float* wq, const float* wk, const AttentionShape& s);

// ---- Causal self-attention (naive: materialises probabilities) --------------------------------
// qkv as in RoPE. Query head h reads kv head h / (nh / nkv) (grouped-query attention).
// out[b*t, nh*hd] = softmax(q k^T / sqrt(hd), causal) v; probs[b, nh, t, t] saved for backward
// (entries above the diagonal are zero).
void attention_forward(float* out, float* probs, const float* qkv, int64_t b, int64_t t, int64_t nh,
                       int64_t nkv, int64_t hd);
// Floats of scratch that attention_backward needs (it may use it per thread); `threads`: the
// OpenMP threads it will run on (0: omp_get_max_threads()).
int64_t attention_backward_scratch(int64_t b, int64_t t, int64_t nh, int64_t nkv, int64_t hd,
                                   int threads = 0);
// dqkv[b*t, (nh+2nkv)*hd] overwritten (q, k and v parts) from dout[b*t, nh*hd].
void attention_backward(float* dqkv, float* scratch, const float* dout, const float* qkv,
                        const float* probs, int64_t b, int64_t t, int64_t nh, int64_t nkv,
                        int64_t hd);

// ---- Fused softmax + cross-entropy over the vocabulary ---------------------------------------
// losses[i] = -log softmax(logits[i])[targets[i]]; rows whose target is < 0 are ignored (loss 0,
// gradient 0). Returns the sum of the losses of valid rows (in double).
double cross_entropy_forward(float* losses, const float* logits, const int32_t* targets, int64_t n,
                             int64_t v);
// Same, and overwrites logits in place with dlogits = (softmax - onehot) * grad_scale.
double cross_entropy_forward_backward(float* losses, float* logits, const int32_t* targets,
                                      int64_t n, int64_t v, float grad_scale);
// The same loss, with the gradient written as bf16 (round to nearest even) over the logits'
// storage: reinterpret_cast<uint16_t*>(logits)[i * v + j] is dL/dlogit(i, j). For a bf16 head
// whose backward GEMMs read bf16 anyway.
double cross_entropy_forward_backward_bf16(float* losses, float* logits, const int32_t* targets,
                                           int64_t n, int64_t v, float grad_scale);

// ---- Tensor-parallel pieces (vocab_parallel.cc) -------------------------------------------------
// A rank holds vocabulary rows [vocab_begin, vocab_begin + vocab_count) of the embedding (and of a
// tied or vocab-parallel head). Composed over the ranks, these equal the whole-vocabulary kernels.
// out[n, c] = wte_rows[tokens[i] - vocab_begin] for tokens in range, 0 for the others.
void embedding_range_forward(float* out, const int32_t* tokens, const float* wte_rows,
                             int64_t vocab_begin, int64_t vocab_count, int64_t n, int64_t c);
// dwte_rows[tok - vocab_begin] += dout[i] for tokens in range (deterministic: channel slices).
void embedding_range_backward(float* dwte_rows, const float* dout, const int32_t* tokens,
                              int64_t vocab_begin, int64_t vocab_count, int64_t n, int64_t c);
// Learned positions for rows [first_row, first_row + n) of a micro-batch of sequences of length t:
// out[i] += wpe[(first_row + i) % t]; backward dwpe[(first_row + i) % t] += dout[i]. With
// `positions` (one per row of the micro-batch), row i's position is positions[first_row + i].
void positions_add_forward(float* out, const float* wpe, int64_t first_row, int64_t n, int64_t t,
                           int64_t c, const int32_t* positions = nullptr);
void positions_add_backward(float* dwpe, const float* dout, int64_t first_row, int64_t n, int64_t t,
                            int64_t c, const int32_t* positions = nullptr);
// Vocabulary-parallel softmax cross-entropy (Megatron-LM's): each rank holds logits[n, v_local]
// of its vocabulary block; the full logits are never gathered. Between the steps the caller
// reduces over the ranks: row_max by max, then sum_exp and target_logit by sum.
//   1. vocab_parallel_ce_max: row_max[i] = max_j logits[i, j] (local)
//   2. vocab_parallel_ce_sums: sum_exp[i] = sum_j exp(logits[i, j] - row_max[i]) (global max),
//      target_logit[i] = logits[i, targets[i] - vocab_begin] when the target is local, else 0
//   3. vocab_parallel_ce_finish: losses[i] = log(sum_exp) + row_max - target_logit (0 for rows
//      with target < 0); with `backward`, logits become dlogits = (softmax - onehot) * grad_scale.
//      Returns the sum of the valid rows' losses in row order.
void vocab_parallel_ce_max(float* row_max, const float* logits, int64_t n, int64_t v_local);
void vocab_parallel_ce_sums(float* sum_exp, float* target_logit, const float* logits,
                            const float* row_max, const int32_t* targets, int64_t n,
                            int64_t v_local, int64_t vocab_begin);
double vocab_parallel_ce_finish(float* losses, float* logits, const float* row_max,
                                const float* sum_exp, const float* target_logit,
                                const int32_t* targets, int64_t n, int64_t v_local,
                                int64_t vocab_begin, bool backward, float grad_scale);

// ---- Element-wise -------------------------------------------------------------------------------
void add_bias(float* y, const float* bias, int64_t n, int64_t c);     // y[i, :] += bias
void add(float* out, const float* a, const float* b, int64_t count);  // out = a + b
void add_inplace(float* y, const float* x, int64_t count);            // y += x
void scale_inplace(float* y, float s, int64_t count);                 // y *= s
// dbias[out] += column sums of dy[n, out], rows summed in order (any thread count, any level).
void column_sum_accumulate(float* dbias, const float* dy, int64_t n, int64_t out);

// ---- Optimizer ---------------------------------------------------------------------------------
// PyTorch's AdamW, step >= 1: g' = g * grad_scale; p *= 1 - lr*wd; m = b1 m + (1-b1) g';
// v = b2 v + (1-b2) g'^2; p -= (lr / (1 - b1^step)) * m / (sqrt(v) / sqrt(1 - b2^step) + eps).
// With p_bf16, the updated parameters are also written rounded to bf16 (bit-identical to
// to_lowp): the working copy of mixed precision refreshed in the same pass over memory.
void adamw_update(float* p, const float* g, float* m, float* v, int64_t count, float lr,
                  float beta1, float beta2, float eps, float weight_decay, float grad_scale,
                  int64_t step, uint16_t* p_bf16 = nullptr);
// Sum of squares in double (for the global gradient norm).
double sum_squares(const float* x, int64_t count);

}  // namespace strata::kernels
