// GEMM: every matrix product of the model (linear layers, tied LM head) goes through gemm().
// Backends are oneDNN's dnnl_sgemm and its matmul primitive; bench/bench_gemm.cc measures both
// (and OpenBLAS) on the training shapes, and use_matmul_primitive() below records the outcome.
#include <algorithm>
#include <cstring>
#include <dnnl.hpp>
#include <list>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/error.h"
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
      // Only the lookup is serialised; primitives are shared handles and may execute
      // concurrently (oneDNN is built with DNNL_ENABLE_CONCURRENT_EXEC).
      std::lock_guard<std::mutex> lock(mutex_);
      const Entry& e = lookup(key);
      pd = e.pd;
      prim = e.prim;
    }
    thread_local dnnl::stream stream(engine_);
    // Plain-layout memories wrapping the caller's pointers: no copies, no reorders.
    dnnl::memory ma(pd.src_desc(), engine_, const_cast<void*>(a));
    dnnl::memory mb(pd.weights_desc(), engine_, const_cast<void*>(b));
    dnnl::memory mc(pd.dst_desc(), engine_, c);
    prim.execute(stream, {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}});
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

}  // namespace detail

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (use_matmul_primitive(trans_a, trans_b, n, k)) {
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
  return "onednn";
}

}  // namespace strata::kernels
