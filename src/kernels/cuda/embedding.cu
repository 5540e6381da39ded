// Token (+ learned position) embedding. The forward gathers rows. The backward scatters them, and
// two rows with the same token add into the same dwte row: instead of float atomics (whose order
// varies run to run), each thread owns one column of the tokens of one bucket (token % kBuckets)
// and walks the whole token list in order, adding only its bucket's rows. Every dwte element then
// receives its additions in token order, exactly as on the CPU, so the result is the CPU's bit for
// bit; the buckets are there to give the GPU columns x buckets threads of work instead of columns.
#include "core/error.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kernels.h"

namespace strata::cuda {

namespace {

constexpr int kBuckets = 32;
constexpr int kColThreads = 128;  // columns per block of the backward
constexpr int kTokenTile = 1024;  // tokens staged in shared memory at a time

__global__ void embedding_forward_kernel(float* __restrict__ out,
                                         const int32_t* __restrict__ tokens,
                                         const float* __restrict__ wte,
                                         const float* __restrict__ wpe, int64_t n, int64_t t,
                                         int64_t c) {
  const int64_t count = n * c;
  for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < count;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = idx / c, j = idx - i * c;
    const float e = wte[int64_t(tokens[i]) * c + j];
    // Without wpe, a copy (not e + 0, which would turn -0 into +0).
    out[idx] = wpe ? e + wpe[(i % t) * c + j] : e;
  }
}

__global__ void embedding_backward_wte_kernel(float* __restrict__ dwte,
                                              const float* __restrict__ dout,
                                              const int32_t* __restrict__ tokens, int64_t n,
                                              int64_t c) {
  __shared__ int32_t tile[kTokenTile];
  const int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int32_t bucket = int32_t(blockIdx.y);
  for (int64_t i0 = 0; i0 < n; i0 += kTokenTile) {
    const int64_t len = n - i0 < kTokenTile ? n - i0 : kTokenTile;
    __syncthreads();  // the previous tile is no longer read
    for (int64_t k = threadIdx.x; k < len; k += blockDim.x) tile[k] = tokens[i0 + k];
    __syncthreads();
    if (j < c) {
      for (int64_t k = 0; k < len; ++k) {
        const int32_t tok = tile[k];
        if (tok % kBuckets == bucket) dwte[int64_t(tok) * c + j] += dout[(i0 + k) * c + j];
      }
    }
  }
}

// dwpe[ti, j] += dout[bi, ti, j] for bi in order (the CPU's order).
__global__ void embedding_backward_wpe_kernel(float* __restrict__ dwpe,
                                              const float* __restrict__ dout, int64_t b, int64_t t,
                                              int64_t c) {
  const int64_t count = t * c;
  for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < count;
       idx += int64_t(gridDim.x) * blockDim.x) {
    float acc = dwpe[idx];
    for (int64_t bi = 0; bi < b; ++bi) acc += dout[bi * t * c + idx];
    dwpe[idx] = acc;
  }
}

}  // namespace

void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                       int64_t b, int64_t t, int64_t c, cudaStream_t stream) {
  STRATA_CHECK(b >= 0 && t >= 0 && c >= 0, "embedding_forward: bad shape b=", b, " t=", t,
               " c=", c);
  if (b * t * c == 0) return;
  embedding_forward_kernel<<<detail::grid_for(b * t * c), detail::kThreads, 0, stream>>>(
      out, tokens, wte, wpe, b * t, t, c);
  STRATA_CUDA_CHECK_LAUNCH();
}

void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                        int64_t b, int64_t t, int64_t c, cudaStream_t stream) {
  STRATA_CHECK(b >= 0 && t >= 0 && c >= 0, "embedding_backward: bad shape b=", b, " t=", t,
               " c=", c);
  if (b * t * c == 0) return;
  const dim3 grid(unsigned((c + kColThreads - 1) / kColThreads), kBuckets);
  embedding_backward_wte_kernel<<<grid, kColThreads, 0, stream>>>(dwte, dout, tokens, b * t, c);
  STRATA_CUDA_CHECK_LAUNCH();
  if (dwpe) {
    embedding_backward_wpe_kernel<<<detail::grid_for(t * c), detail::kThreads, 0, stream>>>(
        dwpe, dout, b, t, c);
    STRATA_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace strata::cuda
