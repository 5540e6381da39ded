// The measurements of `strata plan --calibrate` (calibrate.h): compute through strata's kernels,
// collectives through the real Comm.
#include "plan/calibrate.h"

#include <omp.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "comm/comm.h"
#include "core/dtype.h"
#include "core/error.h"
#include "kernels/cpu/flash_attention.h"
#include "kernels/cpu/kernels.h"
#include "plan/perf_terms.h"
#include "run/config.h"

namespace strata {

namespace k = kernels;

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0 : (n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]));
}

// Best time of `reps` runs of f after one warm-up run: on a shared machine, other load only
// adds time, and the quiet machine is what a profile describes.
double time_best(int reps, const std::function<void()>& f) {
  f();
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    const double t0 = now_s();
    f();
    best = std::min(best, now_s() - t0);
  }
  return best;
}

std::vector<float> filled(int64_t n, float scale) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    v[static_cast<size_t>(i)] = scale * static_cast<float>((i * 7919) % 1000 - 500) / 500.0f;
  return v;
}

std::vector<uint16_t> lowp(DType t, const std::vector<float>& x) {
  std::vector<uint16_t> y(x.size());
  k::to_lowp(t, y.data(), x.data(), static_cast<int64_t>(x.size()));
  return y;
}

struct Shape {
  int64_t in, out;
};

// Forward + dx + dw of a linear layer of `rows` rows: FLOP/s, the median over the shapes.
double gemm_rate(Precision precision, int64_t rows, const std::vector<Shape>& shapes, int reps) {
  std::vector<double> rates;
  for (const Shape& s : shapes) {
    const int64_t n = rows, in = s.in, out = s.out;
    std::vector<float> x = filled(n * in, 1), w = filled(out * in, 0.02f),
                       y(static_cast<size_t>(n * out)), dy = filled(n * out, 0.01f),
                       dx(static_cast<size_t>(n * in)), dw(static_cast<size_t>(out * in));
    std::function<void()> step;
    std::vector<uint16_t> x16, w16, dy16, dy_scratch;
    std::vector<float> wide;
    if (precision == Precision::f32) {
      step = [&] {
        k::gemm(false, true, n, out, in, 1.0f, x.data(), in, w.data(), in, 0.0f, y.data(), out);
        k::gemm(false, false, n, in, out, 1.0f, dy.data(), out, w.data(), in, 0.0f, dx.data(), in);
        k::gemm(true, false, out, in, n, 1.0f, dy.data(), out, x.data(), in, 1.0f, dw.data(), in);
      };
    } else if (precision == Precision::bf16) {
      x16 = lowp(DType::bf16, x);
      w16 = lowp(DType::bf16, w);
      dy16 = lowp(DType::bf16, dy);
      step = [&] {
        k::gemm_bf16(false, true, n, out, in, 1.0f, x16.data(), in, w16.data(), in, 0.0f, y.data(),
                     out);
        k::gemm_bf16(false, false, n, in, out, 1.0f, dy16.data(), out, w16.data(), in, 0.0f,
                     dx.data(), in);
        k::gemm_bf16(true, false, out, in, n, 1.0f, dy16.data(), out, x16.data(), in, 1.0f,
                     dw.data(), in);
      };
    } else {  // fp16: no f16 GEMM on this CPU; the linear path widens operands to f32
      x16 = lowp(DType::f16, x);
      w16 = lowp(DType::f16, w);
      dy_scratch.resize(static_cast<size_t>(n * out));
      wide.resize(static_cast<size_t>(k::lowp_f32_scratch(n, in, out, n * out)));
      step = [&] {
        k::linear_forward_lowp(DType::f16, y.data(), x16.data(), w16.data(), nullptr, n, in, out,
                               wide.data());
        k::linear_backward_lowp(DType::f16, dx.data(), dw.data(), nullptr, dy.data(),
                                dy_scratch.data(), n * out, x16.data(), w16.data(), n, in, out,
                                wide.data());
      };
    }
    const double t = time_best(reps, step);
    rates.push_back(6.0 * static_cast<double>(n * in * out) / t);
  }
  return median(rates);
}

