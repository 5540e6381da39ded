// Naive (probabilities materialised) vs flash (tiled, online softmax) causal attention, f32, and
// the flash kernel on bf16 q/k/v (flash-bf16: bf16 block products, f32 accumulation): time of
// forward and backward, and the memory each needs beyond q/k/v/out (naive: probs b*nh*t*t floats
// + its backward scratch; flash, flash-bf16: lse b*nh*t + its backward scratch), at
// T = 512, 2048, 8192 (B=1, nh=12, hd=64). Run with OMP_NUM_THREADS=2 (the default here).
// The RSS column is the growth of ru_maxrss over a forward + backward, measured in a child
// process per kernel and T (this binary re-run with --rss-run KERNEL T).
// Options: --skip-naive-8192, --no-rss, --reps N (timing repetitions, best of N; default 3,
// 1 at T=8192), --t T (one sequence length), --only naive|flash|flash-bf16.
#include <omp.h>
#include <sys/resource.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/flash_attention.h"
#include "kernels/cpu/kernels.h"

namespace {

using strata::kernels::attention_backward;
using strata::kernels::attention_backward_scratch;
using strata::kernels::attention_forward;
using strata::kernels::flash_attention_backward;
using strata::kernels::flash_attention_backward_bf16;
using strata::kernels::flash_attention_backward_bf16_scratch;
using strata::kernels::flash_attention_backward_scratch;
using strata::kernels::flash_attention_forward;
using strata::kernels::flash_attention_forward_bf16;

constexpr int64_t kB = 1, kNh = 12, kNkv = 12, kHd = 64;

enum class Kernel { kNaive, kFlash, kFlashBf16 };
constexpr Kernel kKernels[] = {Kernel::kNaive, Kernel::kFlash, Kernel::kFlashBf16};

const char* name_of(Kernel k) {
  return k == Kernel::kNaive ? "naive" : k == Kernel::kFlash ? "flash" : "flash-bf16";
}

// f32 -> bf16 bit pattern, round to nearest even (finite inputs).
uint16_t to_bf16(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  return uint16_t((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

long maxrss_kb() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss;
}

std::vector<float> random_vec(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(rng);
  return v;
}

struct Inputs {
  std::vector<float> qkv, dout, out, dqkv;
  std::vector<uint16_t> qkv16;  // qkv rounded to bf16, for flash-bf16
  explicit Inputs(int64_t t)
      : qkv(random_vec(kB * t * (kNh + 2 * kNkv) * kHd, 1)),
        dout(random_vec(kB * t * kNh * kHd, 2)),
        out(size_t(kB * t * kNh * kHd), 0.0f),
        dqkv(qkv.size(), 0.0f) {
    qkv16.reserve(qkv.size());
    for (float x : qkv) qkv16.push_back(to_bf16(x));
  }
};

int64_t extra_floats(Kernel k, int64_t t) {
  switch (k) {
    case Kernel::kNaive:
      return kB * kNh * t * t + attention_backward_scratch(kB, t, kNh, kNkv, kHd);
    case Kernel::kFlash:
      return kB * kNh * t + flash_attention_backward_scratch(kB, t, kNh, kNkv, kHd);
    case Kernel::kFlashBf16:
      break;
  }
  return kB * kNh * t + flash_attention_backward_bf16_scratch(kB, t, kNh, kNkv, kHd);
}

// One forward + backward; the extra buffers allocated here (zero-filled: touched).
void run_once(Kernel k, int64_t t, Inputs& in, double* fwd_s, double* bwd_s) {
  if (k == Kernel::kFlashBf16) {
    std::vector<float> lse(size_t(kB * kNh * t), 0.0f);
    std::vector<float> scratch(size_t(flash_attention_backward_bf16_scratch(kB, t, kNh, kNkv, kHd)),
                               0.0f);
    const double t0 = now();
    flash_attention_forward_bf16(in.out.data(), lse.data(), in.qkv16.data(), kB, t, kNh, kNkv, kHd);
    const double t1 = now();
    flash_attention_backward_bf16(in.dqkv.data(), scratch.data(), in.dout.data(), in.qkv16.data(),
                                  in.out.data(), lse.data(), kB, t, kNh, kNkv, kHd);
    *fwd_s = t1 - t0;
    *bwd_s = now() - t1;
  } else if (k == Kernel::kFlash) {
    std::vector<float> lse(size_t(kB * kNh * t), 0.0f);
    std::vector<float> scratch(size_t(flash_attention_backward_scratch(kB, t, kNh, kNkv, kHd)),
                               0.0f);
    const double t0 = now();
    flash_attention_forward(in.out.data(), lse.data(), in.qkv.data(), kB, t, kNh, kNkv, kHd);
    const double t1 = now();
    flash_attention_backward(in.dqkv.data(), scratch.data(), in.dout.data(), in.qkv.data(),
                             in.out.data(), lse.data(), kB, t, kNh, kNkv, kHd);
    *fwd_s = t1 - t0;
    *bwd_s = now() - t1;
  } else {
    std::vector<float> probs(size_t(kB * kNh * t * t), 0.0f);
    std::vector<float> scratch(size_t(attention_backward_scratch(kB, t, kNh, kNkv, kHd)), 0.0f);
    const double t0 = now();
    attention_forward(in.out.data(), probs.data(), in.qkv.data(), kB, t, kNh, kNkv, kHd);
    const double t1 = now();
    attention_backward(in.dqkv.data(), scratch.data(), in.dout.data(), in.qkv.data(), probs.data(),
                       kB, t, kNh, kNkv, kHd);
    *fwd_s = t1 - t0;
    *bwd_s = now() - t1;
  }
}

// Child mode: print the growth of the peak RSS (KiB) over one forward + backward.
int rss_run(Kernel k, int64_t t) {
  Inputs in(t);
  const long before = maxrss_kb();
  double f = 0, b = 0;
  run_once(k, t, in, &f, &b);
  std::printf("rss_growth_kb %ld\n", maxrss_kb() - before);
  return 0;
}

double rss_growth_mb(const char* self, Kernel k, int64_t t) {
  const std::string cmd = std::string(self) + " --rss-run " + name_of(k) + " " + std::to_string(t);
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return -1.0;
  long kb = -1;
  char line[256];
  while (std::fgets(line, sizeof line, p) != nullptr) {
    if (std::strncmp(line, "rss_growth_kb ", 14) == 0) kb = std::atol(line + 14);
  }
  pclose(p);
  return kb < 0 ? -1.0 : double(kb) / 1024.0;
}

}  // namespace

int main(int argc, char** argv) {
  bool skip_naive_8192 = false, rss = true;
  bool run[3] = {true, true, true};  // by Kernel
  int reps = 3;
  std::vector<int64_t> ts = {512, 2048, 8192};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--rss-run" && i + 2 < argc) {
      const std::string k = argv[i + 1];
      return rss_run(k == "flash"        ? Kernel::kFlash
                     : k == "flash-bf16" ? Kernel::kFlashBf16
                                         : Kernel::kNaive,
                     std::atoll(argv[i + 2]));
    } else if (a == "--skip-naive-8192") {
      skip_naive_8192 = true;
    } else if (a == "--no-rss") {
      rss = false;
    } else if (a == "--reps" && i + 1 < argc) {
      reps = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--only" && i + 1 < argc) {
      const std::string k = argv[++i];
      for (Kernel kk : kKernels) run[int(kk)] = k == name_of(kk);
    } else if (a == "--t" && i + 1 < argc) {
      ts = {std::atoll(argv[++i])};
    } else {
      std::fprintf(stderr,
                   "usage: %s [--skip-naive-8192] [--no-rss] [--reps N] [--t T] "
                   "[--only naive|flash|flash-bf16]\n",
                   argv[0]);
      return 2;
    }
  }
  std::printf("causal attention f32, B=%lld nh=%lld nkv=%lld hd=%lld, %d threads\n", (long long)kB,
              (long long)kNh, (long long)kNkv, (long long)kHd, omp_get_max_threads());
  std::printf("%6s %10s %10s %10s %10s %9s %12s %12s\n", "T", "kernel", "fwd ms", "bwd ms",
              "fwd GF/s", "bwd GF/s", "extra MB", "RSS grow MB");
  for (int64_t t : ts) {
    Inputs in(t);
    // Causal FLOPs: fwd 2 products, bwd 5 (as counted for the naive algorithm), each
    // 2 * hd * t(t+1)/2 per head.
    const double prod = 2.0 * double(kHd) * double(t) * double(t + 1) / 2.0 * double(kB * kNh);
    for (Kernel k : kKernels) {
      if (!run[int(k)]) continue;
      if (k == Kernel::kNaive && t >= 8192 && skip_naive_8192) {
        std::printf("%6lld %10s %10s %10s %10s %9s %12.1f %12s\n", (long long)t, "naive", "skipped",
                    "skipped", "-", "-", double(extra_floats(k, t)) * 4.0 / 1e6, "-");
        continue;
      }
      const int n = t >= 8192 ? 1 : reps;
      double best_f = 1e30, best_b = 1e30;
      for (int r = 0; r < n; ++r) {
        double f = 0, b = 0;
        run_once(k, t, in, &f, &b);
        best_f = std::min(best_f, f);
        best_b = std::min(best_b, b);
      }
      const double rss_mb = rss ? rss_growth_mb(argv[0], k, t) : -1.0;
      char rss_s[32];
      if (rss_mb >= 0) {
        std::snprintf(rss_s, sizeof rss_s, "%.1f", rss_mb);
      } else {
        std::snprintf(rss_s, sizeof rss_s, "-");
      }
      std::printf("%6lld %10s %10.2f %10.2f %10.1f %9.1f %12.2f %12s\n", (long long)t, name_of(k),
                  best_f * 1e3, best_b * 1e3, 2.0 * prod / best_f / 1e9, 5.0 * prod / best_b / 1e9,
                  double(extra_floats(k, t)) * 4.0 / 1e6, rss_s);
      std::fflush(stdout);
    }
  }
  return 0;
}
