// Rotary position embedding, Hugging Face Llama convention (rotate_half): in every q and k head,
// the pair (i, i + hd/2) is rotated by angle t * inv_freq[i], inv_freq from kernels/rope_spec.h.
// One thread per pair (grid-stride). The angle is formed and reduced to [-pi, pi] in double, then
// sincosf runs on the reduced angle in float, exactly as the CPU kernel does: at positions in the
// thousands, forming the angle in float would lose about 1e-4 rad.
#include "core/error.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kernels.h"

namespace strata::cuda {

namespace {

__global__ void rope_kernel(float* __restrict__ qkv, int64_t rows, int64_t t, int64_t heads,
                            int64_t row_stride, int64_t hd, RopeSpec rope, float sign,
                            const int32_t* __restrict__ positions) {
  const int64_t half = hd / 2;
  const int64_t count = rows * heads * half;
  for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < count;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = idx % half;
    const int64_t rest = idx / half;
    const int64_t h = rest % heads;
    const int64_t r = rest / heads;
    const int64_t ti = positions ? positions[r] : r % t;
    const double inv_freq = rope_inv_freq(rope, i, hd);
    const double angle = double(ti) * inv_freq;
    const double reduced = angle - 6.283185307179586 * rint(angle * 0.15915494309189535);
    float sn, cs;
    sincosf(float(reduced) * sign, &sn, &cs);
    float* x1 = qkv + r * row_stride + h * hd + i;
    float* x2 = x1 + half;
    const float a = *x1, c = *x2;
    *x1 = a * cs - c * sn;
    *x2 = c * cs + a * sn;
  }
}

void rope_rotate(float* qkv, const AttentionShape& s, const RopeSpec& rope, float sign,
                 const int32_t* positions, cudaStream_t stream) {
  const int64_t hd = s.head_dim;
  STRATA_CHECK(hd > 0 && hd % 2 == 0, "rope: head_dim ", hd, " must be even and positive");
  STRATA_CHECK(s.b >= 0 && s.t >= 0 && s.heads >= 0 && s.kv_heads >= 0, "rope: bad shape b=", s.b,
               " t=", s.t, " nh=", s.heads, " nkv=", s.kv_heads);
  const int64_t heads = s.qk_heads();  // q heads then k heads; v is left alone
  const int64_t count = s.rows() * heads * (hd / 2);
  if (count == 0) return;
  rope_kernel<<<detail::grid_for(count), detail::kThreads, 0, stream>>>(
      qkv, s.rows(), s.t, heads, s.qkv_width(), hd, rope, sign, positions);
  STRATA_CUDA_CHECK_LAUNCH();
}

}  // namespace

void rope_forward(float* qkv, const AttentionShape& s, const RopeSpec& rope,
                  const int32_t* positions, cudaStream_t stream) {
  rope_rotate(qkv, s, rope, 1.0f, positions, stream);
}

void rope_backward(float* dqkv, const AttentionShape& s, const RopeSpec& rope,
                   const int32_t* positions, cudaStream_t stream) {
  rope_rotate(dqkv, s, rope, -1.0f, positions, stream);
}

}  // namespace strata::cuda