// Causal attention FLOPs of the forward as the model counts them (perf_model.cc).
double attention_forward_flops(int64_t b, int64_t t, int64_t nh, int64_t hd) {
  return 2.0 * static_cast<double>(b * nh * hd) * static_cast<double>(t) *
         static_cast<double>(t + 1);
}

// Stream triad a = b + s c over `n` floats: bytes/s.
double stream_triad(int64_t n, int threads, int reps) {
  std::vector<float> a(static_cast<size_t>(n)), b(static_cast<size_t>(n)),
      c(static_cast<size_t>(n));
  float* pa = a.data();
  const float* pb = b.data();
  const float* pc = c.data();
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    a[static_cast<size_t>(i)] = 0;
    b[static_cast<size_t>(i)] = 1;
    c[static_cast<size_t>(i)] = 2;
  }
  const double t = time_best(reps, [&] {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t i = 0; i < n; ++i) pa[i] = pb[i] + 0.5f * pc[i];
  });
  return 12.0 * static_cast<double>(n) / t;
}

std::string read_first(const char* path, const std::string& key) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(key, 0) == 0) {
      const size_t colon = line.find(':');
      if (colon == std::string::npos) continue;
      size_t b = line.find_first_not_of(" \t", colon + 1);
      return b == std::string::npos ? "" : line.substr(b);
    }
  return "";
}

// strata's memory-bound kernels at training shapes, each item with the bytes perf_terms.h counts
// for it. (Cross-entropy runs on its own output after the first time: the same work.)
class KernelMix {
 public:
  // Not copyable: the kernels' closures point at this object's buffers.
  KernelMix(const KernelMix&) = delete;
  KernelMix& operator=(const KernelMix&) = delete;
  explicit KernelMix(int64_t rows) : n_(rows) {
    using namespace perf;
    const int64_t n = n_, c = c_, f = f_, v = v_, params = params_;
    x_ = filled(n * c, 1);
    y_.resize(static_cast<size_t>(n * c));
    w_ = filled(c, 1);
    bias_ = filled(c, 0.1f);
    mean_.resize(static_cast<size_t>(n));
    rstd_.resize(static_cast<size_t>(n));
    dx_.resize(static_cast<size_t>(n * c));
    dw_.resize(static_cast<size_t>(c));
    db_.resize(static_cast<size_t>(c));
    pre_ = filled(n * 2 * f, 1);
    act_.resize(static_cast<size_t>(n * f));
    dact_ = filled(n * f, 0.1f);
    dpre_.resize(static_cast<size_t>(n * 2 * f));
    logits_ = filled(n * v, 2);
    losses_.resize(static_cast<size_t>(n));
    p_ = filled(params, 0.1f);
    g_ = filled(params, 0.01f);
    m_.assign(static_cast<size_t>(params), 0.0f);
    v2_.assign(static_cast<size_t>(params), 0.0f);
    x16_.resize(static_cast<size_t>(n * f));
    targets_.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
      targets_[static_cast<size_t>(i)] = static_cast<int32_t>((i * 31) % v);
    const double NC = static_cast<double>(n * c), NF = static_cast<double>(n * f);
    add(kNormForward * NC, [this] {
      k::layernorm_forward(y_.data(), mean_.data(), rstd_.data(), x_.data(), w_.data(),
                           bias_.data(), n_, c_, 1e-5f);
    });
    add(kNormBackward * NC, [this] {
      k::layernorm_backward(dx_.data(), dw_.data(), db_.data(), y_.data(), x_.data(), w_.data(),
                            mean_.data(), rstd_.data(), n_, c_);
    });
    add(kResidualAdd * NC, [this] { k::add_inplace(y_.data(), x_.data(), n_ * c_); });
    add(kGeluForward * NF, [this] { k::gelu_forward(act_.data(), pre_.data(), n_ * f_); });
    add(kGeluBackward * NF,
        [this] { k::gelu_backward(dpre_.data(), pre_.data(), dact_.data(), n_ * f_); });
    add(kSwigluForward * NF, [this] { k::swiglu_forward(act_.data(), pre_.data(), n_, f_); });
    add(kSwigluBackward * NF,
        [this] { k::swiglu_backward(dpre_.data(), pre_.data(), dact_.data(), n_, f_); });
    add(kToLowp * NF, [this] { k::to_lowp(DType::bf16, x16_.data(), act_.data(), n_ * f_); });
    add(kCrossEntropy * static_cast<double>(n * v), [this] {
      k::cross_entropy_forward_backward(losses_.data(), logits_.data(), targets_.data(), n_, v_,
                                        1.0f / static_cast<float>(n_));
    });
    add(kAdamW * static_cast<double>(params), [this] {
      k::adamw_update(p_.data(), g_.data(), m_.data(), v2_.data(), params_, 1e-3f, 0.9f, 0.95f,
                      1e-8f, 0.1f, 1.0f, 1);
    });
  }
  // bytes / s with each kernel's best time (threads: omp_get_max_threads()).
  double best_rate(int reps) {
    double bytes = 0, seconds = 0;
    for (auto& [b, fn] : items_) {
      bytes += b;
      seconds += time_best(reps, fn);
    }
    return bytes / seconds;
  }
  // Runs every kernel once; returns the bytes.
  double run_once() {
    double bytes = 0;
    for (auto& [b, fn] : items_) {
      fn();
      bytes += b;
    }
    return bytes;
  }

