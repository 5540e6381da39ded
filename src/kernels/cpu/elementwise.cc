// Element-wise kernels (residual adds, bias broadcast, gradient scaling, the bias gradient's
// column sums): memory-bound streams in contiguous parallel chunks, at each level's width.
// Compiled once per kernel level (Highway's foreach_target.h); kernels.h's functions dispatch.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/elementwise.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <algorithm>

#include "kernels/cpu/vec-inl.h"

HWY_BEFORE_NAMESPACE();
namespace strata::kernels::HWY_NAMESPACE {
namespace {

constexpr int64_t kChunk = 8192;  // elements per parallel work item (a multiple of every width)

// fn(i, left) for the offset i of every vector in [0, count), left = the elements from i to the
// end of its chunk (fn's LoadN/StoreN take at most a vector of them); chunks in parallel. fn makes
// its vectors itself, inside the parallel region: an SVE vector is sizeless and cannot be shared
// into one (GCC 12 crashes on the attempt).
template <class Fn>
HWY_INLINE void ForEachVector(int64_t count, Fn fn) {
  const int64_t N = int64_t(hn::Lanes(DF()));
  const int64_t chunks = (count + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static)
  for (int64_t ch = 0; ch < chunks; ++ch) {
    const int64_t end = std::min(count, (ch + 1) * kChunk);
    for (int64_t i = ch * kChunk; i < end; i += N) fn(i, size_t(end - i));
  }
}

}  // namespace

// out may alias a or b: each vector is read before the same vector is written.
void Add(float* out, const float* a, const float* b, int64_t count) {
  const DF d;
  ForEachVector(count, [=](int64_t i, size_t left) {
    StoreN(hn::Add(LoadN(d, a + i, left), LoadN(d, b + i, left)), d, out + i, left);
  });
}

void ScaleInplace(float* y, float s, int64_t count) {
  const DF d;
  ForEachVector(count, [=](int64_t i, size_t left) {
    StoreN(hn::Mul(LoadN(d, y + i, left), hn::Set(d, s)), d, y + i, left);
  });
}

void AddBias(float* y, const float* bias, int64_t n, int64_t c) {
  const DF d;
  const int64_t N = int64_t(hn::Lanes(d));
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    float* HWY_RESTRICT row = y + i * c;
    for (int64_t j = 0; j < c; j += N) {
      const size_t left = size_t(c - j);
      StoreN(hn::Add(LoadN(d, row + j, left), LoadN(d, bias + j, left)), d, row + j, left);
    }
  }
}

// dbias[out] += column sums of dy[n, out]. Parallel over column blocks of four vectors, so that
// each output has a fixed summation order (rows 0..n-1) at every thread count and every level;
// the block's sums stay in registers while the rows stream through.
void ColumnSumAccumulate(float* dbias, const float* dy, int64_t n, int64_t out) {
  const DF d;
  const int64_t N = int64_t(hn::Lanes(d)), block = 4 * N;
  const int64_t blocks = (out + block - 1) / block;
#pragma omp parallel for schedule(static)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t j0 = blk * block;
    if (j0 + block <= out) {
      VF a0 = hn::Zero(d), a1 = hn::Zero(d), a2 = hn::Zero(d), a3 = hn::Zero(d);
      for (int64_t i = 0; i < n; ++i) {
        const float* HWY_RESTRICT row = dy + i * out + j0;
        a0 = hn::Add(a0, hn::LoadU(d, row));
        a1 = hn::Add(a1, hn::LoadU(d, row + N));
        a2 = hn::Add(a2, hn::LoadU(d, row + 2 * N));
        a3 = hn::Add(a3, hn::LoadU(d, row + 3 * N));
      }
      float* HWY_RESTRICT db = dbias + j0;
      hn::StoreU(hn::Add(hn::LoadU(d, db), a0), d, db);
      hn::StoreU(hn::Add(hn::LoadU(d, db + N), a1), d, db + N);
      hn::StoreU(hn::Add(hn::LoadU(d, db + 2 * N), a2), d, db + 2 * N);
      hn::StoreU(hn::Add(hn::LoadU(d, db + 3 * N), a3), d, db + 3 * N);
      continue;
    }
    for (int64_t j = j0; j < out; j += N) {  // the last, partial block: a vector at a time
      const size_t left = size_t(out - j);
      VF acc = hn::Zero(d);
      for (int64_t i = 0; i < n; ++i) acc = hn::Add(acc, LoadN(d, dy + i * out + j, left));
      StoreN(hn::Add(LoadN(d, dbias + j, left), acc), d, dbias + j, left);
    }
  }
}

}  // namespace strata::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/kernels.h"

namespace strata::kernels {

HWY_EXPORT(Add);
HWY_EXPORT(ScaleInplace);
HWY_EXPORT(AddBias);
HWY_EXPORT(ColumnSumAccumulate);

void add(float* out, const float* a, const float* b, int64_t count) {
  STRATA_DISPATCH(Add)(out, a, b, count);
}
void add_inplace(float* y, const float* x, int64_t count) {
  STRATA_DISPATCH(Add)(y, y, x, count);
}
void add_bias(float* y, const float* bias, int64_t n, int64_t c) {
  STRATA_DISPATCH(AddBias)(y, bias, n, c);
}
void scale_inplace(float* y, float s, int64_t count) {
  STRATA_DISPATCH(ScaleInplace)(y, s, count);
}
void column_sum_accumulate(float* dbias, const float* dy, int64_t n, int64_t out) {
  STRATA_DISPATCH(ColumnSumAccumulate)(dbias, dy, n, out);
}

}  // namespace strata::kernels
#endif  // HWY_ONCE
