// GEMM: every matrix product of the model (linear layers, tied LM head) goes through gemm().
// Backends are oneDNN (dnnl_sgemm and its matmul primitive) and OpenBLAS (gemm_openblas.cc);
// bench/bench_gemm.cc measures all three on the training shapes, and gemm_choice() and
// use_matmul_primitive() below record the outcome.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <dnnl.hpp>
#include <list>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "core/log.h"
#include "kernels/cpu/gemm_backends.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/kernels.h"

namespace strata::kernels {

namespace {

// Dispatch, from bench/bench_gemm.cc on the training shapes (2 cores, Zen 4): dnnl_sgemm is the
// fastest or tied on every shape and transpose but one family, and clearly so where the matmul
// primitive is weak (dx = dy w with a large k: 213 vs 156-166 GFLOP/s). The exception is
// x w^T (N,T) with a long inner dimension, k >= 2n (the MLP down projection 3072 -> 768 at
// 1024 rows: 162-173 vs 193-212 GFLOP/s), where the matmul primitive parallelises better.
bool use_matmul_primitive(bool trans_a, bool trans_b, int64_t n, int64_t k) {
  return !trans_a && trans_b && k >= 2 * n;
}

void check_args(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, int64_t lda,
                int64_t ldb, int64_t ldc) {
  (void)isa::active();  // the level chosen, and oneDNN capped to it, before its first JIT
  STRATA_CHECK(m >= 0 && n >= 0 && k >= 0, "gemm: negative size m=", m, " n=", n, " k=", k);
  // Row-major: the leading dimension of a stored matrix is at least its number of columns.
  STRATA_CHECK(lda >= (trans_a ? m : k) && lda >= 1, "gemm: lda=", lda, " too small");
  STRATA_CHECK(ldb >= (trans_b ? k : n) && ldb >= 1, "gemm: ldb=", ldb, " too small");
  STRATA_CHECK(ldc >= n && ldc >= 1, "gemm: ldc=", ldc, " too small");
}

// k == 0 leaves C = beta * C; the libraries disagree on this corner, so handle it here.
void scale_c(int64_t m, int64_t n, float beta, float* c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i) {
    float* row = c + i * ldc;
    for (int64_t j = 0; j < n; ++j) row[j] = beta == 0.0f ? 0.0f : beta * row[j];
  }
}

// ---- matmul primitive cache ----
// Creating a primitive (descriptor + JIT kernel lookup) costs tens of microseconds; a training
// step calls gemm with a handful of distinct shapes, so a small LRU keyed by everything that
// shapes the primitive makes every call after the first one a lookup.
struct Key {
  bool ta, tb;
  int64_t m, n, k, lda, ldb, ldc;
  float alpha, beta;
  bool bf16 = false;  // A and B in bf16 (C is f32 either way)
  bool operator==(const Key&) const = default;
};
struct KeyHash {
  size_t operator()(const Key& key) const {
    size_t h = (key.ta ? 1u : 0u) | (key.tb ? 2u : 0u) | (key.bf16 ? 4u : 0u);
    auto mix = [&h](uint64_t v) { h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2); };
    for (int64_t v : {key.m, key.n, key.k, key.lda, key.ldb, key.ldc})
      mix(static_cast<uint64_t>(v));
    uint32_t fa, fb;
    std::memcpy(&fa, &key.alpha, 4);
    std::memcpy(&fb, &key.beta, 4);
    mix((static_cast<uint64_t>(fa) << 32) | fb);
    return h;
  }
};

class MatmulCache {
 public:
  static constexpr size_t kCapacity = 128;

  MatmulCache() : engine_(dnnl::engine::kind::cpu, 0) {}

  void run(const Key& key, const void* a, const void* b, float* c) {
    dnnl::matmul::primitive_desc pd;
    dnnl::matmul prim;
    {
      // Only the lookup is serialised; primitives are shared handles, executed concurrently
      // with a scratchpad per thread (below).
      std::lock_guard<std::mutex> lock(mutex_);
      const Entry& e = lookup(key);
      pd = e.pd;
      prim = e.prim;
    }
    thread_local dnnl::stream stream(engine_);
    // The primitive's scratchpad is the calling thread's: with oneDNN's default (a scratchpad
    // owned by the primitive) two threads running one cached primitive at once wrote over each
    // other's partial results (Debian's oneDNN 2.6 is not built with DNNL_ENABLE_CONCURRENT_EXEC;
    // tests/kernels/test_gemm.cc, Gemm.OneShapeFromManyThreadsAtOnce).
    thread_local std::vector<uint8_t> scratch;
    const dnnl::memory::desc sd = pd.scratchpad_desc();
    if (scratch.size() < sd.get_size()) scratch.resize(sd.get_size());
    // Plain-layout memories wrapping the caller's pointers: no copies, no reorders.
    dnnl::memory ma(pd.src_desc(), engine_, const_cast<void*>(a));
    dnnl::memory mb(pd.weights_desc(), engine_, const_cast<void*>(b));
    dnnl::memory mc(pd.dst_desc(), engine_, c);
    dnnl::memory ms(sd, engine_, scratch.data());
    prim.execute(stream, {{DNNL_ARG_SRC, ma},
                          {DNNL_ARG_WEIGHTS, mb},
                          {DNNL_ARG_DST, mc},
                          {DNNL_ARG_SCRATCHPAD, ms}});
    stream.wait();
  }

