// Communication benchmark (run under mpirun, e.g. -np 2; see docs/COMM.md for the exact command):
//  1. Bus bandwidth of all_reduce, reduce_scatter, all_gather and broadcast through strata's Comm
//     (issue + wait, the progress engine doing the MPI work) next to the raw blocking MPI call on
//     the same preallocated buffers, 4 KB .. 64 MB, with the ratio. NCCL-tests definitions: size
//     is the full buffer (all_gather: the gathered output; reduce_scatter: the input), algbw =
//     size / time, busbw = algbw * 2(n-1)/n (all_reduce), algbw * (n-1)/n (reduce_scatter,
//     all_gather), algbw (broadcast). Time is the slowest rank's mean over a batch of
//     iterations, best of 3 batches (other load on a shared machine only adds time).
//  2. Overlap: a 32 MB all_reduce issued, then work sized to take about as long as the all_reduce
//     alone, then wait: comm alone, work alone, both, and the fraction of communication hidden =
//     (comm + work - both) / comm, for each poll policy. Two kinds of work: a GEMM-like loop on
//     the CPU, and a sleep (a caller waiting on a GPU kernel or I/O: the CPU left free).
// Options: --quick (fewer sizes and iterations), --poll <policy,...> (policies for part 2; the
// first one also runs part 1), --max-mb N (largest size of part 1), --overlap-only.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "comm/mpi_comm.h"
#include "comm/mpi_runtime.h"
#include "comm/progress_engine.h"

namespace {

using strata::CommOp;
using strata::DType;
using strata::MpiComm;
using strata::ReduceOp;

double cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Options {
  bool quick = false;
  bool overlap_only = false;
  int64_t max_bytes = int64_t{64} << 20;
  std::vector<std::string> polls = {"adaptive", "sleep:50", "yield", "spin"};
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") {
      o.quick = true;
    } else if (a == "--overlap-only") {
      o.overlap_only = true;
    } else if (a == "--max-mb" && i + 1 < argc) {
      o.max_bytes = std::atoll(argv[++i]) << 20;
    } else if (a == "--poll" && i + 1 < argc) {
      o.polls.clear();
      std::string list = argv[++i];
      for (size_t p = 0; p <= list.size();) {
        const size_t q = std::min(list.find(',', p), list.size());
        o.polls.push_back(list.substr(p, q - p));
        p = q + 1;
      }
    } else {
      std::fprintf(
          stderr, "usage: bench_comm [--quick] [--poll p1,p2,...] [--max-mb N] [--overlap-only]\n");
      std::exit(2);
    }
  }
  return o;
}

// The slowest rank's value: a collective is as fast as its last rank.
double max_over_ranks(double v) {
  double m = 0;
  MPI_Allreduce(&v, &m, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return m;
}

// Mean seconds per call of fn over iters calls (after warmup), the slowest rank's; the best of
// `repeats` such batches, since other processes on a shared machine only ever add time.
double time_per_call(const std::function<void()>& fn, int iters, int warmup, int repeats = 3) {
  for (int i = 0; i < warmup; ++i) fn();
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = now();
    for (int i = 0; i < iters; ++i) fn();
    best = std::min(best, max_over_ranks((now() - t0) / iters));
  }
  return best;
}

// Buffers for every size, allocated and touched once (first touch of fresh memory is slow).
struct Buffers {
  std::vector<float> a, b;
  explicit Buffers(int64_t bytes)
      : a(static_cast<size_t>(bytes / 4), 1.0f), b(static_cast<size_t>(bytes / 4), 1.0f) {}
};

struct OpBench {
  CommOp op;
  double bus_factor;                  // busbw / algbw
  std::function<void(int64_t)> comm;  // size in bytes: issue through Comm and wait
  std::function<void(int64_t)> raw;   // the same through the blocking MPI call
};

