// Causal self-attention on the GPU, FlashAttention-2 style: the T x T score matrix is never
// materialised. Same layouts and semantics as kernels/cpu/flash_attention.h, so outputs compare
// directly: qkv[b*t, (nh + 2*nkv)*hd] holds q heads, then k heads, then v heads; query head h
// reads kv head h / (nh / nkv) (grouped-query attention); out[b*t, nh*hd]; scores scaled by
// 1/sqrt(hd); lse[b, nh, t] = log sum_j exp(q_i . k_j / sqrt(hd)) over j <= i.
//
// Implementation (flash_attention.cu): scalar FP32 CUDA-core arithmetic on shared-memory tiles
// (64 query rows x 64 keys, 256 threads, 4x4 register micro-tiles), not tensor cores. It is the
// f32 path and the correctness baseline; the bf16 path's tensor-core kernels, which CudaBackend
// uses, are in flash_attention_mma.h.
//  * forward: one block per (query tile, head, batch), keys up to the diagonal, online softmax.
//  * backward: D = rowsum(dO o O) first; then one block per (key tile, kv head, batch) owns dK
//    and dV of its keys over every query head of its group and every query tile from the
//    diagonal on; then a second pass, one block per (query tile, head, batch), recomputes P and
//    dS and accumulates dQ. No atomics: every output element is written by exactly one thread
//    in a fixed order, so results are bitwise reproducible run to run. The price of the
//    separate dQ pass is recomputing S = QK^T and dP = dO V^T: 7 tile products per (query,
//    key) tile pair instead of 5 (about 40% more backward arithmetic).
//
// bf16 variants take q, k, v as bf16 bit patterns (uint16_t) and round where FlashAttention-2
// (and the CPU's flash_attention_*_bf16) do: P to bf16 before P V; in the backward dO once, P
// before dV += P^T dO, dS before dK and dQ. Products and softmax bookkeeping accumulate in f32.
//
// Supported head dims: 64 and 128 (other sizes throw strata::Error naming these). All pointers
// are device pointers; the work is enqueued on `stream` (no host synchronisation).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace strata::cuda {

// True for the head dims the kernels are compiled for (64, 128).
bool flash_attention_supports(int64_t hd);

// Bytes of device workspace each pass needs (the forward needs none; the backward holds
// D[b, nh, t] in f32).
int64_t flash_attention_forward_workspace(int64_t b, int64_t t, int64_t nh, int64_t nkv,
                                          int64_t hd);
int64_t flash_attention_backward_workspace(int64_t b, int64_t t, int64_t nh, int64_t nkv,
                                           int64_t hd);

// out[b*t, nh*hd] (f32) and lse[b, nh, t] (f32) from f32 qkv.
void flash_attention_forward(float* out, float* lse, const float* qkv, int64_t b, int64_t t,
                             int64_t nh, int64_t nkv, int64_t hd, cudaStream_t stream);
// From bf16 qkv; out in f32 or (second overload) rounded to bf16.
void flash_attention_forward_bf16(float* out, float* lse, const uint16_t* qkv16, int64_t b,
                                  int64_t t, int64_t nh, int64_t nkv, int64_t hd,
                                  cudaStream_t stream);
void flash_attention_forward_bf16(uint16_t* out16, float* lse, const uint16_t* qkv16, int64_t b,
                                  int64_t t, int64_t nh, int64_t nkv, int64_t hd,
                                  cudaStream_t stream);

// dqkv[b*t, (nh + 2*nkv)*hd] (f32) overwritten from dout[b*t, nh*hd] (f32), given the forward's
// out and lse. `workspace`: flash_attention_backward_workspace() bytes.
void flash_attention_backward(float* dqkv, void* workspace, const float* dout, const float* qkv,
                              const float* out, const float* lse, int64_t b, int64_t t, int64_t nh,
                              int64_t nkv, int64_t hd, cudaStream_t stream);
// bf16 qkv; out as the forward wrote it (f32 or bf16).
void flash_attention_backward_bf16(float* dqkv, void* workspace, const float* dout,
                                   const uint16_t* qkv16, const float* out, const float* lse,
                                   int64_t b, int64_t t, int64_t nh, int64_t nkv, int64_t hd,
                                   cudaStream_t stream);
void flash_attention_backward_bf16(float* dqkv, void* workspace, const float* dout,
                                   const uint16_t* qkv16, const uint16_t* out16, const float* lse,
                                   int64_t b, int64_t t, int64_t nh, int64_t nkv, int64_t hd,
                                   cudaStream_t stream);

}  // namespace strata::cuda