 private:
  struct Entry {
    Key key;
    dnnl::matmul::primitive_desc pd;
    dnnl::matmul prim;
  };

  Entry& lookup(const Key& key) {
    auto it = index_.find(key);
    if (it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);  // most recently used first
      return *it->second;
    }
    if (lru_.size() >= kCapacity) {
      index_.erase(lru_.back().key);
      lru_.pop_back();
    }
    using dt = dnnl::memory::data_type;
    using dims = dnnl::memory::dims;
    // op(A)[m,k]: stored A is [m,k] with row stride lda, or [k,m] (transposed) read with
    // strides (1, lda); likewise B. This is how the transposes cost nothing.
    const dt in = key.bf16 ? dt::bf16 : dt::f32;
    dnnl::memory::desc ad(dims{key.m, key.k}, in, key.ta ? dims{1, key.lda} : dims{key.lda, 1});
    dnnl::memory::desc bd(dims{key.k, key.n}, in, key.tb ? dims{1, key.ldb} : dims{key.ldb, 1});
    dnnl::memory::desc cd(dims{key.m, key.n}, dt::f32, dims{key.ldc, 1});
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    if (key.alpha != 1.0f) attr.set_output_scales(0, {key.alpha});
    if (key.beta != 0.0f) {
      dnnl::post_ops po;
      po.append_sum(key.beta);
      attr.set_post_ops(po);
    }
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(ad, bd, cd), attr, engine_);
    lru_.push_front(Entry{key, pd, dnnl::matmul(pd)});
    index_[key] = lru_.begin();
    return lru_.front();
  }

  std::mutex mutex_;
  dnnl::engine engine_;
  std::list<Entry> lru_;
  std::unordered_map<Key, std::list<Entry>::iterator, KeyHash> index_;
};

MatmulCache& matmul_cache() {
  static MatmulCache cache;
  return cache;
}

}  // namespace

namespace detail {

void gemm_dnnl_sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                     const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                     int64_t ldc) {
  check_args(trans_a, trans_b, m, n, k, lda, ldb, ldc);
  if (m == 0 || n == 0) return;
  if (k == 0) return scale_c(m, n, beta, c, ldc);
  dnnl_status_t st = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, alpha, a, lda, b,
                                ldb, beta, c, ldc);
  STRATA_CHECK(st == dnnl_success, "gemm: dnnl_sgemm failed with status ", static_cast<int>(st));
}

void gemm_dnnl_matmul(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                      const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
                      float* c, int64_t ldc) {
  check_args(trans_a, trans_b, m, n, k, lda, ldb, ldc);
  if (m == 0 || n == 0) return;
  if (k == 0) return scale_c(m, n, beta, c, ldc);
  try {
    matmul_cache().run(Key{trans_a, trans_b, m, n, k, lda, ldb, ldc, alpha, beta, false}, a, b, c);
  } catch (const dnnl::error& e) {
    fail("gemm: oneDNN matmul failed (m=", m, " n=", n, " k=", k, "): ", e.what());
  }
}

