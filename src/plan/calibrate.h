// `strata plan --calibrate`: measures this machine through strata's own kernels and its real
// Comm, and writes a cluster profile (TOML) that `--cluster FILE` reads back, so that the
// performance model predicts step times here.
//
// What is measured (each rate per core, one thread, and the cores together):
//   GEMM      kernels::gemm (f32), gemm_bf16, and the f16 linear path, at training shapes
//             (2048 rows, 512..2048 columns), forward + both backward products
//   attention flash and naive causal attention, forward + backward (b 4, T 256, 8 heads of 64)
//   memory    a stream triad over 3 x 64 MB (bandwidth), and strata's memory-bound kernels
//             (norms, GELU, SwiGLU, residual adds, 16-bit conversion, cross-entropy, AdamW) with
//             the bytes plan/perf_terms.h counts: their ratio is the memory efficiency
//   comm      all_reduce, reduce_scatter, all_gather (4 KiB .. 64 MiB) and a ping-pong send
//             through MpiComm with >= 2 ranks; time = a + b * bytes fitted by least squares
//             (relative error), turned into the ring formulas' latency and bus bandwidth
//
// With more ranks than one on a machine, the ranks share its cores: the profile stores per-core
// rates, and the model gives a rank min(threads, cores / ranks on the node) cores.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "plan/cluster_profile.h"

namespace strata {

class Comm;

struct CalibrateOptions {
  std::string out = "calibrated.toml";  // the profile written
  // Ranks for the collective measurement when this process runs alone: it re-runs itself
  // under `mpirun -np ranks` (0 or 1: no collectives measured; a default shared-memory link).
  int ranks = 2;
  bool quick = false;  // fewer sizes and repetitions (tests)
  std::string name;    // the profile's name; empty: "calibrated-<host>"
};

// The CLI's entry point for `strata plan --calibrate [--out FILE]`: measures, prints a summary
// and writes options.out. Returns the exit status. Works alone (measures compute, then re-runs
// the same command line under mpirun for the collectives) and as rank r of a job started by
// mpirun/srun (rank 0 measures compute while the others sleep, then all measure collectives,
// and rank 0 writes). Call it before anything else parses the rest of the command line: the
// re-run ranks come back through it (STRATA_CALIBRATE_COMM in their environment).
int run_calibrate(const CalibrateOptions& options);

struct ComputeMeasurement {
  std::string cpu;  // model name
  std::string host;
  int64_t cores = 1;
  int64_t memory_bytes = 0;  // the node's
  // Per core (one thread), FLOP/s.
  double gemm_f32 = 0, gemm_bf16 = 0, gemm_fp16 = 0;
  double gemm_f32_all = 0;               // one process's OpenMP threads on all cores (median)
  double gemm_node = 0;                  // one single-threaded worker per core, together (f32)
  double flash_f32 = 0, flash_bf16 = 0;  // attention FLOP/s (the model's counting)
  double naive_seconds = 0, naive_flops = 0, naive_probs_bytes = 0;  // naive attention
  double stream_core = 0, stream_node = 0;                           // stream triad, bytes/s
  // strata's memory-bound kernels: perf_terms.h's bytes / time, one thread (best) and one
  // single-threaded worker per core together.
  double kernels_core = 0, kernels_node = 0;
  // Softmax + cross-entropy, one thread, bytes/s as perf_terms.h counts them: the fused kernel
  // (1024 x 8192 logits) and the vocabulary-parallel ones (1024 x 4096, tp = 2's share).
  double ce_fused = 0, ce_vocab_parallel = 0;
};
ComputeMeasurement measure_compute(bool quick);

struct CommPoint {
  double bytes = 0, seconds = 0;
};
struct CommMeasurement {
  int ranks = 0;
  std::array<OpCost, kNumCollectiveOps> ops{};  // fitted latency per step and bus bandwidth
  std::array<std::vector<CommPoint>, kNumCollectiveOps> points;  // median times per size
};
// Collective over `comm` (every rank calls it); rank 0's result holds the slowest rank's times.
CommMeasurement measure_collectives(Comm& comm, bool quick);
// Fits time = a + b * bytes (weights 1/time^2) and converts to the ring formula of `op` on n ranks.
OpCost fit_collective(CollectiveOp op, int n, const std::vector<CommPoint>& points);

// The profile of this machine: one node of `cores` ranks, device = this CPU, intra link "shm".
ClusterProfile calibrated_profile(const ComputeMeasurement& c, const CommMeasurement* comm,
                                  const std::string& name);
// TOML that parse_cluster_profile reads back (the measurements as comments).
std::string calibrated_profile_toml(const ClusterProfile& p, const ComputeMeasurement& c,
                                    const CommMeasurement* comm);

}  // namespace strata
