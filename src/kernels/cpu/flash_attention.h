// Causal self-attention, tiled (FlashAttention-2 style): the T x T score matrix is never
// materialised. Same layouts and semantics as attention_forward / attention_backward in
// kernels.h: qkv[b*t, (nh + 2*nkv)*hd] holds q heads, then k heads, then v heads; query head h
// reads kv head h / (nh / nkv); out[b*t, nh*hd]; scores scaled by 1/sqrt(hd); causal.
//
// Determinism: every output element is produced by exactly one task in a fixed order of
// operations, so results are bitwise independent of the thread count and of scheduling.
#pragma once
#include <cstdint>

namespace strata::kernels {

// out[b*t, nh*hd] = softmax(q k^T / sqrt(hd), causal) v.
// lse[b, nh, t] = log sum_j exp(q_i . k_j / sqrt(hd)) over j <= i (saved for the backward).
void flash_attention_forward(float* out, float* lse, const float* qkv, int64_t b, int64_t t,
                             int64_t nh, int64_t nkv, int64_t hd);

// Floats of scratch flash_attention_backward needs: per-thread tiles only, O(threads * block *
// hd) and independent of t. `threads`: the OpenMP threads it will run on (0: omp_get_max_threads).
int64_t flash_attention_backward_scratch(int64_t b, int64_t t, int64_t nh, int64_t nkv, int64_t hd,
                                         int threads = 0);

// dqkv[b*t, (nh + 2*nkv)*hd] overwritten (q, k and v parts) from dout[b*t, nh*hd], given the
// forward's out and lse. Scores are recomputed tile by tile (P = exp(S / sqrt(hd) - lse)).
void flash_attention_backward(float* dqkv, float* scratch, const float* dout, const float* qkv,
                              const float* out, const float* lse, int64_t b, int64_t t, int64_t nh,
                              int64_t nkv, int64_t hd);

// bf16 variants (flash_attention.cc's portable kernel; flash_attention_avx512bf16.cc's at the
// avx512bf16 level): q, k, v as bf16 bit patterns (uint16_t) in the same
// [b*t, (nh + 2*nkv)*hd] layout; block products on bf16 operands with f32 accumulation, P, dS and
// dO rounded to bf16 (round to nearest even) for the products as in FlashAttention-2; softmax
// bookkeeping, out, lse and dqkv in f32. Same tasks and the same determinism as the f32 kernel.
void flash_attention_forward_bf16(float* out, float* lse, const uint16_t* qkv16, int64_t b,
                                  int64_t t, int64_t nh, int64_t nkv, int64_t hd);
int64_t flash_attention_backward_bf16_scratch(int64_t b, int64_t t, int64_t nh, int64_t nkv,
                                              int64_t hd, int threads = 0);
void flash_attention_backward_bf16(float* dqkv, float* scratch, const float* dout,
                                   const uint16_t* qkv16, const float* out, const float* lse,
                                   int64_t b, int64_t t, int64_t nh, int64_t nkv, int64_t hd);

// The portable bf16 kernel whatever the level: the fallback of the hand-tiled avx512bf16 kernel
// and its reference in the tests (the functions above choose between them).
void portable_flash_attention_forward_bf16(float* out, float* lse, const uint16_t* qkv16, int64_t b,
                                           int64_t t, int64_t nh, int64_t nkv, int64_t hd);
int64_t portable_flash_attention_backward_bf16_scratch(int64_t b, int64_t t, int64_t nh,
                                                       int64_t nkv, int64_t hd, int threads = 0);
void portable_flash_attention_backward_bf16(float* dqkv, float* scratch, const float* dout,
                                            const uint16_t* qkv16, const float* out,
                                            const float* lse, int64_t b, int64_t t, int64_t nh,
                                            int64_t nkv, int64_t hd);

}  // namespace strata::kernels
