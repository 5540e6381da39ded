// Tensor-core causal flash attention, forward (see flash_attention_mma.h for the contract), plus
// the host-side pieces both passes share: the STRATA_FLASH_KERNEL switch, the shape check, the
// workspace size.
//
// One block of 4 warps per (64-row query tile, head, batch). Each warp owns 16 query rows and
// keeps, per thread, 2 rows' softmax state (m, l) and their slice of O (16 x HD f32, HD / 2
// floats per thread) in registers. Per 64-key tile: S = Q K^T (mma_nt, Q and K read from shared
// memory by ldmatrix), the causal mask on the diagonal tile only, the online softmax in the log2
// domain (m in units of log2, p = exp2(s * log2(e) / sqrt(hd) - m)), P rounded to bf16 straight
// from the S accumulators into A fragments, O += P V (mma_nn, V by ldmatrix.trans).
//
// Shared memory holds Q, one K and one V tile (bf16, rows padded by 16 bytes: see mma_tile.cuh).
// The copies overlap the math as in FlashAttention-2: V(j) is fetched while S(j) and the softmax
// run, K(j + 1) while P V(j) runs; two barriers per key tile order the buffer reuse.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "core/error.h"
#include "kernels/cuda/flash_attention.h"
#include "kernels/cuda/flash_attention_mma.h"
#include "kernels/cuda/flash_attention_mma_common.cuh"
#include "kernels/cuda/mma_tile.cuh"