 private:
  void add(double bytes, std::function<void()> fn) { items_.emplace_back(bytes, std::move(fn)); }
  int64_t n_, c_ = 512, f_ = 2048, v_ = 8192, params_ = int64_t{4} << 20;
  std::vector<float> x_, y_, w_, bias_, mean_, rstd_, dx_, dw_, db_, pre_, act_, dact_, dpre_,
      logits_, losses_, p_, g_, m_, v2_;
  std::vector<uint16_t> x16_;
  std::vector<int32_t> targets_;
  std::vector<std::pair<double, std::function<void()>>> items_;
};

// One f32 linear layer (forward, dx, dw) of 1024 rows, 512 -> 1536: returns its FLOPs.
class GemmWork {
 public:
  GemmWork()
      : x_(filled(n_ * in_, 1)),
        w_(filled(out_ * in_, 0.02f)),
        y_(static_cast<size_t>(n_ * out_)),
        dy_(filled(n_ * out_, 0.01f)),
        dx_(static_cast<size_t>(n_ * in_)),
        dw_(static_cast<size_t>(out_ * in_)) {}
  double run_once() {
    k::gemm(false, true, n_, out_, in_, 1.0f, x_.data(), in_, w_.data(), in_, 0.0f, y_.data(),
            out_);
    k::gemm(false, false, n_, in_, out_, 1.0f, dy_.data(), out_, w_.data(), in_, 0.0f, dx_.data(),
            in_);
    k::gemm(true, false, out_, in_, n_, 1.0f, dy_.data(), out_, x_.data(), in_, 1.0f, dw_.data(),
            in_);
    return 6.0 * static_cast<double>(n_ * in_ * out_);
  }

 private:
  int64_t n_ = 1024, in_ = 512, out_ = 1536;
  std::vector<float> x_, w_, y_, dy_, dx_, dw_;
};

// What `workers` single-threaded workers deliver together over `seconds` (each builds its own
// Work and calls run_once, which returns the work done): the node's throughput as the other
// processes on it leave it, averaged over the window.
template <typename Work, typename Make>
double concurrent_rate(int workers, double seconds, Make make) {
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<double> done(static_cast<size_t>(workers), 0.0);
  std::vector<double> end(static_cast<size_t>(workers), 0.0);
  double start = 0;
  std::vector<std::thread> threads;
  for (int w = 0; w < workers; ++w) {
    threads.emplace_back([&, w] {
      omp_set_num_threads(1);
      Work work = make();
      work.run_once();  // warm-up
      ready.fetch_add(1);
      while (!go.load()) std::this_thread::yield();
      const double deadline = start + seconds;
      double sum = 0;
      while (now_s() < deadline) sum += work.run_once();
      done[static_cast<size_t>(w)] = sum;
      end[static_cast<size_t>(w)] = now_s();
    });
  }
  while (ready.load() < workers) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  start = now_s();
  go.store(true);
  for (std::thread& t : threads) t.join();
  double total = 0, last = start;
  for (int w = 0; w < workers; ++w) {
    total += done[static_cast<size_t>(w)];
    last = std::max(last, end[static_cast<size_t>(w)]);
  }
  return total / (last - start);
}

}  // namespace

