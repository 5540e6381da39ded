// GPU micro-benchmark: the bf16 matrix rate measured in this run (cuBLASLt through GemmLt, bf16
// operands, f32 accumulation, on a large square GEMM and GPT-2 124M's training shapes), against
// which flash attention's forward, backward and forward+backward TFLOP/s (causal) are reported,
// for the tensor-core kernel (kernels/cuda/flash_attention_mma.h) and the scalar one
// (flash_attention.h) at GPT-2 124M and llama-like shapes. bench/attention_vs_torch_gpu.py
// times PyTorch's fused attention backends (cuDNN, FlashAttention-2) on the same shapes.
// Without a GPU it prints "skipped: no GPU" and exits 0.
// A .cu rather than a .cc so that bench/CMakeLists.txt's *.cc glob (CPU benchmarks linked
// without CUDA) does not pick it up.
// Options: --quick (fewer repetitions, no 8192 square, two attention shapes).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/flash_attention.h"
#include "kernels/cuda/flash_attention_mma.h"
#include "kernels/cuda/gemm.h"

namespace {

using namespace strata;
using namespace strata::cuda;

// A device buffer filled with small pseudo-random bf16 or f32 values (an LCG: the numbers only
// need to be finite and not all equal; the rate does not depend on them).
struct Buffer {
  void* ptr = nullptr;
  explicit Buffer(size_t bytes, bool bf16 = true, uint32_t seed = 1) {
    STRATA_CUDA_CHECK(cudaMalloc(&ptr, std::max<size_t>(bytes, 4)));
    const size_t n = bf16 ? bytes / 2 : bytes / 4;
    uint32_t s = seed;
    auto next = [&s] {
      s = s * 1664525u + 1013904223u;
      return static_cast<float>((s >> 8) & 0xffff) / 65536.0f - 0.5f;
    };
    if (bf16) {
      std::vector<uint16_t> host(n);
      for (auto& x : host) x = f32_to_bf16(next());
      STRATA_CUDA_CHECK(cudaMemcpy(ptr, host.data(), n * 2, cudaMemcpyHostToDevice));
    } else {
      std::vector<float> host(n);
      for (auto& x : host) x = next();
      STRATA_CUDA_CHECK(cudaMemcpy(ptr, host.data(), n * 4, cudaMemcpyHostToDevice));
    }
  }
  ~Buffer() { cudaFree(ptr); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr);
  }
};

// Milliseconds per call of `fn` on `stream`: `warmup` untimed calls, then `reps` timed ones
// between two events.
double time_ms(const std::function<void()>& fn, cudaStream_t stream, int warmup, int reps) {
  for (int i = 0; i < warmup; ++i) fn();
  Event start(true), stop(true);
  start.record(stream);
  for (int i = 0; i < reps; ++i) fn();
  stop.record(stream);
  stop.synchronize();
  return stop.elapsed_ms_since(start) / reps;
}

struct GemmShape {
  const char* name;
  int64_t m, n, k;
  bool ta, tb;
};

// Returns the best bf16 rate seen (TFLOP/s).
double bench_gemm(GemmLt& lt, cudaStream_t stream, bool quick) {
  const int64_t tokens = 8 * 1024, c = 768, vocab = 50304;  // GPT-2 124M, micro-batch 8 x 1024
  std::vector<GemmShape> shapes = {
      {"square 8192 (NT)", 8192, 8192, 8192, false, true},
      {"gpt2 qkv fwd", tokens, 3 * c, c, false, true},
      {"gpt2 attn proj fwd", tokens, c, c, false, true},
      {"gpt2 fc fwd", tokens, 4 * c, c, false, true},
      {"gpt2 fc proj fwd", tokens, c, 4 * c, false, true},
      {"gpt2 fc bwd dx", tokens, c, 4 * c, false, false},
      {"gpt2 fc bwd dw", 4 * c, c, tokens, true, false},
      {"gpt2 lm head fwd", tokens, vocab, c, false, true},
  };
  if (quick) shapes.erase(shapes.begin());
  double best = 0.0;
  std::printf("%-22s %7s %7s %7s  %10s %10s\n", "bf16 GEMM", "M", "N", "K", "ms", "TFLOP/s");
  for (const GemmShape& s : shapes) {
    const int64_t a_rows = s.ta ? s.k : s.m, a_cols = s.ta ? s.m : s.k;
    const int64_t b_rows = s.tb ? s.n : s.k, b_cols = s.tb ? s.k : s.n;
    Buffer a(static_cast<size_t>(a_rows * a_cols) * 2, true, 1),
        b(static_cast<size_t>(b_rows * b_cols) * 2, true, 2),
        cbuf(static_cast<size_t>(s.m * s.n) * 2, true, 3);
    GemmArgs g;
    g.trans_a = s.ta, g.trans_b = s.tb, g.m = s.m, g.n = s.n, g.k = s.k;
    g.a = a.ptr, g.lda = a_cols, g.b = b.ptr, g.ldb = b_cols, g.c = cbuf.ptr, g.ldc = s.n;
    g.ab_type = DType::bf16, g.c_type = DType::bf16;
    const double ms = time_ms([&] { lt.gemm(g, stream); }, stream, 3, quick ? 5 : 20);
    const double tflops = 2.0 * s.m * s.n * s.k / (ms * 1e-3) / 1e12;
    best = std::max(best, tflops);
    std::printf("%-22s %7lld %7lld %7lld  %10.3f %10.1f\n", s.name, static_cast<long long>(s.m),
                static_cast<long long>(s.n), static_cast<long long>(s.k), ms, tflops);
  }
  std::printf("bf16 matrix rate measured in this run: %.1f TFLOP/s\n\n", best);
  return best;
}

