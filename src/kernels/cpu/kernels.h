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

namespace strata::kernels {

// ---- GEMM -----------------------------------------------------------------------------------
// C[M,N] = alpha * op(A)[M,K] * op(B)[K,N] + beta * C, row-major; op(X) = X or X^T.
// lda/ldb/ldc are row strides of A, B, C as stored.
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);
// Which backend gemm uses ("onednn" or "openblas"), chosen at build time by measurement.
std::string gemm_backend();

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
// dx = dy * gelu'(x); dx may alias dy.
void gelu_backward(float* dx, const float* x, const float* dy, int64_t count);

// ---- SwiGLU: gate_up[n, 2f] holds gate in columns [0,f) and up in [f,2f) ----------------------
// y[n,f] = silu(gate) * up, silu(g) = g * sigmoid(g).
void swiglu_forward(float* y, const float* gate_up, int64_t n, int64_t f);
// dgate_up[n,2f] (overwritten) from dy[n,f].
void swiglu_backward(float* dgate_up, const float* gate_up, const float* dy, int64_t n, int64_t f);

// ---- RoPE (Hugging Face Llama convention: rotate_half, pairs (i, i + hd/2)) --------------------
// qkv[b*t, (nh + 2*nkv)*hd]: q heads first, then k heads, then v heads. Rotates q and k in place,
// position of row (b, t) is t. inv_freq[i] = theta^(-2i/hd) for i < hd/2.
void rope_forward(float* qkv, int64_t b, int64_t t, int64_t nh, int64_t nkv, int64_t hd,
                  float theta);
// The same rotation by -angle, applied in place to the gradient dqkv (q and k parts).
void rope_backward(float* dqkv, int64_t b, int64_t t, int64_t nh, int64_t nkv, int64_t hd,
                   float theta);

// ---- Causal self-attention (naive: materialises probabilities) --------------------------------
// qkv as in RoPE. Query head h reads kv head h / (nh / nkv) (grouped-query attention).
// out[b*t, nh*hd] = softmax(q k^T / sqrt(hd), causal) v; probs[b, nh, t, t] saved for backward
// (entries above the diagonal are zero).
void attention_forward(float* out, float* probs, const float* qkv, int64_t b, int64_t t, int64_t nh,
                       int64_t nkv, int64_t hd);
// Floats of scratch that attention_backward needs (it may use it per thread).
int64_t attention_backward_scratch(int64_t b, int64_t t, int64_t nh, int64_t nkv, int64_t hd);
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

// ---- Element-wise -------------------------------------------------------------------------------
void add(float* out, const float* a, const float* b, int64_t count);  // out = a + b
void add_inplace(float* y, const float* x, int64_t count);            // y += x
void scale_inplace(float* y, float s, int64_t count);                 // y *= s

// ---- Optimizer ---------------------------------------------------------------------------------
// PyTorch's AdamW, step >= 1: g' = g * grad_scale; p *= 1 - lr*wd; m = b1 m + (1-b1) g';
// v = b2 v + (1-b2) g'^2; p -= (lr / (1 - b1^step)) * m / (sqrt(v) / sqrt(1 - b2^step) + eps).
void adamw_update(float* p, const float* g, float* m, float* v, int64_t count, float lr,
                  float beta1, float beta2, float eps, float weight_decay, float grad_scale,
                  int64_t step);
// Sum of squares in double (for the global gradient norm).
double sum_squares(const float* x, int64_t count);

}  // namespace strata::kernels