ComputeMeasurement measure_compute(bool quick) {
  using namespace perf;
  ComputeMeasurement m;
  // mpirun binds each rank to one core by default: take every core this process may use (a
  // cpuset still limits it), so that "all cores" means the machine's.
  cpu_set_t before;
  CPU_ZERO(&before);
  const bool had_mask = ::sched_getaffinity(0, sizeof before, &before) == 0;
  {
    cpu_set_t all;
    CPU_ZERO(&all);
    const long online = ::sysconf(_SC_NPROCESSORS_ONLN);
    for (long c = 0; c < online && c < CPU_SETSIZE; ++c) CPU_SET(static_cast<int>(c), &all);
    ::sched_setaffinity(0, sizeof all, &all);  // best effort
    cpu_set_t now;
    CPU_ZERO(&now);
    m.cores = ::sched_getaffinity(0, sizeof now, &now) == 0 ? CPU_COUNT(&now)
                                                            : std::max(1, omp_get_num_procs());
  }
  m.cpu = read_first("/proc/cpuinfo", "model name");
  if (m.cpu.empty()) m.cpu = "cpu";
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) == 0) m.host = host;
  m.memory_bytes = std::atoll(read_first("/proc/meminfo", "MemTotal").c_str()) * 1024;
  const int reps = quick ? 2 : 5;
  const int64_t rows = quick ? 1024 : 2048;
  const std::vector<Shape> shapes =
      quick ? std::vector<Shape>{{512, 1536}, {2048, 512}}
            : std::vector<Shape>{{512, 1536}, {512, 512}, {512, 2048}, {2048, 512}};
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  m.gemm_f32 = gemm_rate(Precision::f32, rows, shapes, reps);
  m.gemm_bf16 = gemm_rate(Precision::bf16, rows, shapes, reps);
  m.gemm_fp16 = gemm_rate(Precision::fp16, rows, shapes, reps);

  // Attention, b 4, T 256, 8 heads of 64 (flash: FlashAttention-2's 2.5x backward counting).
  {
    const int64_t b = 4, t = 256, nh = 8, hd = 64, n = b * t, width = 3 * nh * hd;
    std::vector<float> qkv = filled(n * width, 0.5f), out(static_cast<size_t>(n * nh * hd)),
                       dout = filled(n * nh * hd, 0.1f), dqkv(static_cast<size_t>(n * width)),
                       lse(static_cast<size_t>(b * nh * t)),
                       probs(static_cast<size_t>(b * nh * t * t)),
                       scratch(static_cast<size_t>(
                           std::max(k::flash_attention_backward_scratch(b, t, nh, nh, hd),
                                    k::attention_backward_scratch(b, t, nh, nh, hd))));
    const double f = attention_forward_flops(b, t, nh, hd);
    const double flash_t = time_best(reps, [&] {
      k::flash_attention_forward(out.data(), lse.data(), qkv.data(), b, t, nh, nh, hd);
      k::flash_attention_backward(dqkv.data(), scratch.data(), dout.data(), qkv.data(), out.data(),
                                  lse.data(), b, t, nh, nh, hd);
    });
    m.flash_f32 = 3.5 * f / flash_t;
    const double naive_t = time_best(reps, [&] {
      k::attention_forward(out.data(), probs.data(), qkv.data(), b, t, nh, nh, hd);
      k::attention_backward(dqkv.data(), scratch.data(), dout.data(), qkv.data(), probs.data(), b,
                            t, nh, nh, hd);
    });
    const std::vector<uint16_t> qkv16 = lowp(DType::bf16, qkv);
    std::vector<float> scratch16(
        static_cast<size_t>(k::flash_attention_backward_bf16_scratch(b, t, nh, nh, hd)));
    const double bf16_t = time_best(reps, [&] {
      k::flash_attention_forward_bf16(out.data(), lse.data(), qkv16.data(), b, t, nh, nh, hd);
      k::flash_attention_backward_bf16(dqkv.data(), scratch16.data(), dout.data(), qkv16.data(),
                                       out.data(), lse.data(), b, t, nh, nh, hd);
    });
    m.flash_bf16 = 3.5 * f / bf16_t;
    // Naive: the model counts its probabilities' traffic as memory-bound bytes, the rest as
    // FLOPs; calibrated_profile splits the time the same way.
    const double scores = static_cast<double>(b * nh) * static_cast<double>(t * (t + 1)) / 2;
    m.naive_seconds = naive_t;
    m.naive_flops = 3.0 * f;
    m.naive_probs_bytes = (kAttentionProbsForward + kAttentionProbsBackward) * scores;
  }

  // Memory: stream triad, and strata's memory-bound kernels with perf_terms' byte counts.
  const int64_t stream_n = quick ? (int64_t{8} << 20) : (int64_t{16} << 20);
  m.stream_core = stream_triad(stream_n, 1, reps);
  m.stream_node = stream_triad(stream_n, static_cast<int>(m.cores), reps);
  m.kernels_core = KernelMix(1024).best_rate(reps);
  {
    const int64_t n = 1024, v = 8192, vl = 4096;
    std::vector<float> logits = filled(n * v, 2), losses(static_cast<size_t>(n)),
                       stats(static_cast<size_t>(3 * n));
    std::vector<int32_t> targets(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
      targets[static_cast<size_t>(i)] = static_cast<int32_t>((i * 31) % vl);
    // (Each run works on the previous run's output: the same work.)
    m.ce_fused = kCrossEntropy * static_cast<double>(n * v) / time_best(reps, [&] {
                   k::cross_entropy_forward_backward(losses.data(), logits.data(), targets.data(),
                                                     n, v, 1.0f / static_cast<float>(n));
                 });
    float* row_max = stats.data();
    float* sum_exp = row_max + n;
    float* target_logit = sum_exp + n;
    m.ce_vocab_parallel =
        kVocabParallelCe * static_cast<double>(n * vl) / time_best(reps, [&] {
          k::vocab_parallel_ce_max(row_max, logits.data(), n, vl);
          k::vocab_parallel_ce_sums(sum_exp, target_logit, logits.data(), row_max, targets.data(),
                                    n, vl, 0);
          k::vocab_parallel_ce_finish(losses.data(), logits.data(), row_max, sum_exp, target_logit,
                                      targets.data(), n, vl, 0, true, 1.0f / static_cast<float>(n));
        });
  }
  // The node: one single-threaded worker per core for a while (what ranks of one thread get), and
  // one process's OpenMP threads on every core (what a rank of all threads gets), the median of
  // short repetitions. Both see the machine as other processes leave it now.
  const int cores = static_cast<int>(m.cores);
  const double window = quick ? 0.3 : 1.5;
  m.gemm_node = concurrent_rate<GemmWork>(cores, window, [] { return GemmWork(); });
  m.kernels_node = concurrent_rate<KernelMix>(cores, window, [] { return KernelMix(1024); });
  omp_set_num_threads(cores);
  {
    GemmWork g;
    std::vector<double> rates;
    g.run_once();
    for (int r = 0; r < (quick ? 3 : 9); ++r) {
      const double t0 = now_s();
      const double f = g.run_once();
      rates.push_back(f / (now_s() - t0));
    }
    m.gemm_f32_all = median(rates);
  }
  omp_set_num_threads(saved);
  if (had_mask) ::sched_setaffinity(0, sizeof before, &before);
  return m;
}

