// Naive references of the MoE kernels of kernels/cpu/moe.h: single-threaded loops written for
// obviousness, templated on the float type and instantiated for float and double, so that tests
// can compare the kernels with a double-precision answer and check every backward against central
// finite differences. Semantics and layouts are exactly those documented in moe.h.
#pragma once
#include <cstdint>

#include "kernels/cpu/moe.h"

namespace strata::kernels::ref {

template <typename T>
void moe_route_forward(MoeGating gating, int32_t* expert_idx, T* weight, T* probs, const T* logits,
                       const T* bias, int64_t n, int64_t e, int64_t k, bool normalize, T scale);
template <typename T>
void moe_route_backward(MoeGating gating, T* dlogits, const T* dweight, const T* probs,
                        const int32_t* expert_idx, int64_t n, int64_t e, int64_t k, bool normalize,
                        T scale);

template <typename T>
double moe_aux_loss_forward(MoeGating gating, const T* probs, const int64_t* tokens_per_expert,
                            int64_t n, int64_t e, int64_t k, T coeff);
template <typename T>
void moe_aux_loss_backward(MoeGating gating, T* dlogits, const T* probs,
                           const int64_t* tokens_per_expert, int64_t n, int64_t e, int64_t k,
                           T coeff);
template <typename T>
double moe_z_loss_forward(const T* logits, int64_t n, int64_t e, T coeff);
template <typename T>
void moe_z_loss_backward(T* dlogits, const T* logits, int64_t n, int64_t e, T coeff);
template <typename T>
void moe_update_bias(T* bias, const int64_t* tokens_per_expert, int64_t e, T rate);

int64_t moe_dispatch_plan(int64_t* offsets, int32_t* row_token, int32_t* row_slot,
                          int32_t* token_row, int64_t* tokens_per_expert, const int32_t* expert_idx,
                          int64_t n, int64_t e, int64_t k, int64_t capacity);

template <typename T>
void moe_permute_forward(T* xs, const T* x, const int32_t* row_token, int64_t rows, int64_t c);
template <typename T>
void moe_permute_backward(T* dx, const T* dxs, const int32_t* token_row, int64_t n, int64_t k,
                          int64_t c);

template <typename T>
void moe_grouped_linear_forward(T* ys, const T* xs, const T* w, const int64_t* offsets, int64_t e,
                                int64_t in, int64_t out);
template <typename T>
void moe_grouped_linear_backward(T* dxs, T* dw, const T* dys, const T* xs, const T* w,
                                 const int64_t* offsets, int64_t e, int64_t in, int64_t out);

template <typename T>
void moe_combine_forward(T* y, const T* ys, const T* weight, const int32_t* token_row, int64_t n,
                         int64_t k, int64_t c);
template <typename T>
void moe_combine_backward(T* dys, T* dweight, const T* dy, const T* ys, const T* weight,
                          const int32_t* token_row, int64_t n, int64_t k, int64_t c);

}  // namespace strata::kernels::ref
