// Tensor-core causal flash attention for bf16 q, k, v (Hopper, mma.sync m16n8k16): the same
// contract as the bf16 functions of flash_attention.h (layouts, GQA, head dims 64 and 128, any
// t, the bf16 rounding points, out / lse / dqkv in f32 or bf16 out), at tensor-core speed. The
// scalar kernels of flash_attention.h stay as the f32 path and the reference; CudaBackend routes
// its bf16 methods here unless STRATA_FLASH_KERNEL=scalar.
//
// Forward (flash_attention_mma.cu): one block of 4 warps per (64-row query tile, head, batch),
// each warp 16 query rows; key tiles of 64 up to the diagonal; S = Q K^T and O += P V on
// mma.sync with f32 accumulators; online softmax in registers in the log2 domain (exp2f of
// scores prescaled by log2(e) / sqrt(hd)); the causal mask on the diagonal tile only.
// Backward (flash_attention_mma_bwd.cu), deterministic (no atomics, fixed summation orders):
// a preprocessing pass writes D = rowsum(bf16(dO) o O) and dO rounded to bf16 into the
// workspace; a dK/dV pass, one block per (64-key tile, kv head, batch) over the query heads of
// the group and the query tiles from the diagonal on; then a dQ pass, one block per (query tile,
// head, batch) over the key tiles up to the diagonal. Rounded to bf16 as the scalar kernel: P
// before P V and P^T dO, dO once, dS before dS^T Q and dS K.
//
// Pointers: device pointers. qkv16 and the workspace must be 16-byte aligned, out / dout / dqkv
// 8-byte aligned (a bf16 out 4-byte); other pointers take the scalar kernel instead (same
// results up to rounding). Work is enqueued on `stream`.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace strata::cuda {

// False when STRATA_FLASH_KERNEL=scalar (read once, at the first call): CudaBackend's bf16 flash
// methods then call the scalar kernels, for comparison. Unset or "mma": true; any other value
// throws strata::Error naming the accepted ones.
bool flash_attention_mma_enabled();

// Bytes of device workspace the mma backward needs: D[b, nh, t] in f32, then dO in bf16
// [b*t, nh*hd]. At least flash_attention_backward_workspace() (the scalar fallback's).
int64_t flash_attention_mma_backward_workspace(int64_t b, int64_t t, int64_t nh, int64_t nkv,
                                               int64_t hd);

// out[b*t, nh*hd] (f32, or rounded to bf16 in the second overload) and lse[b, nh, t].
void flash_attention_mma_forward_bf16(float* out, float* lse, const uint16_t* qkv16, int64_t b,
                                      int64_t t, int64_t nh, int64_t nkv, int64_t hd,
                                      cudaStream_t stream);
void flash_attention_mma_forward_bf16(uint16_t* out16, float* lse, const uint16_t* qkv16, int64_t b,
                                      int64_t t, int64_t nh, int64_t nkv, int64_t hd,
                                      cudaStream_t stream);

// dqkv[b*t, (nh + 2*nkv)*hd] (f32) overwritten from dout (f32) given the forward's out (f32 or
// bf16) and lse. `workspace`: flash_attention_mma_backward_workspace() bytes.
void flash_attention_mma_backward_bf16(float* dqkv, void* workspace, const float* dout,
                                       const uint16_t* qkv16, const float* out, const float* lse,
                                       int64_t b, int64_t t, int64_t nh, int64_t nkv, int64_t hd,
                                       cudaStream_t stream);
void flash_attention_mma_backward_bf16(float* dqkv, void* workspace, const float* dout,
                                       const uint16_t* qkv16, const uint16_t* out16,
                                       const float* lse, int64_t b, int64_t t, int64_t nh,
                                       int64_t nkv, int64_t hd, cudaStream_t stream);

}  // namespace strata::cuda
