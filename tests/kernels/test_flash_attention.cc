// Flash attention (kernels/cpu/flash_attention.h) against the naive attention kernels of
// kernels.h: forward, lse, backward on odd shapes with grouped-query attention, bitwise
// determinism across thread counts, and a scratch size that does not grow with t^2.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>

#include "kernel_test_util.h"
#include "kernels/cpu/flash_attention.h"
#include "kernels/cpu/kernels.h"

namespace strata::kernels {
namespace {

using testing::close;
using testing::DVec;
using testing::random_vec;
using testing::to_double;
using testing::Vec;

struct Shape {
  int64_t b, t, nh, nkv, hd;
};

std::string name(const Shape& s) {
  return "b=" + std::to_string(s.b) + " t=" + std::to_string(s.t) + " nh=" + std::to_string(s.nh) +
         " nkv=" + std::to_string(s.nkv) + " hd=" + std::to_string(s.hd);
}

struct FlashResult {
  Vec out, lse, dqkv;
};

FlashResult run_flash(const Shape& s, const Vec& qkv, const Vec& dout) {
  FlashResult r;
  r.out.assign(size_t(s.b * s.t * s.nh * s.hd), 0.0f);
  r.lse.assign(size_t(s.b * s.nh * s.t), 0.0f);
  r.dqkv.assign(qkv.size(), NAN);  // overwritten entirely
  flash_attention_forward(r.out.data(), r.lse.data(), qkv.data(), s.b, s.t, s.nh, s.nkv, s.hd);
  Vec scratch(size_t(flash_attention_backward_scratch(s.b, s.t, s.nh, s.nkv, s.hd)), NAN);
  flash_attention_backward(r.dqkv.data(), scratch.data(), dout.data(), qkv.data(), r.out.data(),
                           r.lse.data(), s.b, s.t, s.nh, s.nkv, s.hd);
  return r;
}

// lse[b, h, i] = log sum_{j <= i} exp(q_i . k_j / sqrt(hd)), in double.
DVec lse_double(const Shape& s, const Vec& qkv) {
  const int64_t ld = (s.nh + 2 * s.nkv) * s.hd, group = s.nh / s.nkv;
  const double scale = 1.0 / std::sqrt(double(s.hd));
  DVec lse(size_t(s.b * s.nh * s.t));
  for (int64_t bi = 0; bi < s.b; ++bi) {
    for (int64_t h = 0; h < s.nh; ++h) {
      for (int64_t i = 0; i < s.t; ++i) {
        const float* q = qkv.data() + (bi * s.t + i) * ld + h * s.hd;
        DVec sc(size_t(i + 1));
        double mx = -INFINITY;
        for (int64_t j = 0; j <= i; ++j) {
          const float* k = qkv.data() + (bi * s.t + j) * ld + (s.nh + h / group) * s.hd;
          double d = 0.0;
          for (int64_t c = 0; c < s.hd; ++c) d += double(q[c]) * double(k[c]);
          sc[size_t(j)] = d * scale;
          mx = std::max(mx, sc[size_t(j)]);
        }
        double sum = 0.0;
        for (double x : sc) sum += std::exp(x - mx);
        lse[size_t((bi * s.nh + h) * s.t + i)] = mx + std::log(sum);
      }
    }
  }
  return lse;
}

TEST(FlashAttention, MatchesNaiveForwardBackwardAndLse) {
  for (int64_t b : {1, 2}) {
    for (int64_t t : {1, 17, 64, 129, 300}) {
      for (int64_t hd : {8, 64}) {
        for (int64_t nkv : {4, 2, 1}) {
          const Shape s{b, t, 4, nkv, hd};
          SCOPED_TRACE(name(s));
          const int64_t ld = (s.nh + 2 * s.nkv) * s.hd;
          const Vec qkv = random_vec(s.b * s.t * ld, uint32_t(11 + t + hd + nkv + b), -2.0f, 2.0f);
          const Vec dout = random_vec(s.b * s.t * s.nh * s.hd, uint32_t(97 + t + hd + nkv + b));
          // Naive.
          Vec out(dout.size()), probs(size_t(s.b * s.nh * s.t * s.t)), dqkv(qkv.size());
          attention_forward(out.data(), probs.data(), qkv.data(), s.b, s.t, s.nh, s.nkv, s.hd);
          Vec scratch(size_t(attention_backward_scratch(s.b, s.t, s.nh, s.nkv, s.hd)));
          attention_backward(dqkv.data(), scratch.data(), dout.data(), qkv.data(), probs.data(),
                             s.b, s.t, s.nh, s.nkv, s.hd);
          const FlashResult f = run_flash(s, qkv, dout);
          EXPECT_TRUE(close(f.out, to_double(out), 1e-5)) << "forward";
          EXPECT_TRUE(close(f.dqkv, to_double(dqkv), 1e-5)) << "backward";
          // lse: the exact value in double; and consistent with the naive probabilities:
          // p_ii = exp(s_ii - lse_i).
          const DVec want = lse_double(s, qkv);
          const double sc = 1.0 / std::sqrt(double(s.hd));
          for (int64_t bi = 0; bi < s.b; ++bi) {
            for (int64_t h = 0; h < s.nh; ++h) {
              for (int64_t i = 0; i < s.t; ++i) {
                const size_t li = size_t((bi * s.nh + h) * s.t + i);
                ASSERT_NEAR(f.lse[li], want[li], 1e-5 * (1.0 + std::abs(want[li]))) << "lse " << li;
                const float* q = qkv.data() + (bi * s.t + i) * ld + h * s.hd;
                const float* k =
                    qkv.data() + (bi * s.t + i) * ld + (s.nh + h / (s.nh / s.nkv)) * s.hd;
                double sii = 0.0;
                for (int64_t c = 0; c < s.hd; ++c) sii += double(q[c]) * double(k[c]);
                const double pii = probs[size_t(((bi * s.nh + h) * s.t + i) * s.t + i)];
                ASSERT_NEAR(std::exp(sii * sc - double(f.lse[li])), pii, 1e-5 * (1.0 + pii));
              }
            }
          }
        }
      }
    }
  }
}

TEST(FlashAttention, DeterministicAcrossThreadCounts) {
  const int saved = omp_get_max_threads();
  for (const Shape& s :
       {Shape{2, 300, 4, 2, 64}, Shape{1, 129, 4, 1, 8}, Shape{1, 257, 4, 4, 64}}) {
    SCOPED_TRACE(name(s));
    const int64_t ld = (s.nh + 2 * s.nkv) * s.hd;
    const Vec qkv = random_vec(s.b * s.t * ld, 5);
    const Vec dout = random_vec(s.b * s.t * s.nh * s.hd, 6);
    omp_set_num_threads(1);
    const FlashResult one = run_flash(s, qkv, dout);
    omp_set_num_threads(2);
    const FlashResult two = run_flash(s, qkv, dout);
    omp_set_num_threads(3);
    const FlashResult three = run_flash(s, qkv, dout);
    for (const FlashResult* r : {&two, &three}) {
      EXPECT_EQ(0, std::memcmp(one.out.data(), r->out.data(), one.out.size() * sizeof(float)));
      EXPECT_EQ(0, std::memcmp(one.lse.data(), r->lse.data(), one.lse.size() * sizeof(float)));
      EXPECT_EQ(0, std::memcmp(one.dqkv.data(), r->dqkv.data(), one.dqkv.size() * sizeof(float)));
    }
  }
  omp_set_num_threads(saved);
}

TEST(FlashAttention, BackwardScratchDoesNotGrowWithT) {
  const int64_t threads = omp_get_max_threads();
  const int64_t small = flash_attention_backward_scratch(1, 512, 12, 12, 64);
  const int64_t large = flash_attention_backward_scratch(1, 8192, 12, 12, 64);
  EXPECT_EQ(small, large);
  // A few 128 x 64 tiles per thread; the naive backward needs t^2 per thread.
  EXPECT_LT(large, threads * 16 * 128 * 64);
  EXPECT_LT(large * 1000, attention_backward_scratch(1, 8192, 12, 12, 64));
}

}  // namespace
}  // namespace strata::kernels