// C cut into tiles whose size depends on the shape only, each tile one call of `raw` on one
// thread (inside an OpenMP region, oneDNN and OpenBLAS's OpenMP build run on the calling thread):
// every element of C is summed in the same order whatever the thread count. OpenBLAS needs this:
// its own threads split the work differently at every thread count, and its results differ with
// it (bitwise, at 1-4 threads, every transpose: GemmTest.ResultDoesNotDependOnThreadCount).
void gemm_tiled(RawGemm raw, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                float alpha, const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
                float* c, int64_t ldc) {
  check_args(trans_a, trans_b, m, n, k, lda, ldb, ldc);
  if (m == 0 || n == 0) return;
  if (k == 0) return scale_c(m, n, beta, c, ldc);
  // Tiles of 256 x 2048: against OpenBLAS's own threading on the training shapes (2 threads,
  // Sapphire Rapids at avx2, OpenBLAS core Haswell) 1-10% slower in repeated runs, where
  // 128 x 1024 was 13% and a 4 x 4 grid 15% (each tile packs its own panels of A and B). The price
  // is parallelism: a 1024 x 768 product has 4 tiles, so at most 4 threads work on it.
  constexpr int64_t kTileRows = 256, kTileCols = 2048;
  const int64_t row_tiles = (m + kTileRows - 1) / kTileRows;
  const int64_t tiles = row_tiles * ((n + kTileCols - 1) / kTileCols);
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < tiles; ++t) {
    const int64_t i0 = (t % row_tiles) * kTileRows, j0 = (t / row_tiles) * kTileCols;
    const float* a_tile = a + (trans_a ? i0 : i0 * lda);
    const float* b_tile = b + (trans_b ? j0 * ldb : j0);
    raw(trans_a, trans_b, std::min(kTileRows, m - i0), std::min(kTileCols, n - j0), k, alpha,
        a_tile, lda, b_tile, ldb, beta, c + i0 * ldc + j0, ldc);
  }
}