struct AttentionShape {
  const char* name;
  int64_t b, t, nh, nkv, hd;
};

// Flash attention, bf16 q/k/v, f32 out and gradients (what CudaBackend runs), causal: the
// tensor-core kernel (flash_attention_mma.h, CudaBackend's default) against the scalar one
// (STRATA_FLASH_KERNEL=scalar). FLOPs as FlashAttention counts them: the forward's two products
// (Q K^T, P V) of 2 t^2 hd each per (batch, head), halved by the causal mask; the backward 2.5x
// that (five products); the dQ pass's recomputation of S and dP is not counted.
void bench_attention(cudaStream_t stream, bool quick, double peak) {
  std::vector<AttentionShape> shapes = {
      {"gpt2 124M", 8, 1024, 12, 12, 64},
      {"llama-like (GQA 4)", 4, 2048, 32, 8, 128},
  };
  if (!quick) {
    shapes.push_back({"gpt2 124M", 16, 1024, 12, 12, 64});
    shapes.push_back({"gpt2 124M, t 4096", 4, 4096, 12, 12, 64});
    shapes.push_back({"llama-like (GQA 4)", 2, 4096, 32, 8, 128});
  }
  std::printf(
      "flash attention, bf16 in, causal; TF/s = causal FLOPs (fwd 2 t^2 hd b nh, "
      "bwd 2.5x, fwd+bwd 3.5x) / time\n");
  std::printf("%-20s %3s %5s %3s %3s %4s %7s  %8s %8s %8s %9s %9s\n", "shape", "b", "t", "nh",
              "nkv", "hd", "kernel", "fwd ms", "fwd TF/s", "bwd TF/s", "f+b ms", "f+b TF/s");
  for (const AttentionShape& s : shapes) {
    const int64_t b = s.b, t = s.t, nh = s.nh, nkv = s.nkv, hd = s.hd;
    const size_t qkv_n = static_cast<size_t>(b * t * (nh + 2 * nkv) * hd);
    const size_t out_n = static_cast<size_t>(b * t * nh * hd);
    Buffer qkv(qkv_n * 2, true, 5), dout(out_n * 4, false, 6), out(out_n * 4, false, 7),
        lse(static_cast<size_t>(b * nh * t) * 4, false, 8), dqkv(qkv_n * 4, false, 9),
        ws(static_cast<size_t>(flash_attention_mma_backward_workspace(b, t, nh, nkv, hd)), false);
    const double fwd_flops = 4.0 * b * nh * t * t * hd / 2.0;
    const double bwd_flops = 2.5 * fwd_flops;
    for (const bool use_mma : {true, false}) {
      const auto fwd = [&] {
        if (use_mma) {
          flash_attention_mma_forward_bf16(out.as<float>(), lse.as<float>(), qkv.as<uint16_t>(), b,
                                           t, nh, nkv, hd, stream);
        } else {
          flash_attention_forward_bf16(out.as<float>(), lse.as<float>(), qkv.as<uint16_t>(), b, t,
                                       nh, nkv, hd, stream);
        }
      };
      const auto bwd = [&] {
        if (use_mma) {
          flash_attention_mma_backward_bf16(dqkv.as<float>(), ws.ptr, dout.as<float>(),
                                            qkv.as<uint16_t>(), out.as<float>(), lse.as<float>(), b,
                                            t, nh, nkv, hd, stream);
        } else {
          flash_attention_backward_bf16(dqkv.as<float>(), ws.ptr, dout.as<float>(),
                                        qkv.as<uint16_t>(), out.as<float>(), lse.as<float>(), b, t,
                                        nh, nkv, hd, stream);
        }
      };
      const int reps = quick ? 5 : 20;
      const double fwd_ms = time_ms(fwd, stream, 2, reps);
      const double bwd_ms = time_ms(bwd, stream, 2, reps);
      const double all_ms = time_ms(
          [&] {
            fwd();
            bwd();
          },
          stream, 1, reps);
      const double ftf = fwd_flops / (fwd_ms * 1e-3) / 1e12;
      const double btf = bwd_flops / (bwd_ms * 1e-3) / 1e12;
      const double atf = (fwd_flops + bwd_flops) / (all_ms * 1e-3) / 1e12;
      std::printf(
          "%-20s %3lld %5lld %3lld %3lld %4lld %7s  %8.3f %8.1f %8.1f %9.3f %9.1f  "
          "(fwd %.0f%%, f+b %.0f%% of bf16 GEMM)\n",
          s.name, static_cast<long long>(b), static_cast<long long>(t), static_cast<long long>(nh),
          static_cast<long long>(nkv), static_cast<long long>(hd), use_mma ? "mma" : "scalar",
          fwd_ms, ftf, btf, all_ms, atf, 100.0 * ftf / peak, 100.0 * atf / peak);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  for (int i = 1; i < argc; ++i) quick = quick || std::strcmp(argv[i], "--quick") == 0;
  std::string why;
  if (device_count(&why) == 0) {
    std::printf("bench_cuda: skipped: no GPU (%s)\n", why.c_str());
    return 0;
  }
  try {
    std::printf("device: %s\n\n", device_info(0).summary().c_str());
    Stream stream;
    GemmLt lt;
    const double peak = bench_gemm(lt, stream.get(), quick);
    bench_attention(stream.get(), quick, peak);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_cuda: %s\n", e.what());
    return 1;
  }
  return 0;
}
