// GEMM backend measurement on the shapes of training: for each (rows, in -> out) linear layer and
// each of its three products (forward y = x w^T: N,T; backward dx = dy w: N,N; backward
// dw += dy^T x: T,N), GFLOP/s of oneDNN dnnl_sgemm, the oneDNN matmul primitive, OpenBLAS
// cblas_sgemm (gemm_openblas.cc) and strata's gemm().
// Run with OMP_NUM_THREADS set to the cores to use. Options: --quick (rows 1024 only, fewer
// repetitions), --pad N (add N floats to every leading dimension, to look for stride effects),
// --cpu (time by CPU time instead of wall clock, see seconds_now), --shape IN OUT (one shape),
// --rows N (one row count).
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <string>
#include <vector>

#include "kernels/cpu/gemm_backends.h"
#include "kernels/cpu/kernels.h"

namespace {

using GemmFn = std::function<void(bool, bool, int64_t, int64_t, int64_t, float, const float*,
                                  int64_t, const float*, int64_t, float, float*, int64_t)>;

struct Backend {
  std::string name;
  GemmFn fn;
};

// Wall clock, or with --cpu the process's CPU time divided by the thread count: on a shared
// machine the latter ignores time the threads spent preempted (use it with OMP_NUM_THREADS=1
// for the cleanest per-core comparison; with more threads, spinning at barriers counts).
bool g_cpu_time = false;
double seconds_now() {
  if (g_cpu_time) {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec)) / omp_get_max_threads();
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  int64_t pad = 0, only_in = 0, only_out = 0, only_rows = 0;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--quick")) quick = true;
    if (!std::strcmp(argv[i], "--cpu")) g_cpu_time = true;
    if (!std::strcmp(argv[i], "--rows") && i + 1 < argc) only_rows = std::atoll(argv[++i]);
    if (!std::strcmp(argv[i], "--shape") && i + 2 < argc) {
      only_in = std::atoll(argv[++i]);
      only_out = std::atoll(argv[++i]);
    }
    if (!std::strcmp(argv[i], "--pad") && i + 1 < argc) pad = std::atoll(argv[++i]);
  }
  std::vector<Backend> backends = {
      {"dnnl_sgemm", strata::kernels::detail::gemm_dnnl_sgemm},
      {"dnnl_matmul", strata::kernels::detail::gemm_dnnl_matmul},
      {"dnnl_tiled", strata::kernels::detail::gemm_dnnl_sgemm_tiled},
  };
  if (const auto& ob = strata::kernels::detail::openblas(); ob.sgemm) {
    std::printf("OpenBLAS core: %s\n", ob.core.c_str());
    backends.push_back({"openblas", strata::kernels::detail::gemm_openblas});
    // OpenBLAS's own threading (what gemm_openblas's fixed tiles replace), for the comparison.
    backends.push_back({"openblas_own", strata::kernels::detail::openblas_sgemm});
  } else {
    std::printf("skipping OpenBLAS: %s\n", ob.why_not.c_str());
  }
  std::printf("strata's gemm(): %s\n", strata::kernels::describe_gemm_backend().c_str());
  backends.push_back({"strata(" + strata::kernels::gemm_backend() + ")", strata::kernels::gemm});

  struct Shape {
    int64_t in, out;
  };
  const std::vector<Shape> shapes = {{768, 768},   {768, 2304}, {768, 3072}, {3072, 768},
                                     {768, 50304}, {256, 768},  {256, 8192}};
  std::vector<int64_t> row_counts =
      quick ? std::vector<int64_t>{1024} : std::vector<int64_t>{1024, 2048};
  if (only_rows) row_counts = {only_rows};
  std::printf("threads %d, pad %ld, timing by %s\n", omp_get_max_threads(), static_cast<long>(pad),
              g_cpu_time ? "CPU time / threads" : "wall clock");
  std::printf("%-5s %-12s %-9s", "rows", "in->out", "op");
  for (const auto& be : backends) std::printf(" %14s", be.name.c_str());
  std::printf("   GFLOP/s\n");

  std::vector<double> total_time(backends.size(), 0.0);
  double total_flops = 0.0, best_rate = 0.0;
  std::string best_name;
  for (int64_t rows : row_counts) {
    for (const Shape& s : shapes) {
      if (only_in && (s.in != only_in || s.out != only_out)) continue;
      // x[rows,in], w[out,in], y[rows,out] (and their gradients, same shapes).
      const int64_t ldx = s.in + pad, ldw = s.in + pad, ldy = s.out + pad;
      std::vector<float> x(rows * ldx), w(s.out * ldw), y(rows * ldy);
      for (size_t i = 0; i < x.size(); ++i) x[i] = float((i * 7919) % 1000) * 1e-3f - 0.5f;
      for (size_t i = 0; i < w.size(); ++i) w[i] = float((i * 104729) % 1000) * 1e-3f - 0.5f;
      for (size_t i = 0; i < y.size(); ++i) y[i] = float((i * 31) % 1000) * 1e-3f - 0.5f;
      std::vector<float> out_y(rows * ldy), out_x(rows * ldx), out_w(s.out * ldw);
      struct Op {
        const char* name;
        bool ta, tb;
        int64_t m, n, k;
        const float* a;
        int64_t lda;
        const float* b;
        int64_t ldb;
        float beta;
        float* c;
        int64_t ldc;
      };
      const Op ops[] = {
          {"fwd N,T", false, true, rows, s.out, s.in, x.data(), ldx, w.data(), ldw, 0.0f,
           out_y.data(), ldy},
          {"dx N,N", false, false, rows, s.in, s.out, y.data(), ldy, w.data(), ldw, 0.0f,
           out_x.data(), ldx},
          {"dw T,N", true, false, s.out, s.in, rows, y.data(), ldy, x.data(), ldx, 1.0f,
           out_w.data(), ldw},
      };
      for (const Op& op : ops) {
        const double flops = 2.0 * double(op.m) * double(op.n) * double(op.k);
        // Enough repetitions for ~0.1 s (quick) or 0.25 s per backend at 200 GFLOP/s, at least 3.
        const int reps = std::max(3, int((quick ? 0.1 : 0.25) * 200e9 / flops));
        std::printf("%-5ld %5ld->%-5ld %-9s", long(rows), long(s.in), long(s.out), op.name);
        // Backends take turns within each round, so that a slow spell of the (shared, virtual)
        // machine hits all of them alike; each keeps its best round.
        std::vector<double> best(backends.size(), 1e30);
        for (const auto& be : backends)  // warm-up: primitive creation, page faults
          be.fn(op.ta, op.tb, op.m, op.n, op.k, 1.0f, op.a, op.lda, op.b, op.ldb, op.beta, op.c,
                op.ldc);
        for (int r = 0; r < reps; ++r) {
          for (size_t bi = 0; bi < backends.size(); ++bi) {
            const double t0 = seconds_now();
            backends[bi].fn(op.ta, op.tb, op.m, op.n, op.k, 1.0f, op.a, op.lda, op.b, op.ldb,
                            op.beta, op.c, op.ldc);
            const double dt = seconds_now() - t0;
            best[bi] = std::min(best[bi], dt);
            total_time[bi] += dt / reps;
          }
        }
        for (size_t bi = 0; bi < backends.size(); ++bi) {
          const double rate = flops / best[bi] * 1e-9;
          if (rate > best_rate) {
            best_rate = rate;
            best_name = backends[bi].name;
          }
          std::printf(" %14.1f", rate);
        }
        total_flops += flops;
        std::printf("\n");
        std::fflush(stdout);
      }
    }
  }
  std::printf("\noverall (total flops / total mean time):");
  for (size_t bi = 0; bi < backends.size(); ++bi)
    std::printf(" %s %.1f", backends[bi].name.c_str(), total_flops / total_time[bi] * 1e-9);
  std::printf(" GFLOP/s\nf32 GEMM peak: %.1f GFLOP/s (%s)\n", best_rate, best_name.c_str());
  return 0;
}