void bandwidth_table(MpiComm& comm, MPI_Comm raw_comm, Buffers& buf, const Options& opt) {
  const int n = comm.size();
  const double nf = n;
  float* a = buf.a.data();
  float* b = buf.b.data();
  std::vector<OpBench> ops = {
      {CommOp::all_reduce, 2 * (nf - 1) / nf,
       [&](int64_t bytes) { comm.all_reduce(a, bytes / 4, DType::f32, ReduceOp::sum)->wait(); },
       [&](int64_t bytes) {
         MPI_Allreduce(MPI_IN_PLACE, a, static_cast<int>(bytes / 4), MPI_FLOAT, MPI_SUM, raw_comm);
       }},
      {CommOp::reduce_scatter, (nf - 1) / nf,
       [&](int64_t bytes) {
         comm.reduce_scatter(a, b, bytes / 4 / n, DType::f32, ReduceOp::sum)->wait();
       },
       [&](int64_t bytes) {
         MPI_Reduce_scatter_block(a, b, static_cast<int>(bytes / 4 / n), MPI_FLOAT, MPI_SUM,
                                  raw_comm);
       }},
      {CommOp::all_gather, (nf - 1) / nf,
       [&](int64_t bytes) { comm.all_gather(a, b, bytes / 4 / n, DType::f32)->wait(); },
       [&](int64_t bytes) {
         const int c = static_cast<int>(bytes / 4 / n);
         MPI_Allgather(a, c, MPI_FLOAT, b, c, MPI_FLOAT, raw_comm);
       }},
      {CommOp::broadcast, 1.0,
       [&](int64_t bytes) { comm.broadcast(a, bytes / 4, DType::f32, 0)->wait(); },
       [&](int64_t bytes) { MPI_Bcast(a, static_cast<int>(bytes / 4), MPI_FLOAT, 0, raw_comm); }},
  };
  if (comm.rank() == 0) {
    std::printf("\n## Bus bandwidth, %d ranks, f32, poll policy %s (GB/s = 1e9 B/s)\n", n,
                strata::comm::ProgressEngine::get().poll_policy().describe().c_str());
    std::printf("%-15s %10s %12s %12s %12s %12s %7s\n", "op", "size", "comm us", "comm busbw",
                "raw us", "raw busbw", "ratio");
  }
  for (const OpBench& ob : ops) {
    for (int64_t bytes = 4096; bytes <= opt.max_bytes; bytes *= opt.quick ? 16 : 4) {
      // A few tens of ms of work per batch, at least 3 iterations.
      const int64_t budget = opt.quick ? (int64_t{32} << 20) : (int64_t{128} << 20);
      const int iters = static_cast<int>(std::clamp<int64_t>(budget / bytes, 3, 1000));
      const int warmup = std::max(1, iters / 10);
      const double t_comm = time_per_call([&] { ob.comm(bytes); }, iters, warmup);
      const double t_raw = time_per_call([&] { ob.raw(bytes); }, iters, warmup);
      const double bus_comm = static_cast<double>(bytes) / t_comm * ob.bus_factor / 1e9;
      const double bus_raw = static_cast<double>(bytes) / t_raw * ob.bus_factor / 1e9;
      if (comm.rank() == 0) {
        const std::string size = bytes >= (1 << 20) ? std::to_string(bytes >> 20) + " MB"
                                                    : std::to_string(bytes >> 10) + " KB";
        std::printf("%-15s %10s %12.1f %12.2f %12.1f %12.2f %7.2f\n", strata::comm_op_name(ob.op),
                    size.c_str(), t_comm * 1e6, bus_comm, t_raw * 1e6, bus_raw, bus_comm / bus_raw);
        std::fflush(stdout);
      }
    }
  }
}

// A GEMM-like compute loop: repeated 64x64x64 products on cache-resident matrices, so that it
// competes with communication for the CPU but not for memory bandwidth.
struct Compute {
  static constexpr int kN = 64;
  std::vector<float> A = std::vector<float>(kN * kN, 0.5f), B = std::vector<float>(kN * kN, 0.25f),
                     C = std::vector<float>(kN * kN, 0.0f);
  void run(int64_t products) {
    for (int64_t p = 0; p < products; ++p) {
      for (int i = 0; i < kN; ++i)
        for (int k = 0; k < kN; ++k) {
          const float aik = A[i * kN + k];
          for (int j = 0; j < kN; ++j) C[i * kN + j] += aik * B[k * kN + j];
        }
      A[p % (kN * kN)] = C[(p * 7) % (kN * kN)] * 1e-6f;  // a dependency: no loop is dead
    }
  }
};

double best(const std::vector<double>& v) {
  return *std::min_element(v.begin(), v.end());
}

