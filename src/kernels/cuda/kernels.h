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
// Rotates the q and k heads; the position of row (b, t) is t; inv_freq[i] = theta^(-2i/hd).
void rope_forward(float* qkv, int64_t b, int64_t t, int64_t nh, int64_t nkv, int64_t hd,
                  float theta, cudaStream_t stream);
// The rotation by -angle, in place on dqkv.
void rope_backward(float* dqkv, int64_t b, int64_t t, int64_t nh, int64_t nkv, int64_t hd,
                   float theta, cudaStream_t stream);

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

// ---- Element-wise -------------------------------------------------------------------------------
// y[i,:] += bias
void add_bias(float* y, const float* bias, int64_t n, int64_t c, cudaStream_t stream);
// out = a + b; out may alias a or b
void add(float* out, const float* a, const float* b, int64_t count, cudaStream_t stream);
void add_inplace(float* y, const float* x, int64_t count, cudaStream_t stream);  // y += x
void scale_inplace(float* y, float s, int64_t count, cudaStream_t stream);       // y *= s

// ---- bf16 storage (round to nearest even; bit-identical to core/dtype.h, NaN included) ---------
void to_bf16(uint16_t* out, const float* in, int64_t count, cudaStream_t stream);
void from_bf16(float* out, const uint16_t* in, int64_t count, cudaStream_t stream);

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