OpCost fit_collective(CollectiveOp op, int n, const std::vector<CommPoint>& points) {
  // Weighted least squares of t = a + b x with weights 1/t^2 (each point's relative error).
  double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const CommPoint& p : points) {
    const double w = 1.0 / (p.seconds * p.seconds);
    sw += w;
    sx += w * p.bytes;
    sy += w * p.seconds;
    sxx += w * p.bytes * p.bytes;
    sxy += w * p.bytes * p.seconds;
  }
  const double det = sw * sxx - sx * sx;
  double b = det > 0 ? (sw * sxy - sx * sy) / det : 0;
  double a = det > 0 ? (sy - b * sx) / sw : 0;
  if (b <= 0 && !points.empty()) {  // degenerate: the largest point's rate
    const CommPoint& big = points.back();
    b = big.seconds / big.bytes;
  }
  if (a < 0) {  // latency cannot be negative: refit the slope through the origin
    a = 0;
    b = sxy / sxx;
  }
  const double nn = static_cast<double>(std::max(2, n));
  double steps = 1, traffic = 1;  // t = steps * alpha + traffic * bytes / bw
  if (op == CollectiveOp::all_reduce) {
    steps = 2 * (nn - 1);
    traffic = 2 * (nn - 1) / nn;
  } else if (op != CollectiveOp::send) {
    steps = nn - 1;
    traffic = (nn - 1) / nn;
  }
  OpCost c;
  c.latency_s = a / steps;
  c.bandwidth = traffic / b;
  return c;
}