void overlap_demo(MpiComm& comm, MPI_Comm raw_comm, Buffers& buf, const Options& opt) {
  const int64_t count = (int64_t{32} << 20) / 4;  // 32 MB of f32
  float* a = buf.a.data();
  auto& engine = strata::comm::ProgressEngine::get();
  Compute compute;
  const int reps = opt.quick ? 3 : 7;

  // Calibrate: products per second of this rank's compute alone (the best of a few short runs,
  // as other load only slows it down); rank 0's count is used by all.
  compute.run(200);
  double products_per_s = 0;
  for (int i = 0; i < 5; ++i) {
    const double t0 = now();
    compute.run(500);
    products_per_s = std::max(products_per_s, 500 / (now() - t0));
  }

  const double t_raw = time_per_call(
      [&] {
        MPI_Allreduce(MPI_IN_PLACE, a, static_cast<int>(count), MPI_FLOAT, MPI_SUM, raw_comm);
      },
      1, 1, reps);
  if (comm.rank() == 0) {
    std::printf("\n## Overlap: 32 MB f32 all_reduce issued, then compute, then wait; %d ranks\n",
                comm.size());
    std::printf("raw blocking MPI_Allreduce of 32 MB: %.2f ms\n", t_raw * 1e3);
    std::printf("%-8s %-16s %9s %9s %9s %9s %9s %8s %11s\n", "work", "poll policy", "comm ms",
                "comm cpu", "work ms", "both ms", "ideal ms", "hidden", "exposed ms");
  }
  // gemm: 64x64x64 products on one core, cache resident (competes for the CPU, not memory);
  // sleep: the thread sleeps, like a caller waiting on a GPU kernel or I/O (leaves the CPU free).
  for (const char* kind : {"gemm", "sleep"}) {
    for (const std::string& policy : opt.polls) {
      engine.set_poll_policy(strata::comm::PollPolicy::parse(policy));
      auto all_reduce = [&] { return comm.all_reduce(a, count, DType::f32, ReduceOp::sum); };
      const double t_comm_est = time_per_call([&] { all_reduce()->wait(); }, 1, 1);
      // Compute sized to take as long as the all_reduce alone (the best case for hiding it).
      int64_t products = static_cast<int64_t>(t_comm_est * products_per_s);
      double sleep_s = t_comm_est;
      MPI_Bcast(&products, 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
      MPI_Bcast(&sleep_s, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
      auto work = [&] {
        if (kind[0] == 'g')
          compute.run(products);
        else
          std::this_thread::sleep_for(std::chrono::duration<double>(sleep_s));
      };
      std::vector<double> tc, tx, tb, exposed, cpu;
      for (int r = 0; r < reps; ++r) {
        // The process's CPU time while the caller only waits: the comm thread's own work.
        const double cpu0 = cpu_seconds();
        tc.push_back(time_per_call([&] { all_reduce()->wait(); }, 1, 0, 1));
        cpu.push_back(max_over_ranks(cpu_seconds() - cpu0));
        tx.push_back(time_per_call(work, 1, 0, 1));
        comm.reset_stats();
        tb.push_back(time_per_call(
            [&] {
              strata::WorkHandle w = all_reduce();
              work();
              w->wait();
            },
            1, 0, 1));
        exposed.push_back(max_over_ranks(comm.stats()[CommOp::all_reduce].wait_seconds));
      }
      const double c = best(tc), x = best(tx), b = best(tb);
      const double hidden = (c + x - b) / c;
      if (comm.rank() == 0) {
        std::printf("%-8s %-16s %9.2f %9.2f %9.2f %9.2f %9.2f %7.0f%% %11.2f\n", kind,
                    policy.c_str(), c * 1e3, best(cpu) * 1e3, x * 1e3, b * 1e3,
                    std::max(c, x) * 1e3, 100 * hidden, best(exposed) * 1e3);
        std::fflush(stdout);
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  strata::MpiSession mpi(&argc, &argv);
  const Options opt = parse(argc, argv);
  std::unique_ptr<MpiComm> comm = MpiComm::dup_world("bench");
  MPI_Comm raw_comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &raw_comm);
  Buffers buf(std::max<int64_t>(opt.max_bytes, int64_t{32} << 20));
  if (comm->rank() == 0) {
    const char* tunables = std::getenv("GLIBC_TUNABLES");
    std::printf("# bench_comm: %d ranks, OMP_NUM_THREADS=%s, GLIBC_TUNABLES=%s\n", comm->size(),
                std::getenv("OMP_NUM_THREADS") ? std::getenv("OMP_NUM_THREADS") : "unset",
                tunables ? tunables : "unset");
  }
  strata::comm::ProgressEngine::get().set_poll_policy(
      strata::comm::PollPolicy::parse(opt.polls.front()));
  if (!opt.overlap_only) bandwidth_table(*comm, raw_comm, buf, opt);
  overlap_demo(*comm, raw_comm, buf, opt);
  MPI_Comm_free(&raw_comm);
  comm.reset();
  return 0;
}
