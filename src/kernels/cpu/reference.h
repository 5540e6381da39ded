// Naive reference implementations of every kernel in kernels.h: single-threaded loops written
// for obviousness, not speed. Templated on the float type; instantiated for float and double, so
// that tests can compare the optimized kernels against a double-precision answer and check every
// backward against central finite differences in double.
// Semantics (accumulate vs overwrite, layouts) are exactly those documented in kernels.h, except
// that attention_backward needs no scratch here.
#pragma once
#include <cstdint>

#include "kernels/rope_spec.h"
#include "kernels/shapes.h"

namespace strata::kernels::ref {

template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
          int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc);

template <typename T>
void linear_forward(T* y, const T* x, const T* w, const T* bias, int64_t n, int64_t in,
                    int64_t out);
template <typename T>
void linear_backward(T* dx, T* dw, T* dbias, const T* dy, const T* x, const T* w, int64_t n,
                     int64_t in, int64_t out);

template <typename T>
void embedding_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int64_t b,
                       int64_t t, int64_t c);
template <typename T>
void embedding_backward(T* dwte, T* dwpe, const T* dout, const int32_t* tokens, int64_t b,
                        int64_t t, int64_t c);

template <typename T>
void layernorm_forward(T* y, T* mean, T* rstd, const T* x, const T* w, const T* bias, int64_t n,
                       int64_t c, T eps);
template <typename T>
void layernorm_backward(T* dx, T* dw, T* dbias, const T* dy, const T* x, const T* w, const T* mean,
                        const T* rstd, int64_t n, int64_t c);

template <typename T>
void rmsnorm_forward(T* y, T* rstd, const T* x, const T* w, int64_t n, int64_t c, T eps);
template <typename T>
void rmsnorm_backward(T* dx, T* dw, const T* dy, const T* x, const T* w, const T* rstd, int64_t n,
                      int64_t c);

template <typename T>
void gelu_forward(T* y, const T* x, int64_t count);
template <typename T>
void gelu_backward(T* dx, const T* x, const T* dy, int64_t count);

template <typename T>
void swiglu_forward(T* y, const T* gate_up, int64_t n, int64_t f);
template <typename T>
void swiglu_backward(T* dgate_up, const T* gate_up, const T* dy, int64_t n, int64_t f);

template <typename T>
void rope_forward(T* qkv, const AttentionShape& s, const RopeSpec& rope);
template <typename T>
void rope_backward(T* dqkv, const AttentionShape& s, const RopeSpec& rope);

template <typename T>
void head_rmsnorm_forward(T* qkv, T* pre, T* rstd, const T* wq, const T* wk,
                          const AttentionShape& s, T eps);
template <typename T>
void head_rmsnorm_backward(T* dqkv, T* dwq, T* dwk, const T* pre, const T* rstd, const T* wq,
                           const T* wk, const AttentionShape& s);

template <typename T>
void attention_forward(T* out, T* probs, const T* qkv, int64_t b, int64_t t, int64_t nh,
                       int64_t nkv, int64_t hd);
template <typename T>
void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* probs, int64_t b, int64_t t,
                        int64_t nh, int64_t nkv, int64_t hd);

template <typename T>
double cross_entropy_forward(T* losses, const T* logits, const int32_t* targets, int64_t n,
                             int64_t v);
template <typename T>
double cross_entropy_forward_backward(T* losses, T* logits, const int32_t* targets, int64_t n,
                                      int64_t v, T grad_scale);

template <typename T>
void add(T* out, const T* a, const T* b, int64_t count);
template <typename T>
void add_inplace(T* y, const T* x, int64_t count);
template <typename T>
void scale_inplace(T* y, T s, int64_t count);

template <typename T>
void adamw_update(T* p, const T* g, T* m, T* v, int64_t count, double lr, double beta1,
                  double beta2, double eps, double weight_decay, double grad_scale, int64_t step);
template <typename T>
double sum_squares(const T* x, int64_t count);

}  // namespace strata::kernels::ref
