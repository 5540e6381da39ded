// Attention with a key range per query row (kernels/cpu/attention_ranges.h): against the naive
// double reference (random, empty, full, document and rectangular ranges, GQA and MHA, strided
// operands, accumulating gradients), against the causal flash kernel on the fused qkv layout,
// the ring-attention use (key blocks computed apart, merged, backward per block), finite
// differences, and bitwise independence of the thread count.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernel_test_util.h"
#include "kernels/cpu/attention_ranges.h"
#include "kernels/cpu/flash_attention.h"
#include "kernels/cpu/reference_attention_ranges.h"

namespace strata::kernels {
namespace {

using testing::close;
using testing::DVec;
using testing::random_vec;
using testing::to_double;
using testing::Vec;
using Ints = std::vector<int32_t>;

enum class Mask { kMixed, kDocuments, kCausal, kFull };

std::string name(const RangeAttentionShape& s, Mask mask) {
  static const char* kNames[] = {"mixed", "documents", "causal", "full"};
  return "b=" + std::to_string(s.b) + " tq=" + std::to_string(s.tq) +
         " tk=" + std::to_string(s.tk) + " nh=" + std::to_string(s.nh) +
         " nkv=" + std::to_string(s.nkv) + " hd=" + std::to_string(s.hd) +
         " mask=" + kNames[int(mask)];
}

// key_begin, key_end of every query row. The query rows sit at the end of the keys
// (offset tk - tq, as a local chunk after the keys it follows) for the causal and document masks.
struct Ranges {
  Ints begin, end;
};

Ranges make_ranges(const RangeAttentionShape& s, Mask mask, uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t n = s.b * s.tq, off = s.tk - s.tq;
  Ranges r{Ints(size_t(n)), Ints(size_t(n))};
  auto uniform = [&](int64_t lo, int64_t hi) {  // in [lo, hi]
    return int32_t(std::uniform_int_distribution<int64_t>(lo, hi)(rng));
  };
  for (int64_t bi = 0; bi < s.b; ++bi) {
    // Three documents: starts 0 < c1 < c2 < tq (when tq allows).
    int64_t c1 = s.tq / 3, c2 = 2 * s.tq / 3;
    if (s.tq >= 3) {
      c1 = uniform(1, s.tq - 2);
      c2 = uniform(c1 + 1, s.tq - 1);
    }
    for (int64_t i = 0; i < s.tq; ++i) {
      const size_t row = size_t(bi * s.tq + i);
      int32_t b = 0, e = 0;
      switch (mask) {
        case Mask::kMixed:
          switch (uniform(0, 4)) {
            case 0:  // empty (begin >= end)
              b = uniform(0, s.tk);
              e = uniform(0, b);
              break;
            case 1:  // full
              b = 0;
              e = int32_t(s.tk);
              break;
            case 2:  // past both ends: clipped to the keys
              b = -uniform(1, 5);
              e = int32_t(s.tk) + uniform(1, 5);
              break;
            default:  // a random non-empty range
              b = uniform(0, s.tk - 1);
              e = uniform(b + 1, s.tk);
              break;
          }
          break;
        case Mask::kDocuments: {
          const int64_t start = i >= c2 ? c2 : i >= c1 ? c1 : 0;
          b = int32_t(std::max<int64_t>(start + off, 0));
          e = int32_t(std::clamp<int64_t>(i + off + 1, 0, s.tk));
          break;
        }
        case Mask::kCausal:
          e = int32_t(std::clamp<int64_t>(i + off + 1, 0, s.tk));
          break;
        case Mask::kFull:
          e = int32_t(s.tk);
          break;
      }
      r.begin[row] = b;
      r.end[row] = e;
    }
  }
  return r;
}

// Separate, padded buffers (strides wider than the rows) so that the strides are exercised:
// q [b*tq, q_stride], k and v interleaved in one buffer [b*tk, kv_stride].
struct Operands {
  int64_t q_stride = 0, kv_stride = 0;
  Vec q, kv, dout;
  const float* k() const { return kv.data(); }
  const float* v(const RangeAttentionShape& s) const { return kv.data() + s.nkv * s.hd; }
};

Operands make_operands(const RangeAttentionShape& s, uint32_t seed) {
  Operands o;
  o.q_stride = s.nh * s.hd + 3;
  o.kv_stride = 2 * s.nkv * s.hd + 5;
  o.q = random_vec(s.b * s.tq * o.q_stride, seed, -2.0f, 2.0f);
  o.kv = random_vec(s.b * s.tk * o.kv_stride, seed + 1, -2.0f, 2.0f);
  o.dout = random_vec(s.b * s.tq * s.nh * s.hd, seed + 2);
  return o;
}

struct Result {
  Vec out, lse, dq, dkv;
};

// Forward, then backward into gradients that start at dq0, dkv0 (accumulated into).
Result run_kernel(const RangeAttentionShape& s, const Operands& o, const Ranges& r, const Vec& dq0,
                  const Vec& dkv0) {
  Result res;
  res.out.assign(size_t(s.b * s.tq * s.nh * s.hd), NAN);  // overwritten entirely
  res.lse.assign(size_t(s.b * s.nh * s.tq), NAN);
  attention_ranges_forward(res.out.data(), res.lse.data(), o.q.data(), o.q_stride, o.k(), o.v(s),
                           o.kv_stride, r.begin.data(), r.end.data(), s);
  res.dq = dq0;
  res.dkv = dkv0;
  Vec scratch(size_t(attention_ranges_backward_scratch(s.hd)), NAN);
  attention_ranges_backward(res.dq.data(), res.dkv.data(), res.dkv.data() + s.nkv * s.hd,
                            scratch.data(), o.dout.data(), o.q.data(), o.q_stride, o.k(), o.v(s),
                            o.kv_stride, res.out.data(), res.lse.data(), r.begin.data(),
                            r.end.data(), s);
  return res;
}

struct RefResult {
  DVec out, lse, dq, dkv;
};

RefResult run_reference(const RangeAttentionShape& s, const Operands& o, const Ranges& r,
                        const Vec& dq0, const Vec& dkv0) {
  const DVec q = to_double(o.q), kv = to_double(o.kv), dout = to_double(o.dout);
  RefResult res;
  res.out.assign(size_t(s.b * s.tq * s.nh * s.hd), 0.0);
  res.lse.assign(size_t(s.b * s.nh * s.tq), 0.0);
  ref::attention_ranges_forward(res.out.data(), res.lse.data(), q.data(), o.q_stride, kv.data(),
                                kv.data() + s.nkv * s.hd, o.kv_stride, r.begin.data(), r.end.data(),
                                s.b, s.tq, s.tk, s.nh, s.nkv, s.hd);
  res.dq = to_double(dq0);
  res.dkv = to_double(dkv0);
  ref::attention_ranges_backward(
      res.dq.data(), res.dkv.data(), res.dkv.data() + s.nkv * s.hd, dout.data(), q.data(),
      o.q_stride, kv.data(), kv.data() + s.nkv * s.hd, o.kv_stride, res.out.data(), res.lse.data(),
      r.begin.data(), r.end.data(), s.b, s.tq, s.tk, s.nh, s.nkv, s.hd);
  return res;
}

// lse: -inf exactly where want is -inf, else within rel * (1 + |want|).
::testing::AssertionResult lse_close(const Vec& got, const DVec& want, double rel) {
  for (size_t i = 0; i < want.size(); ++i) {
    const bool ok = std::isinf(want[i])
                        ? got[i] == float(want[i])
                        : std::abs(got[i] - want[i]) <= rel * (1 + std::abs(want[i]));
    if (!ok)
      return ::testing::AssertionFailure()
             << "lse " << i << ": got " << got[i] << ", want " << want[i];
  }
  return ::testing::AssertionSuccess();
}
::testing::AssertionResult lse_close(const Vec& got, const Vec& want, double rel) {
  return lse_close(got, to_double(want), rel);
}

TEST(AttentionRanges, MatchesNaiveReference) {
  struct Case {
    RangeAttentionShape s;
    Mask mask;
  };
  std::vector<Case> cases;
  for (int64_t hd : {16, 64}) {
    for (int64_t nkv : {2, 4}) {  // GQA (4 query heads on 2 kv heads) and MHA
      for (Mask mask : {Mask::kMixed, Mask::kDocuments, Mask::kCausal}) {
        cases.push_back({{2, 130, 130, 4, nkv, hd}, mask});
        cases.push_back({{1, 70, 130, 4, nkv, hd}, mask});  // rectangular: fewer queries
        cases.push_back({{2, 129, 33, 4, nkv, hd}, mask});  // rectangular: fewer keys
      }
    }
  }
  // One query row (with one key dq would be 0 up to rounding: softmax of one score).
  cases.push_back({{1, 1, 3, 4, 2, 16}, Mask::kFull});
  cases.push_back({{1, 65, 200, 4, 2, 64}, Mask::kFull});
  uint32_t seed = 1;
  for (const Case& c : cases) {
    const RangeAttentionShape& s = c.s;
    SCOPED_TRACE(name(s, c.mask));
    const Ranges r = make_ranges(s, c.mask, seed);
    const Operands o = make_operands(s, seed + 10);
    // Nonzero starting gradients: the backward must add to them.
    const Vec dq0 = random_vec(int64_t(o.q.size()), seed + 20);
    const Vec dkv0 = random_vec(int64_t(o.kv.size()), seed + 21);
    ++seed;
    const Result got = run_kernel(s, o, r, dq0, dkv0);
    const RefResult want = run_reference(s, o, r, dq0, dkv0);
    EXPECT_TRUE(close(got.out, want.out, 1e-5)) << "out";
    EXPECT_TRUE(lse_close(got.lse, want.lse, 1e-5));
    // Compared as the increments, so that the starting values do not hide an error.
    DVec gdq(got.dq.size()), wdq(got.dq.size()), gdkv(got.dkv.size()), wdkv(got.dkv.size());
    for (size_t i = 0; i < gdq.size(); ++i) {
      gdq[i] = double(got.dq[i]) - double(dq0[i]);
      wdq[i] = want.dq[i] - double(dq0[i]);
    }
    for (size_t i = 0; i < gdkv.size(); ++i) {
      gdkv[i] = double(got.dkv[i]) - double(dkv0[i]);
      wdkv[i] = want.dkv[i] - double(dkv0[i]);
    }
    EXPECT_TRUE(close(gdq, wdq, 1e-5)) << "dq";
    EXPECT_TRUE(close(gdkv, wdkv, 1e-5)) << "dk, dv";
  }
}

TEST(AttentionRanges, EmptyRowsGiveZeroAndMinusInfinity) {
  const RangeAttentionShape s{1, 70, 70, 2, 1, 16};
  Ranges r = make_ranges(s, Mask::kCausal, 3);
  for (int64_t i : {0, 5, 64, 69}) r.begin[size_t(i)] = r.end[size_t(i)];  // empty rows
  const Operands o = make_operands(s, 4);
  const Vec zq(o.q.size(), 0.0f), zkv(o.kv.size(), 0.0f);
  const Result got = run_kernel(s, o, r, zq, zkv);
  for (int64_t i : {0, 5, 64, 69}) {
    for (int64_t h = 0; h < s.nh; ++h) {
      EXPECT_EQ(got.lse[size_t(h * s.tq + i)], -INFINITY);
      for (int64_t c = 0; c < s.hd; ++c) {
        EXPECT_EQ(got.out[size_t(i * s.nh * s.hd + h * s.hd + c)], 0.0f);
        EXPECT_EQ(got.dq[size_t(i * o.q_stride + h * s.hd + c)], 0.0f);
      }
    }
  }
  for (float x : got.dq) ASSERT_TRUE(std::isfinite(x));
  for (float x : got.dkv) ASSERT_TRUE(std::isfinite(x));
}

// Causal ranges on the fused qkv layout reproduce the causal flash kernel.
TEST(AttentionRanges, CausalMatchesFlashAttention) {
  for (const RangeAttentionShape& s :
       {RangeAttentionShape{2, 130, 130, 4, 2, 64}, RangeAttentionShape{1, 64, 64, 4, 4, 16},
        RangeAttentionShape{1, 1, 1, 2, 1, 16}, RangeAttentionShape{2, 200, 200, 4, 1, 16}}) {
    SCOPED_TRACE(name(s, Mask::kCausal));
    const int64_t t = s.tq, ld = (s.nh + 2 * s.nkv) * s.hd;
    const Vec qkv = random_vec(s.b * t * ld, 7, -2.0f, 2.0f);
    const Vec dout = random_vec(s.b * t * s.nh * s.hd, 8);
    Vec fout(dout.size()), flse(size_t(s.b * s.nh * t)), fdqkv(qkv.size());
    flash_attention_forward(fout.data(), flse.data(), qkv.data(), s.b, t, s.nh, s.nkv, s.hd);
    Vec fscratch(size_t(flash_attention_backward_scratch(s.b, t, s.nh, s.nkv, s.hd)));
    flash_attention_backward(fdqkv.data(), fscratch.data(), dout.data(), qkv.data(), fout.data(),
                             flse.data(), s.b, t, s.nh, s.nkv, s.hd);

    const Ranges r = make_ranges(s, Mask::kCausal, 9);
    Vec out(dout.size()), lse(flse.size()), dqkv(qkv.size(), 0.0f);
    const float* k = qkv.data() + s.nh * s.hd;
    const float* v = qkv.data() + (s.nh + s.nkv) * s.hd;
    attention_ranges_forward(out.data(), lse.data(), qkv.data(), ld, k, v, ld, r.begin.data(),
                             r.end.data(), s);
    Vec scratch(size_t(attention_ranges_backward_scratch(s.hd)));
    attention_ranges_backward(dqkv.data(), dqkv.data() + s.nh * s.hd,
                              dqkv.data() + (s.nh + s.nkv) * s.hd, scratch.data(), dout.data(),
                              qkv.data(), ld, k, v, ld, out.data(), lse.data(), r.begin.data(),
                              r.end.data(), s);
    EXPECT_TRUE(close(out, to_double(fout), 1e-6)) << "out";
    EXPECT_TRUE(lse_close(lse, flse, 1e-6));
    EXPECT_TRUE(close(dqkv, to_double(fdqkv), 1e-6)) << "dqkv";
  }
}

// The rows [j0, j0 + n) of the key buffer of every item, as a buffer of their own.
Vec key_block(const RangeAttentionShape& s, const Vec& kv, int64_t ld, int64_t j0, int64_t n) {
  Vec blk(size_t(std::max<int64_t>(s.b * n * ld, 1)));  // never empty: data() is offset
  for (int64_t bi = 0; bi < s.b; ++bi)
    std::copy(kv.begin() + (bi * s.tk + j0) * ld, kv.begin() + (bi * s.tk + j0 + n) * ld,
              blk.begin() + bi * n * ld);
  return blk;
}

// Ring attention: keys split into [0, split) and [split, tk), each block computed with the
// ranges clipped to it (relative to its start), merged; backward per block with the final out
// and lse, dq accumulated over the blocks.
TEST(AttentionRanges, BlocksMergeToTheSingleCall) {
  for (Mask mask : {Mask::kMixed, Mask::kDocuments, Mask::kCausal}) {
    for (const RangeAttentionShape& s :
         {RangeAttentionShape{2, 130, 130, 4, 2, 64}, RangeAttentionShape{1, 70, 150, 4, 4, 16}}) {
      for (int64_t split : {int64_t(0), int64_t(37), int64_t(64), s.tk / 2 + 5}) {
        SCOPED_TRACE(name(s, mask) + " split=" + std::to_string(split));
        const Ranges r = make_ranges(s, mask, uint32_t(31 + split));
        const Operands o = make_operands(s, uint32_t(41 + split));
        const Vec zq(o.q.size(), 0.0f), zkv(o.kv.size(), 0.0f);
        const Result whole = run_kernel(s, o, r, zq, zkv);

        const int64_t nblk[2] = {split, s.tk - split}, start[2] = {0, split};
        Vec out[2], lse[2], kvb[2];
        Ranges rb[2];
        for (int blk = 0; blk < 2; ++blk) {
          RangeAttentionShape sb = s;
          sb.tk = nblk[blk];
          rb[blk] = r;
          for (size_t i = 0; i < r.begin.size(); ++i) {
            const int64_t lo = start[blk], hi = lo + nblk[blk];
            const int64_t b = std::clamp<int64_t>(r.begin[i], lo, hi) - lo;
            const int64_t e = std::clamp<int64_t>(r.end[i], lo, hi) - lo;
            rb[blk].begin[i] = int32_t(b);
            rb[blk].end[i] = int32_t(std::max(b, e));
          }
          kvb[blk] = key_block(s, o.kv, o.kv_stride, start[blk], nblk[blk]);
          out[blk].assign(whole.out.size(), NAN);
          lse[blk].assign(whole.lse.size(), NAN);
          attention_ranges_forward(out[blk].data(), lse[blk].data(), o.q.data(), o.q_stride,
                                   kvb[blk].data(), kvb[blk].data() + s.nkv * s.hd, o.kv_stride,
                                   rb[blk].begin.data(), rb[blk].end.data(), sb);
        }
        attention_ranges_merge(out[0].data(), lse[0].data(), out[1].data(), lse[1].data(), s.b,
                               s.tq, s.nh, s.hd);
        EXPECT_TRUE(close(out[0], to_double(whole.out), 2e-6)) << "merged out";
        EXPECT_TRUE(lse_close(lse[0], whole.lse, 2e-6)) << "merged lse";

        // Backward per block with the merged out and lse; dq summed over the blocks, each
        // block's dk, dv written back to its rows.
        Vec dq(o.q.size(), 0.0f), dkv(o.kv.size(), 0.0f);
        Vec scratch(size_t(attention_ranges_backward_scratch(s.hd)));
        for (int blk = 0; blk < 2; ++blk) {
          RangeAttentionShape sb = s;
          sb.tk = nblk[blk];
          Vec dkvb(kvb[blk].size(), 0.0f);
          attention_ranges_backward(
              dq.data(), dkvb.data(), dkvb.data() + s.nkv * s.hd, scratch.data(), o.dout.data(),
              o.q.data(), o.q_stride, kvb[blk].data(), kvb[blk].data() + s.nkv * s.hd, o.kv_stride,
              out[0].data(), lse[0].data(), rb[blk].begin.data(), rb[blk].end.data(), sb);
          for (int64_t bi = 0; bi < s.b; ++bi)
            std::copy(dkvb.begin() + bi * nblk[blk] * o.kv_stride,
                      dkvb.begin() + (bi + 1) * nblk[blk] * o.kv_stride,
                      dkv.begin() + (bi * s.tk + start[blk]) * o.kv_stride);
        }
        EXPECT_TRUE(close(dq, to_double(whole.dq), 1e-5)) << "dq";
        EXPECT_TRUE(close(dkv, to_double(whole.dkv), 1e-5)) << "dk, dv";
      }
    }
  }
}

TEST(AttentionRanges, MergeHandlesMinusInfinityOnEitherSide) {
  const int64_t hd = 4;
  // Rows: part empty; acc empty; both empty; both present (lse 0 and log 3: weights 1/4, 3/4).
  Vec acc = {1, 2, 3, 4, 0, 0, 0, 0, 0, 0, 0, 0, 4, 4, 4, 4};
  Vec lacc = {0.5f, -INFINITY, -INFINITY, 0.0f};
  const Vec part = {9, 9, 9, 9, 5, 6, 7, 8, 0, 0, 0, 0, 8, 0, 8, 0};
  const Vec lpart = {-INFINITY, 1.5f, -INFINITY, std::log(3.0f)};
  attention_ranges_merge(acc.data(), lacc.data(), part.data(), lpart.data(), 1, 4, 1, hd);
  const Vec want = {1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0, 0, 7, 1, 7, 1};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(acc[i], want[i], 1e-6) << i;
  EXPECT_EQ(lacc[0], 0.5f);
  EXPECT_EQ(lacc[1], 1.5f);
  EXPECT_EQ(lacc[2], -INFINITY);
  EXPECT_NEAR(lacc[3], std::log(4.0), 1e-6);
}

// Central differences in double of L = sum(out o w) through the reference forward, against the
// reference backward (tight) and the f32 kernel's backward.
TEST(AttentionRanges, BackwardMatchesFiniteDifferences) {
  for (Mask mask : {Mask::kMixed, Mask::kDocuments}) {
    const RangeAttentionShape s{2, 6, 9, 2, 1, 4};
    SCOPED_TRACE(name(s, mask));
    const Ranges r = make_ranges(s, mask, 51);
    const Operands o = make_operands(s, 52);
    const DVec w = to_double(o.dout);
    DVec q = to_double(o.q), kv = to_double(o.kv);
    auto loss = [&]() {
      DVec out(size_t(s.b * s.tq * s.nh * s.hd)), lse(size_t(s.b * s.nh * s.tq));
      ref::attention_ranges_forward(out.data(), lse.data(), q.data(), o.q_stride, kv.data(),
                                    kv.data() + s.nkv * s.hd, o.kv_stride, r.begin.data(),
                                    r.end.data(), s.b, s.tq, s.tk, s.nh, s.nkv, s.hd);
      double l = 0.0;
      for (size_t i = 0; i < out.size(); ++i) l += out[i] * w[i];
      return l;
    };
    auto numeric = [&](DVec& x) {
      DVec g(x.size());
      const double eps = 1e-5;
      for (size_t i = 0; i < x.size(); ++i) {
        const double saved = x[i];
        x[i] = saved + eps;
        const double up = loss();
        x[i] = saved - eps;
        const double down = loss();
        x[i] = saved;
        g[i] = (up - down) / (2 * eps);
      }
      return g;
    };
    const DVec nq = numeric(q), nkv = numeric(kv);
    const Vec zq(o.q.size(), 0.0f), zkv(o.kv.size(), 0.0f);
    const RefResult want = run_reference(s, o, r, zq, zkv);
    EXPECT_TRUE(close(want.dq, nq, 1e-7)) << "reference dq";
    EXPECT_TRUE(close(want.dkv, nkv, 1e-7)) << "reference dk, dv";
    const Result got = run_kernel(s, o, r, zq, zkv);
    EXPECT_TRUE(close(got.dq, nq, 1e-5)) << "kernel dq";
    EXPECT_TRUE(close(got.dkv, nkv, 1e-5)) << "kernel dk, dv";
    // Not all zero: the check can fail.
    double mx = 0.0;
    for (double x : nkv) mx = std::max(mx, std::abs(x));
    EXPECT_GT(mx, 1e-2);
  }
}

TEST(AttentionRanges, DeterministicAcrossThreadCounts) {
  const int saved = omp_get_max_threads();
  for (Mask mask : {Mask::kMixed, Mask::kDocuments, Mask::kCausal}) {
    for (const RangeAttentionShape& s :
         {RangeAttentionShape{2, 300, 300, 4, 2, 64}, RangeAttentionShape{1, 129, 257, 4, 4, 16}}) {
      SCOPED_TRACE(name(s, mask));
      const Ranges r = make_ranges(s, mask, 61);
      const Operands o = make_operands(s, 62);
      const Vec dq0 = random_vec(int64_t(o.q.size()), 63);
      const Vec dkv0 = random_vec(int64_t(o.kv.size()), 64);
      omp_set_num_threads(1);
      const Result one = run_kernel(s, o, r, dq0, dkv0);
      for (int threads : {2, 3}) {
        omp_set_num_threads(threads);
        const Result other = run_kernel(s, o, r, dq0, dkv0);
        auto same = [](const Vec& a, const Vec& b) {
          return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
        };
        EXPECT_TRUE(same(one.out, other.out)) << threads << " threads: out";
        EXPECT_TRUE(same(one.lse, other.lse)) << threads << " threads: lse";
        EXPECT_TRUE(same(one.dq, other.dq)) << threads << " threads: dq";
        EXPECT_TRUE(same(one.dkv, other.dkv)) << threads << " threads: dk, dv";
      }
    }
  }
  omp_set_num_threads(saved);
}

}  // namespace
}  // namespace strata::kernels