CommMeasurement measure_collectives(Comm& comm, bool quick) {
  CommMeasurement m;
  const int n = comm.size(), rank = comm.rank();
  m.ranks = n;
  std::vector<int64_t> sizes;
  for (int64_t s = 4096; s <= (quick ? (int64_t{4} << 20) : (int64_t{64} << 20));
       s *= quick ? 16 : 4)
    sizes.push_back(s);
  const int64_t max_bytes = sizes.back();
  std::vector<float> a(static_cast<size_t>(max_bytes / 4), 1.0f), b(a.size(), 0.0f);
  for (int op = 0; op < kNumCollectiveOps; ++op) {
    for (int64_t bytes : sizes) {
      const int64_t count = bytes / 4;
      const int64_t block = std::max<int64_t>(1, count / n);
      const std::vector<int64_t> blocks(static_cast<size_t>(n), block);  // all_to_all's counts
      auto once = [&] {
        switch (static_cast<CollectiveOp>(op)) {
          case CollectiveOp::all_reduce:
            comm.all_reduce(a.data(), count, DType::f32, ReduceOp::sum)->wait();
            break;
          case CollectiveOp::reduce_scatter:
            comm.reduce_scatter(a.data(), b.data(), block, DType::f32, ReduceOp::sum)->wait();
            break;
          case CollectiveOp::all_gather:
            comm.all_gather(a.data(), b.data(), block, DType::f32)->wait();
            break;
          case CollectiveOp::all_to_all:  // a block to every rank, as expert parallelism sends
            comm.all_to_all_v(a.data(), blocks.data(), b.data(), blocks.data(), DType::f32)->wait();
            break;
          case CollectiveOp::send:  // ping-pong between ranks 0 and 1; one way = half
            if (rank == 0) {
              comm.send(a.data(), count, DType::f32, 1, 7)->wait();
              comm.recv(b.data(), count, DType::f32, 1, 8)->wait();
            } else if (rank == 1) {
              comm.recv(b.data(), count, DType::f32, 0, 7)->wait();
              comm.send(a.data(), count, DType::f32, 0, 8)->wait();
            }
            break;
        }
      };
      const int reps = bytes <= (int64_t{1} << 20) ? (quick ? 10 : 30) : (quick ? 3 : 7);
      once();  // warm-up (buffers, connections)
      std::vector<float> times;
      for (int r = 0; r < reps; ++r) {
        comm.barrier();
        const double t0 = now_s();
        once();
        times.push_back(static_cast<float>(now_s() - t0));
      }
      // The slowest rank's time of each repetition.
      comm.all_reduce(times.data(), static_cast<int64_t>(times.size()), DType::f32, ReduceOp::max)
          ->wait();
      double t = median(std::vector<double>(times.begin(), times.end()));
      if (static_cast<CollectiveOp>(op) == CollectiveOp::send) t *= 0.5;
      // The size the ring formulas take: the whole buffer (reduce-scatter's input, all-gather's
      // output, all-to-all's send buffer), as collectives.h defines.
      const double whole = static_cast<CollectiveOp>(op) == CollectiveOp::all_reduce ||
                                   static_cast<CollectiveOp>(op) == CollectiveOp::send
                               ? static_cast<double>(count * 4)
                               : static_cast<double>(block * n * 4);
      m.points[static_cast<size_t>(op)].push_back({whole, t});
    }
    m.ops[static_cast<size_t>(op)] =
        fit_collective(static_cast<CollectiveOp>(op), n, m.points[static_cast<size_t>(op)]);
  }
  return m;
}

}  // namespace strata
