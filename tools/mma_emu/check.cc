// The mma flash attention kernels, run under the host emulator (run.sh), against the CPU bf16
// kernels, with tests/cuda/test_flash_attention_mma.cc's tolerances; the bf16 out overload must
// be the f32 out rounded, bit for bit. Exit status 0 when everything passes.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "kernels/cpu/flash_attention.h"
#include "kernels/cuda/flash_attention.h"
#include "kernels/cuda/flash_attention_mma.h"

namespace strata::cuda {
bool flash_attention_supports(int64_t hd) {
  return hd == 64 || hd == 128;
}
int64_t flash_attention_backward_workspace(int64_t b, int64_t t, int64_t nh, int64_t, int64_t) {
  return 4 * b * nh * t;
}
// The scalar kernels are not emulated: the checks use aligned buffers, so the mma kernels never
// fall back to them, and reaching one ends the check.
[[noreturn]] static void scalar_fallback_called() {
  std::fprintf(stderr, "scalar fallback called\n");
  std::abort();
}
void flash_attention_forward_bf16(float*, float*, const uint16_t*, int64_t, int64_t, int64_t,
                                  int64_t, int64_t, cudaStream_t) {
  scalar_fallback_called();
}
void flash_attention_forward_bf16(uint16_t*, float*, const uint16_t*, int64_t, int64_t, int64_t,
                                  int64_t, int64_t, cudaStream_t) {
  scalar_fallback_called();
}
void flash_attention_backward_bf16(float*, void*, const float*, const uint16_t*, const float*,
                                   const float*, int64_t, int64_t, int64_t, int64_t, int64_t,
                                   cudaStream_t) {
  scalar_fallback_called();
}
void flash_attention_backward_bf16(float*, void*, const float*, const uint16_t*, const uint16_t*,
                                   const float*, int64_t, int64_t, int64_t, int64_t, int64_t,
                                   cudaStream_t) {
  scalar_fallback_called();
}
}  // namespace strata::cuda

using namespace strata;
struct Shape {
  int64_t b, t, nh, nkv, hd;
};

static bool check(const char* what, const std::vector<float>& got, const std::vector<float>& want,
                  double tol, double l2tol) {
  float mx = 0;
  for (float w : want) mx = std::max(mx, std::fabs(w));
  const double atol = tol * std::max(1.0f, mx);
  size_t bad = 0, worst = 0;
  double we = -1, err = 0, ref = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double e = std::fabs(double(got[i]) - want[i]);
    const double ex = e - (atol + tol * std::fabs(want[i]));
    if (!(ex <= 0)) ++bad;
    if (!(ex <= we)) we = ex, worst = i;
    err += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    ref += double(want[i]) * want[i];
  }
  const double rel = std::sqrt(err) / std::max(std::sqrt(ref), 1e-30);
  const bool ok = bad == 0 && rel <= l2tol;
  std::printf("  %-6s %s rel_l2 %.2e (tol %.0e), %zu bad; worst at %zu: got %g want %g\n", what,
              ok ? "ok  " : "FAIL", rel, l2tol, bad, worst, got[worst], want[worst]);
  return ok;
}

int main() {
  const Shape shapes[] = {{1, 77, 2, 1, 64},
                          {1, 1, 2, 2, 128},
                          {2, 130, 4, 2, 64},
                          {1, 200, 2, 1, 128},
                          {1, 300, 4, 1, 64}};
  bool all = true;
  uint32_t seed = 7;
  for (const Shape& s : shapes) {
    std::printf("b=%lld t=%lld nh=%lld nkv=%lld hd=%lld\n", (long long)s.b, (long long)s.t,
                (long long)s.nh, (long long)s.nkv, (long long)s.hd);
    const size_t nq = s.b * s.t * (s.nh + 2 * s.nkv) * s.hd, no = s.b * s.t * s.nh * s.hd,
                 nl = s.b * s.nh * s.t;
    std::mt19937 rng(seed++);
    std::normal_distribution<float> nd;
    std::vector<uint16_t> qkv(nq);
    for (auto& x : qkv) x = f32_to_bf16(nd(rng));
    std::vector<float> dout(no);
    for (auto& x : dout) x = nd(rng);
    std::vector<float> out(no, NAN), lse(nl, NAN), dqkv(nq, NAN);
    std::vector<uint16_t> out16(no);
    std::vector<char> ws(cuda::flash_attention_mma_backward_workspace(s.b, s.t, s.nh, s.nkv, s.hd) +
                         16);
    void* wsp = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(ws.data()) + 15) / 16 * 16);
    cuda::flash_attention_mma_forward_bf16(out.data(), lse.data(), qkv.data(), s.b, s.t, s.nh,
                                           s.nkv, s.hd, nullptr);
    cuda::flash_attention_mma_backward_bf16(dqkv.data(), wsp, dout.data(), qkv.data(), out.data(),
                                            lse.data(), s.b, s.t, s.nh, s.nkv, s.hd, nullptr);
    std::vector<float> wout(no), wlse(nl), wdqkv(nq);
    kernels::flash_attention_forward_bf16(wout.data(), wlse.data(), qkv.data(), s.b, s.t, s.nh,
                                          s.nkv, s.hd);
    std::vector<float> scratch(
        kernels::flash_attention_backward_bf16_scratch(s.b, s.t, s.nh, s.nkv, s.hd));
    kernels::flash_attention_backward_bf16(wdqkv.data(), scratch.data(), dout.data(), qkv.data(),
                                           wout.data(), wlse.data(), s.b, s.t, s.nh, s.nkv, s.hd);
    all &= check("out", out, wout, 2e-2, 1e-3);
    all &= check("lse", lse, wlse, 1e-4, 1e-5);
    all &= check("dqkv", dqkv, wdqkv, 2e-2, 1e-2);
    // split dq/dk/dv errors
    std::vector<float> g[3], w[3];
    const int64_t width = (s.nh + 2 * s.nkv) * s.hd;
    for (size_t r = 0; r < size_t(s.b * s.t); ++r)
      for (int64_t c = 0; c < width; ++c) {
        const int part = c < s.nh * s.hd ? 0 : c < (s.nh + s.nkv) * s.hd ? 1 : 2;
        g[part].push_back(dqkv[r * width + c]);
        w[part].push_back(wdqkv[r * width + c]);
      }
    // At t = 1, dq and dk are exactly 0 in exact arithmetic (one key: dS = dP - D = 0), so only
    // rounding noise is left to compare: element-wise only.
    const double l2 = s.t == 1 ? 1e30 : 1e-2;
    all &= check("dq", g[0], w[0], 2e-2, l2);
    all &= check("dk", g[1], w[1], 2e-2, l2);
    all &= check("dv", g[2], w[2], 2e-2, 1e-2);
    // bf16 out overload
    cuda::flash_attention_mma_forward_bf16(out16.data(), lse.data(), qkv.data(), s.b, s.t, s.nh,
                                           s.nkv, s.hd, nullptr);
    size_t diff = 0;
    for (size_t i = 0; i < no; ++i) diff += out16[i] != f32_to_bf16(out[i]);
    std::printf("  out16 vs rounded out: %zu differ\n", diff);
    all &= diff == 0;
  }
  std::printf(all ? "ALL OK\n" : "SOME FAILED\n");
  return all ? 0 : 1;
}