namespace strata::cuda {
namespace mma {
namespace {

constexpr float kLn2 = 0.6931471805599453f;

__device__ __forceinline__ void store2(float* p, float a, float b) {
  *reinterpret_cast<float2*>(p) = make_float2(a, b);
}
__device__ __forceinline__ void store2(bf16* p, float a, float b) {
  *reinterpret_cast<uint32_t*>(p) = pack_bf16(a, b);
}

// Blocks per SM the forward is compiled for (registers capped at 65536 / (128 blocks)): HD 64
// needs ~124 registers, so 4 blocks fit (27 KB of shared memory each); HD 128 needs ~200 (at 3
// blocks, 168 registers, ptxas spills), so 2 blocks of 51 KB.
template <int HD>
constexpr int kFwdBlocksPerSm = HD == 64 ? 4 : 2;

template <int HD, typename OutT>
__global__ void __launch_bounds__(kThreads, kFwdBlocksPerSm<HD>)
    forward_kernel(OutT* __restrict__ out, float* __restrict__ lse, const bf16* __restrict__ qkv,
                   int t, int nh, int nkv, float scale_log2) {
  constexpr int LD = HD + 8;     // padded row stride of the shared tiles
  constexpr int NS = kTile / 8;  // n-tiles of a 16 x 64 score slice
  constexpr int NO = HD / 8;     // n-tiles of a 16 x HD output slice
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* qs = reinterpret_cast<bf16*>(smem_raw);
  bf16* ks = qs + kTile * LD;
  bf16* vs = ks + kTile * LD;

  // grid (head, batch, tile) with the tiles last and reversed: every head's last query tile (the
  // most keys) is launched before any shorter one, which evens out the causal tail.
  const int h = static_cast<int>(blockIdx.x), bi = static_cast<int>(blockIdx.y);
  const int qb = static_cast<int>(gridDim.z - 1 - blockIdx.z);
  const int g = h / (nh / nkv);
  const int64_t stride = static_cast<int64_t>(nh + 2 * nkv) * HD;
  const bf16* base = qkv + static_cast<int64_t>(bi) * t * stride;
  const bf16* qg = base + static_cast<int64_t>(h) * HD;
  const bf16* kg = base + static_cast<int64_t>(nh + g) * HD;
  const bf16* vg = base + static_cast<int64_t>(nh + nkv + g) * HD;
  const int q0 = qb * kTile;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int gid = lane >> 2, tig = lane & 3;
  const int row0 = q0 + warp * 16 + gid;  // this thread's rows: row0 (c0, c1) and row0 + 8 (c2, c3)

  load_tile_async<kTile, HD, kThreads>(qs, qg, stride, q0, t);
  load_tile_async<kTile, HD, kThreads>(ks, kg, stride, 0, t);
  cp_async_commit();

  float o[NO][4];
#pragma unroll
  for (int j = 0; j < NO; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

  for (int kb = 0; kb <= qb; ++kb) {
    const int k0 = kb * kTile;
    cp_async_wait_all();
    __syncthreads();  // K(kb) (and Q) visible to all; every warp is done reading V(kb - 1)
    load_tile_async<kTile, HD, kThreads>(vs, vg, stride, k0, t);
    cp_async_commit();

    float s[NS][4];
#pragma unroll
    for (int j = 0; j < NS; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
    mma_nt<HD, NS, LD>(s, qs + warp * 16 * LD, ks, lane);

    if (kb == qb) {
      // The diagonal tile: key k0 + c is visible to row r iff k0 + c <= r. Tiles below it are
      // fully visible, and keys past t only ever fall here, past every real row. Rows past t
      // (zero Q rows) see key k0 at least, so no row is all -inf and m stays finite.
#pragma unroll
      for (int j = 0; j < NS; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          if (k0 + j * 8 + 2 * tig + (e & 1) > row0 + (e >> 1) * 8) s[j][e] = -INFINITY;
    }

    // Online softmax, rows row0 (half 0) and row0 + 8 (half 1). Key tile 0 comes first and holds
    // key 0, visible to every row, so m is finite from then on and exp2(m_old - m_new) never
    // meets -inf - -inf (it is 0 on the first tile).
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      float mx = -INFINITY;
#pragma unroll
      for (int j = 0; j < NS; ++j) mx = fmaxf(mx, fmaxf(s[j][2 * half], s[j][2 * half + 1]));
      const float m_new = fmaxf(m[half], quad_max(mx) * scale_log2);
      const float corr = exp2f(m[half] - m_new);
      float sum = 0.0f;
#pragma unroll
      for (int j = 0; j < NS; ++j)
#pragma unroll
        for (int e = 2 * half; e < 2 * half + 2; ++e) {
          s[j][e] = exp2f(fmaf(s[j][e], scale_log2, -m_new));
          sum += s[j][e];  // the unrounded P, as FlashAttention-2 and the scalar kernel
        }
      // l stays a per-thread partial sum (the quad's 4 partials are added once, at the end).
      l[half] = l[half] * corr + sum;
      m[half] = m_new;
#pragma unroll
      for (int j = 0; j < NO; ++j) {
        o[j][2 * half] *= corr;
        o[j][2 * half + 1] *= corr;
      }
    }
    uint32_t pa[NS / 2][4];
    c_to_a<NS / 2>(pa, s);  // P rounded to bf16 for P V

    cp_async_wait_all();
    __syncthreads();  // V(kb) visible to all; every warp is done reading K(kb)
    if (kb < qb) {
      load_tile_async<kTile, HD, kThreads>(ks, kg, stride, k0 + kTile, t);
      cp_async_commit();
    }
    mma_nn<NS / 2, NO, LD>(o, pa, vs, lane);
  }

#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const float lsum = quad_sum(l[half]);  // every lane: the shuffles need the whole warp
    const int row = row0 + half * 8;
    if (row >= t) continue;
    const float inv = 1.0f / lsum;
    OutT* orow = out + (static_cast<int64_t>(bi) * t + row) * nh * HD +
                 static_cast<int64_t>(h) * HD + 2 * tig;
#pragma unroll
    for (int j = 0; j < NO; ++j)
      store2(orow + j * 8, o[j][2 * half] * inv, o[j][2 * half + 1] * inv);
    if (tig == 0) lse[(static_cast<int64_t>(bi) * nh + h) * t + row] = m[half] * kLn2 + logf(lsum);
  }
}

template <int HD, typename OutT>
void forward_hd(OutT* out, float* lse, const bf16* qkv, int64_t b, int64_t t, int64_t nh,
                int64_t nkv, cudaStream_t stream) {
  const size_t smem = sizeof(bf16) * 3 * kTile * (HD + 8);
  const dim3 grid(static_cast<unsigned>(nh), static_cast<unsigned>(b),
                  static_cast<unsigned>((t + kTile - 1) / kTile));
  const float scale_log2 = kLog2e / std::sqrt(static_cast<float>(HD));
  launch(forward_kernel<HD, OutT>, grid, smem, stream, out, lse, qkv, static_cast<int>(t),
         static_cast<int>(nh), static_cast<int>(nkv), scale_log2);
}

// The mma kernels index tiles by gridDim.z (at most 65535) and read 16-byte chunks.
bool usable(int64_t t, const void* qkv16, const void* out, uintptr_t out_align) {
  return (t + kTile - 1) / kTile <= 65535 && aligned(qkv16, 16) && aligned(out, out_align);
}

}  // namespace

void check_shape(const char* what, int64_t b, int64_t t, int64_t nh, int64_t nkv, int64_t hd) {
  STRATA_CHECK(b > 0 && t > 0 && nh > 0 && nkv > 0, what, ": sizes must be positive (b=", b,
               " t=", t, " nh=", nh, " nkv=", nkv, ")");
  STRATA_CHECK(nh % nkv == 0, what, ": n_head ", nh, " is not a multiple of n_kv_head ", nkv);
  STRATA_CHECK(flash_attention_supports(hd), what, ": head_dim ", hd,
               " is not supported on the GPU (supported: 64, 128)");
  STRATA_CHECK(b <= 65535 && nh <= 65535 && t <= (int64_t{1} << 30) &&
                   b * t * (nh + 2 * nkv) * hd < (int64_t{1} << 62),
               what, ": sizes too large (b=", b, " t=", t, " nh=", nh, ")");
}

}  // namespace mma

bool flash_attention_mma_enabled() {
  static const bool enabled = [] {
    const char* v = std::getenv("STRATA_FLASH_KERNEL");
    if (v == nullptr || *v == '\0' || std::string_view(v) == "mma") return true;
    if (std::string_view(v) == "scalar") return false;
    fail("STRATA_FLASH_KERNEL=", v, ": expected \"mma\" (the default) or \"scalar\"");
  }();
  return enabled;
}

int64_t flash_attention_mma_backward_workspace(int64_t b, int64_t t, int64_t nh, int64_t,
                                               int64_t hd) {
  // D in f32, then (from a 256-byte boundary, for the 16-byte copies) dO in bf16.
  const int64_t d_bytes = (static_cast<int64_t>(sizeof(float)) * b * nh * t + 255) / 256 * 256;
  return d_bytes + 2 * b * t * nh * hd;
}

void flash_attention_mma_forward_bf16(float* out, float* lse, const uint16_t* qkv16, int64_t b,
                                      int64_t t, int64_t nh, int64_t nkv, int64_t hd,
                                      cudaStream_t stream) {
  mma::check_shape("flash_attention_forward", b, t, nh, nkv, hd);
  if (!mma::usable(t, qkv16, out, 8)) {
    flash_attention_forward_bf16(out, lse, qkv16, b, t, nh, nkv, hd, stream);
    return;
  }
  const auto* qkv = reinterpret_cast<const mma::bf16*>(qkv16);
  if (hd == 64) {
    mma::forward_hd<64>(out, lse, qkv, b, t, nh, nkv, stream);
  } else {
    mma::forward_hd<128>(out, lse, qkv, b, t, nh, nkv, stream);
  }
}

void flash_attention_mma_forward_bf16(uint16_t* out16, float* lse, const uint16_t* qkv16, int64_t b,
                                      int64_t t, int64_t nh, int64_t nkv, int64_t hd,
                                      cudaStream_t stream) {
  mma::check_shape("flash_attention_forward", b, t, nh, nkv, hd);
  if (!mma::usable(t, qkv16, out16, 4)) {
    flash_attention_forward_bf16(out16, lse, qkv16, b, t, nh, nkv, hd, stream);
    return;
  }
  const auto* qkv = reinterpret_cast<const mma::bf16*>(qkv16);
  auto* out = reinterpret_cast<mma::bf16*>(out16);
  if (hd == 64) {
    mma::forward_hd<64>(out, lse, qkv, b, t, nh, nkv, stream);
  } else {
    mma::forward_hd<128>(out, lse, qkv, b, t, nh, nkv, stream);
  }
}

}  // namespace strata::cuda
