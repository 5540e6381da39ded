// Kernels of tensor parallelism's vocabulary split (the device twins of
// kernels/cpu/vocab_parallel.cc): the embedding lookup and its scatter-back restricted to a block
// of vocabulary rows, learned positions for a block of rows (sequence parallelism), and the three
// local steps of vocabulary-parallel cross-entropy.
//
// Determinism without float atomics, and bit-for-bit the CPU's results for the scatters: every
// output element of a backward is owned by one thread that adds its contributions in row order,
// which is the order the CPU adds them in (embedding.cu's bucket scheme for the vocabulary rows).
// The cross-entropy steps are one block per row, with fixed-order block reductions.
#include <cmath>

#include "core/error.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kernels.h"

namespace strata::cuda {

namespace {

constexpr int kBuckets = 32;      // vocabulary rows split by row % kBuckets (embedding.cu)
constexpr int kColThreads = 128;  // columns per block of the range backward
constexpr int kTokenTile = 1024;  // tokens staged in shared memory at a time
constexpr int kRowThreads = 256;  // threads per row of the cross-entropy steps

#define STRATA_GRID_STRIDE(i, count)                                            \
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (count); \
       i += int64_t(gridDim.x) * blockDim.x)

__global__ void embedding_range_forward_kernel(float* __restrict__ out,
                                               const int32_t* __restrict__ tokens,
                                               const float* __restrict__ wte_rows,
                                               int64_t vocab_begin, int64_t vocab_count, int64_t n,
                                               int64_t c) {
  STRATA_GRID_STRIDE(idx, n * c) {
    const int64_t i = idx / c, j = idx - i * c;
    const int64_t row = int64_t(tokens[i]) - vocab_begin;
    out[idx] = row >= 0 && row < vocab_count ? wte_rows[row * c + j] : 0.0f;
  }
}

// Block (column block, bucket): each thread owns column j of the local rows r with
// r % kBuckets == bucket and walks all tokens in order, so each element's additions come in
// token order.
__global__ void embedding_range_backward_kernel(float* __restrict__ dwte_rows,
                                                const float* __restrict__ dout,
                                                const int32_t* __restrict__ tokens,
                                                int64_t vocab_begin, int64_t vocab_count, int64_t n,
                                                int64_t c) {
  __shared__ int64_t tile[kTokenTile];  // local row of each staged token, -1 when not local
  const int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t bucket = blockIdx.y;
  for (int64_t i0 = 0; i0 < n; i0 += kTokenTile) {
    const int64_t len = n - i0 < kTokenTile ? n - i0 : kTokenTile;
    __syncthreads();  // the previous tile is no longer read
    for (int64_t k = threadIdx.x; k < len; k += blockDim.x) {
      const int64_t row = int64_t(tokens[i0 + k]) - vocab_begin;
      tile[k] = row >= 0 && row < vocab_count ? row : -1;
    }
    __syncthreads();
    if (j < c) {
      for (int64_t k = 0; k < len; ++k) {
        const int64_t row = tile[k];
        if (row >= 0 && row % kBuckets == bucket) dwte_rows[row * c + j] += dout[(i0 + k) * c + j];
      }
    }
  }
}

__global__ void positions_add_forward_kernel(float* __restrict__ out, const float* __restrict__ wpe,
                                             int64_t first_row, int64_t n, int64_t t, int64_t c,
                                             const int32_t* __restrict__ positions) {
  STRATA_GRID_STRIDE(idx, n * c) {
    const int64_t i = idx / c, j = idx - i * c;
    const int64_t pos = positions ? positions[first_row + i] : (first_row + i) % t;
    out[idx] += wpe[pos * c + j];
  }
}

// Explicit positions: no arithmetic finds the rows of a position, so a thread per column goes
// through the rows in order (the CPU's order for each element).
__global__ void positions_add_backward_rows_kernel(float* __restrict__ dwpe,
                                                   const float* __restrict__ dout,
                                                   int64_t first_row, int64_t n, int64_t c,
                                                   const int32_t* __restrict__ positions) {
  STRATA_GRID_STRIDE(j, c) {
    for (int64_t i = 0; i < n; ++i)
      dwpe[int64_t(positions[first_row + i]) * c + j] += dout[i * c + j];
  }
}

// Thread per dwpe element (p, j): rows i with (first_row + i) % t == p are i0, i0 + t, ...,
// added in that (the CPU's) order.
__global__ void positions_add_backward_kernel(float* __restrict__ dwpe,
                                              const float* __restrict__ dout, int64_t first_row,
                                              int64_t n, int64_t t, int64_t c) {
  STRATA_GRID_STRIDE(idx, t * c) {
    const int64_t p = idx / c, j = idx - p * c;
    const int64_t i0 = ((p - first_row) % t + t) % t;
    if (i0 >= n) continue;
    float acc = dwpe[idx];
    for (int64_t i = i0; i < n; i += t) acc += dout[i * c + j];
    dwpe[idx] = acc;
  }
}

#undef STRATA_GRID_STRIDE

// Max over the block, returned to every thread (as detail::block_sum; every thread must call it).
__device__ float block_max(float v) {
  __shared__ float partial[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = detail::warp_max(v);
  __syncthreads();
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  v = lane < warps ? partial[lane] : -INFINITY;
  return detail::warp_max(v);
}

__global__ void ce_max_kernel(float* __restrict__ row_max, const float* __restrict__ logits,
                              int64_t v) {
  const float* x = logits + int64_t(blockIdx.x) * v;
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j < v; j += blockDim.x) m = fmaxf(m, x[j]);
  m = block_max(m);
  if (threadIdx.x == 0) row_max[blockIdx.x] = m;
}

__global__ void ce_sums_kernel(float* __restrict__ sum_exp, float* __restrict__ target_logit,
                               const float* __restrict__ logits, const float* __restrict__ row_max,
                               const int32_t* __restrict__ targets, int64_t v,
                               int64_t vocab_begin) {
  const int64_t i = blockIdx.x;
  const float* x = logits + i * v;
  const float m = row_max[i];
  // The CPU's terms exactly (f32 difference, double exp), summed in double in a fixed order.
  double s = 0.0;
  for (int64_t j = threadIdx.x; j < v; j += blockDim.x) s += exp(double(x[j] - m));
  s = detail::block_sum(s);
  if (threadIdx.x == 0) {
    sum_exp[i] = float(s);
    const int64_t local = int64_t(targets[i]) - vocab_begin;
    target_logit[i] = targets[i] >= 0 && local >= 0 && local < v ? x[local] : 0.0f;
  }
}

__global__ void ce_finish_kernel(float* __restrict__ losses, float* __restrict__ logits,
                                 const float* __restrict__ row_max,
                                 const float* __restrict__ sum_exp,
                                 const float* __restrict__ target_logit,
                                 const int32_t* __restrict__ targets, int64_t v,
                                 int64_t vocab_begin, bool backward, float grad_scale) {
  const int64_t i = blockIdx.x;
  float* x = logits + i * v;
  if (targets[i] < 0) {
    if (threadIdx.x == 0) losses[i] = 0.0f;
    if (backward) {
      for (int64_t j = threadIdx.x; j < v; j += blockDim.x) x[j] = 0.0f;
    }
    return;
  }
  const float m = row_max[i], se = sum_exp[i];
  if (threadIdx.x == 0)  // the CPU's expression: double log, then the f32 terms in double
    losses[i] = float(log(double(se)) + double(m) - double(target_logit[i]));
  if (!backward) return;
  const float inv = grad_scale / se;
  const int64_t local = int64_t(targets[i]) - vocab_begin;
  for (int64_t j = threadIdx.x; j < v; j += blockDim.x) {
    float d = expf(x[j] - m) * inv;
    if (j == local) d -= grad_scale;
    x[j] = d;
  }
}

void check_rows(const char* what, int64_t n, int64_t v) {
  STRATA_CHECK(n >= 0 && v > 0 && n < (int64_t{1} << 31), what, ": bad shape n=", n,
               " v_local=", v);
}

}  // namespace