void gemm_openblas(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                   const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                   int64_t ldc) {
  gemm_tiled(openblas_sgemm, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void gemm_dnnl_sgemm_tiled(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                           const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
                           float* c, int64_t ldc) {
  gemm_tiled(gemm_dnnl_sgemm, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace detail

namespace {

enum class GemmLib { onednn, openblas };

struct GemmChoice {
  GemmLib lib;
  std::string why;  // for the start-up line and environment.json
};

// Which library runs the f32 GEMM, by measurement (docs/PERFORMANCE.md, "GEMM backend"):
//   * Intel x86 and AMD Zen 4/5 (AVX-512): oneDNN, the fastest or tied on the training shapes
//     (bench_gemm on Sapphire Rapids and Zen 4, also with AVX2 forced).
//   * AMD without AVX-512 (Zen 1-3): OpenBLAS. On a 2-core Zen 3, 2048^3 f32: OpenBLAS 147,
//     oneDNN's dnnl_sgemm 85 GFLOP/s; PyTorch's MKL 117 (issue 18's measurements).
//   * aarch64: OpenBLAS. Debian's oneDNN 2.6 has no JIT GEMM for Arm (no Compute Library): its
//     sgemm and matmul run the reference C++ loops ("gemm:ref" in ONEDNN_VERBOSE), while
//     OpenBLAS has hand-written NEON and SVE kernels per core (Neoverse N1/V1/N2, A64FX...).
// STRATA_GEMM=onednn|openblas forces one (auto: the rule above). Where OpenBLAS is not installed
// or runs generic kernels, auto stays on oneDNN and says why.
GemmChoice choose_gemm() {
  (void)isa::active();  // the level first: it may cap OpenBLAS's core (gemm_openblas.cc)
  std::string want = "auto";
  if (const char* env = std::getenv("STRATA_GEMM"); env && *env) want = env;
  STRATA_CHECK(want == "auto" || want == "onednn" || want == "openblas", "STRATA_GEMM=", want,
               " is not a GEMM backend: use onednn, openblas or auto (unset: auto)");
  if (want == "onednn") return {GemmLib::onednn, "STRATA_GEMM"};
#if defined(__aarch64__)
  const bool prefer_openblas = true;
  const char* rule = "aarch64";
#else
  const bool prefer_openblas = isa::amd_cpu() && isa::supported().front() == isa::Level::avx2;
  const char* rule = "AMD CPU without AVX-512";
#endif
  // OpenBLAS is loaded only where it may run: elsewhere no process pays for its start-up.
  if (want == "auto" && !prefer_openblas) return {GemmLib::onednn, "auto"};
  const detail::OpenBlas& ob = detail::openblas();
  if (want == "openblas") {
    STRATA_CHECK(ob.sgemm != nullptr, "STRATA_GEMM=openblas: ", ob.why_not,
                 " (unset STRATA_GEMM to use oneDNN)");
    if (!ob.why_slow.empty())
      log::warn("STRATA_GEMM=openblas: ", ob.why_slow, "; expect it slower than oneDNN");
    return {GemmLib::openblas, "STRATA_GEMM, core " + ob.core};
  }
  if (ob.sgemm == nullptr || !ob.why_slow.empty())
    return {GemmLib::onednn,
            std::string("auto; not OpenBLAS: ") + (ob.sgemm ? ob.why_slow : ob.why_not)};
  return {GemmLib::openblas, std::string("auto: ") + rule + ", core " + ob.core};
}

const GemmChoice& gemm_choice() {
  static const GemmChoice choice = choose_gemm();  // thread-safe; a throw leaves it to the next
  return choice;
}

}  // namespace

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (gemm_choice().lib == GemmLib::openblas) {
    detail::gemm_openblas(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  } else if (use_matmul_primitive(trans_a, trans_b, n, k)) {
    detail::gemm_dnnl_matmul(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  } else {
    detail::gemm_dnnl_sgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
}

namespace {

// oneDNN's bf16 matmul loses 10-15% on a dimension as long as the vocabulary (50304: the LM
// head's forward n, its dx's k and its dW's m) against the same product cut into chunks of at
// most 8192 along it (bench/gemm_split.cc, 2 cores: 370-375 -> 413-419 GFLOP/s on each of the
// three). Balanced chunks, multiples of 64, so that at most two primitive shapes are created.
constexpr int64_t kSplitAbove = 16384, kSplitChunk = 8192;

int64_t split_chunk(int64_t d) {
  const int64_t pieces = (d + kSplitChunk - 1) / kSplitChunk;
  return ((d + pieces - 1) / pieces + 63) / 64 * 64;
}

// Below the avx512bf16 level oneDNN's bf16 matmul is a reference loop (or, capped at AVX2, not
// there at all): the operands are widened to f32 (exactly) and the f32 GEMM runs. Linear layers
// widen into their arena scratch instead (lowp.cc); this path serves the other callers.
void gemm_blowp_widened(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                        const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, float beta,
                        float* c, int64_t ldc) {
  const int64_t a_elems = ((trans_a ? k : m) - 1) * lda + (trans_a ? m : k);
  const int64_t b_elems = ((trans_b ? n : k) - 1) * ldb + (trans_b ? k : n);
  std::vector<float> a32(static_cast<size_t>(a_elems)), b32(static_cast<size_t>(b_elems));
  from_lowp(DType::bf16, a32.data(), a, a_elems);
  from_lowp(DType::bf16, b32.data(), b, b_elems);
  gemm(trans_a, trans_b, m, n, k, alpha, a32.data(), lda, b32.data(), ldb, beta, c, ldc);
}

}  // namespace

void gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
               const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, float beta, float* c,
               int64_t ldc) {
  check_args(trans_a, trans_b, m, n, k, lda, ldb, ldc);
  if (m == 0 || n == 0) return;
  if (k == 0) return scale_c(m, n, beta, c, ldc);
  if (!isa::native_bf16())
    return gemm_blowp_widened(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  // The longest dimension first; each chunk's call may split another long one.
  if (m > kSplitAbove && m >= n && m >= k) {  // rows of A and C
    const int64_t step = split_chunk(m);
    for (int64_t m0 = 0; m0 < m; m0 += step)
      gemm_bf16(trans_a, trans_b, std::min(step, m - m0), n, k, alpha,
                a + (trans_a ? m0 : m0 * lda), lda, b, ldb, beta, c + m0 * ldc, ldc);
    return;
  }
  if (n > kSplitAbove && n >= k) {  // columns of B and C
    const int64_t step = split_chunk(n);
    for (int64_t n0 = 0; n0 < n; n0 += step)
      gemm_bf16(trans_a, trans_b, m, std::min(step, n - n0), k, alpha, a, lda,
                b + (trans_b ? n0 * ldb : n0), ldb, beta, c + n0, ldc);
    return;
  }
  if (k > kSplitAbove) {  // the inner dimension: chunks after the first accumulate into C
    const int64_t step = split_chunk(k);
    for (int64_t k0 = 0; k0 < k; k0 += step)
      gemm_bf16(trans_a, trans_b, m, n, std::min(step, k - k0), alpha,
                a + (trans_a ? k0 * lda : k0), lda, b + (trans_b ? k0 : k0 * ldb), ldb,
                k0 == 0 ? beta : 1.0f, c, ldc);
    return;
  }
  try {
    matmul_cache().run(Key{trans_a, trans_b, m, n, k, lda, ldb, ldc, alpha, beta, true}, a, b, c);
  } catch (const dnnl::error& e) {
    fail("gemm_bf16: oneDNN matmul failed (m=", m, " n=", n, " k=", k, "): ", e.what());
  }
}

std::string gemm_backend() {
  return gemm_choice().lib == GemmLib::openblas ? "openblas" : "onednn";
}

std::string describe_gemm_backend() {
  return gemm_backend() + " (" + gemm_choice().why + ")";
}

}  // namespace strata::kernels