void embedding_range_forward(float* out, const int32_t* tokens, const float* wte_rows,
                             int64_t vocab_begin, int64_t vocab_count, int64_t n, int64_t c,
                             cudaStream_t stream) {
  STRATA_CHECK(n >= 0 && c >= 0 && vocab_count >= 0, "embedding_range_forward: bad shape n=", n,
               " c=", c, " vocab_count=", vocab_count);
  if (n * c == 0) return;
  embedding_range_forward_kernel<<<detail::grid_for(n * c), detail::kThreads, 0, stream>>>(
      out, tokens, wte_rows, vocab_begin, vocab_count, n, c);
  STRATA_CUDA_CHECK_LAUNCH();
}

void embedding_range_backward(float* dwte_rows, const float* dout, const int32_t* tokens,
                              int64_t vocab_begin, int64_t vocab_count, int64_t n, int64_t c,
                              cudaStream_t stream) {
  STRATA_CHECK(n >= 0 && c >= 0 && vocab_count >= 0, "embedding_range_backward: bad shape n=", n,
               " c=", c, " vocab_count=", vocab_count);
  if (n * c == 0 || vocab_count == 0) return;
  const dim3 grid(unsigned((c + kColThreads - 1) / kColThreads), kBuckets);
  embedding_range_backward_kernel<<<grid, kColThreads, 0, stream>>>(dwte_rows, dout, tokens,
                                                                    vocab_begin, vocab_count, n, c);
  STRATA_CUDA_CHECK_LAUNCH();
}

void positions_add_forward(float* out, const float* wpe, int64_t first_row, int64_t n, int64_t t,
                           int64_t c, const int32_t* positions, cudaStream_t stream) {
  STRATA_CHECK(n >= 0 && t > 0 && c >= 0 && first_row >= 0,
               "positions_add_forward: bad shape n=", n, " t=", t, " c=", c,
               " first_row=", first_row);
  if (n * c == 0) return;
  positions_add_forward_kernel<<<detail::grid_for(n * c), detail::kThreads, 0, stream>>>(
      out, wpe, first_row, n, t, c, positions);
  STRATA_CUDA_CHECK_LAUNCH();
}

void positions_add_backward(float* dwpe, const float* dout, int64_t first_row, int64_t n, int64_t t,
                            int64_t c, const int32_t* positions, cudaStream_t stream) {
  STRATA_CHECK(n >= 0 && t > 0 && c >= 0 && first_row >= 0,
               "positions_add_backward: bad shape n=", n, " t=", t, " c=", c,
               " first_row=", first_row);
  if (n * c == 0) return;
  if (positions) {
    positions_add_backward_rows_kernel<<<detail::grid_for(c), detail::kThreads, 0, stream>>>(
        dwpe, dout, first_row, n, c, positions);
    STRATA_CUDA_CHECK_LAUNCH();
    return;
  }
  positions_add_backward_kernel<<<detail::grid_for(t * c), detail::kThreads, 0, stream>>>(
      dwpe, dout, first_row, n, t, c);
  STRATA_CUDA_CHECK_LAUNCH();
}

void vocab_parallel_ce_max(float* row_max, const float* logits, int64_t n, int64_t v_local,
                           cudaStream_t stream) {
  check_rows("vocab_parallel_ce_max", n, v_local);
  if (n == 0) return;
  ce_max_kernel<<<unsigned(n), kRowThreads, 0, stream>>>(row_max, logits, v_local);
  STRATA_CUDA_CHECK_LAUNCH();
}

void vocab_parallel_ce_sums(float* sum_exp, float* target_logit, const float* logits,
                            const float* row_max, const int32_t* targets, int64_t n,
                            int64_t v_local, int64_t vocab_begin, cudaStream_t stream) {
  check_rows("vocab_parallel_ce_sums", n, v_local);
  if (n == 0) return;
  ce_sums_kernel<<<unsigned(n), kRowThreads, 0, stream>>>(sum_exp, target_logit, logits, row_max,
                                                          targets, v_local, vocab_begin);
  STRATA_CUDA_CHECK_LAUNCH();
}

void vocab_parallel_ce_finish(float* losses, float* logits, const float* row_max,
                              const float* sum_exp, const float* target_logit,
                              const int32_t* targets, int64_t n, int64_t v_local,
                              int64_t vocab_begin, bool backward, float grad_scale,
                              cudaStream_t stream) {
  check_rows("vocab_parallel_ce_finish", n, v_local);
  if (n == 0) return;
  ce_finish_kernel<<<unsigned(n), kRowThreads, 0, stream>>>(losses, logits, row_max, sum_exp,
                                                            target_logit, targets, v_local,
                                                            vocab_begin, backward, grad_scale);
  STRATA_CUDA_CHECK_LAUNCH();
}

}  // namespace strata::cuda
