// Properties of the optimized kernels that do not need a reference: PyTorch's AdamW formula,
// sums of squares, RoPE's inverse, softmax gradients summing to zero, accumulate-vs-overwrite
// contracts, and results that do not depend on the thread count.
#include <omp.h>

#include <cmath>
#include <functional>

#include "core/error.h"
#include "kernel_test_util.h"
#include "kernels/cpu/kernels.h"

namespace strata::kernels {
namespace {

using namespace testing;

TEST(Properties, AdamwMatchesPytorchFormula) {
  // torch.optim.AdamW's single-tensor step, written out in double the way PyTorch orders it:
  // param.mul_(1 - lr*wd); exp_avg.lerp_(grad, 1-b1); exp_avg_sq.mul_(b2).addcmul_(g, g, 1-b2);
  // denom = exp_avg_sq.sqrt() / sqrt(1 - b2^t) + eps; param.addcdiv_(exp_avg, denom, -lr/(1-b1^t))
  // The hyperparameters as the kernel receives them (float): 1 - 0.999f differs from 1 - 0.999
  // by 1.3e-5 relative, which would otherwise dominate the comparison.
  const double lr = 0.1f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 0.01f, gscale = 0.5f;
  const double grads[3][4] = {{0.5, -0.2, 0.1, 0.0}, {-0.2, 0.3, 0.1, 1e-3}, {0.1, 0.0, -0.4, 2}};
  Vec p = {1.0f, -0.5f, 0.25f, 2.0f}, m(4, 0.0f), v(4, 0.0f);
  DVec wp(p.begin(), p.end()), wm(4, 0.0), wv(4, 0.0);
  for (int step = 1; step <= 3; ++step) {
    Vec g(4);
    for (int i = 0; i < 4; ++i) g[i] = float(grads[step - 1][i]);
    adamw_update(p.data(), g.data(), m.data(), v.data(), 4, float(lr), float(b1), float(b2),
                 float(eps), float(wd), float(gscale), step);
    for (int i = 0; i < 4; ++i) {
      const double gi = double(g[i]) * gscale;
      wp[i] *= 1.0 - lr * wd;
      wm[i] += (gi - wm[i]) * (1.0 - b1);
      wv[i] = wv[i] * b2 + (1.0 - b2) * gi * gi;
      const double denom = std::sqrt(wv[i]) / std::sqrt(1.0 - std::pow(b2, step)) + eps;
      wp[i] -= lr / (1.0 - std::pow(b1, step)) * wm[i] / denom;
    }
  }
  EXPECT_TRUE(close(p, wp, 1e-6));
  EXPECT_TRUE(close(m, wm, 1e-6));
  EXPECT_TRUE(close(v, wv, 1e-6));
  // The first step of Adam moves every parameter with a non-zero gradient by ~lr (sign of -g).
  Vec q = {0.0f}, gq = {3.0f}, mq = {0.0f}, vq = {0.0f};
  adamw_update(q.data(), gq.data(), mq.data(), vq.data(), 1, 0.01f, 0.9f, 0.95f, 1e-8f, 0.0f, 1.0f,
               1);
  EXPECT_NEAR(q[0], -0.01f, 1e-7f);
}

TEST(Properties, SumSquares) {
  for (int64_t count : {0, 1, 17, 255, 256, 257, 100003}) {
    Vec x(count);
    for (int64_t i = 0; i < count; ++i) x[i] = float((i % 7) - 3);  // exact in float and double
    double want = 0.0;
    for (int64_t i = 0; i < count; ++i) want += double(x[i]) * double(x[i]);
    EXPECT_EQ(sum_squares(x.data(), count), want) << "count " << count;
  }
}

TEST(Properties, RopeBackwardInvertsForward) {
  const int64_t b = 2, t = 37, nh = 4, nkv = 2, hd = 6;
  const Vec x = random_vec(b * t * (nh + 2 * nkv) * hd, 1);
  Vec y = x;
  rope_forward(y.data(), {b, t, nh, nkv, hd}, RopeSpec{});
  EXPECT_NE(y, x);
  rope_backward(y.data(), {b, t, nh, nkv, hd}, RopeSpec{});
  EXPECT_TRUE(close(y, to_double(x), 1e-6));
  // v heads are never touched, and position 0 is the identity.
  const int64_t row = (nh + 2 * nkv) * hd;
  Vec z = x;
  rope_forward(z.data(), {b, t, nh, nkv, hd}, RopeSpec{});
  for (int64_t r = 0; r < b * t; ++r) {
    for (int64_t j = (nh + nkv) * hd; j < row; ++j) EXPECT_EQ(z[r * row + j], x[r * row + j]);
  }
  for (int64_t j = 0; j < row; ++j) EXPECT_EQ(z[j], x[j]);
}

// Explicit positions (context parallelism's global positions, document masking's restarts): a row
// given position p is rotated exactly as row p of a sequence is, in forward and backward; the
// learned-position add and its gradient read the table at the given positions too.
TEST(Properties, RopeAndLearnedPositionsAtGivenPositions) {
  const int64_t nh = 4, nkv = 2, hd = 8, row = (nh + 2 * nkv) * hd, t = 300;
  const Vec seq = random_vec(t * row, 3);  // one sequence of t rows, positions 0..t-1
  const std::vector<int32_t> picks = {299, 0, 17, 17, 128, 5};  // repeats, any order
  const int64_t n = static_cast<int64_t>(picks.size());
  const RopeSpec llama3{500000.0, RopeScaling::llama3, 8.0, 1.0, 4.0, 64.0};
  for (const RopeSpec& rope : {RopeSpec{}, llama3}) {
    for (float sign : {1.0f, -1.0f}) {
      Vec whole = seq, rows(n * row);
      for (int64_t i = 0; i < n; ++i)
        std::copy_n(seq.begin() + picks[i] * row, row, rows.begin() + i * row);
      auto apply = sign > 0 ? rope_forward : rope_backward;
      apply(whole.data(), {1, t, nh, nkv, hd}, rope, nullptr);
      apply(rows.data(), {1, n, nh, nkv, hd}, rope, picks.data());
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < row; ++j)
          EXPECT_EQ(rows[i * row + j], whole[picks[i] * row + j]) << "row " << i << " col " << j;
    }
  }
  const int64_t c = 24;
  const Vec wpe = random_vec(t * c, 4), dout = random_vec(n * c, 5);
  Vec out(n * c, 1.0f), dwpe(t * c, 0.0f);
  positions_add_forward(out.data(), wpe.data(), 2, n - 2, t, c, picks.data());
  positions_add_backward(dwpe.data(), dout.data(), 2, n - 2, t, c, picks.data());
  DVec want_dwpe(t * c, 0.0);
  for (int64_t i = 0; i < n - 2; ++i) {
    for (int64_t j = 0; j < c; ++j) {
      EXPECT_EQ(out[i * c + j], 1.0f + wpe[picks[2 + i] * c + j]);
      want_dwpe[picks[2 + i] * c + j] += dout[i * c + j];
    }
  }
  EXPECT_TRUE(close(dwpe, want_dwpe, 1e-6));
}

TEST(Properties, CrossEntropyGradientRowsSumToZero) {
  const int64_t n = 23, v = 301;
  Vec logits = random_vec(n * v, 1, -5.0f, 5.0f);
  auto targets = random_tokens(n, int32_t(v), 2);
  targets[4] = -1;
  Vec losses(n);
  const float scale = 0.25f;
  const double total =
      cross_entropy_forward_backward(losses.data(), logits.data(), targets.data(), n, v, scale);
  double sum_losses = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    double row_sum = 0.0;
    for (int64_t j = 0; j < v; ++j) row_sum += logits[i * v + j];
    EXPECT_NEAR(row_sum, 0.0, 1e-6) << "row " << i;
    if (targets[i] < 0) {
      EXPECT_EQ(losses[i], 0.0f);
      for (int64_t j = 0; j < v; ++j) EXPECT_EQ(logits[i * v + j], 0.0f);
    } else {
      EXPECT_GT(losses[i], 0.0f);
      // Only the target entry is negative: softmax - onehot, scaled.
      EXPECT_LT(logits[i * v + targets[i]], 0.0f);
      EXPECT_GE(logits[i * v + targets[i]], -scale);
    }
    sum_losses += losses[i];
  }
  EXPECT_NEAR(total, sum_losses, 1e-9 * sum_losses);
  // Uniform logits: every loss is log(v).
  Vec flat(3 * v, 0.5f);
  const std::vector<int32_t> t3 = {0, 7, int32_t(v - 1)};
  Vec l3(3);
  EXPECT_NEAR(cross_entropy_forward(l3.data(), flat.data(), t3.data(), 3, v), 3 * std::log(v),
              1e-5);
}

TEST(Properties, CrossEntropyRejectsTargetOutsideVocab) {
  Vec logits(2 * 5), losses(2);
  const std::vector<int32_t> targets = {1, 5};
  EXPECT_THROW(cross_entropy_forward(losses.data(), logits.data(), targets.data(), 2, 5), Error);
}

TEST(Properties, NormsAccumulateIntoDx) {
  const int64_t n = 70, c = 33;
  const Vec x = random_vec(n * c, 1), w = random_vec(c, 2), bias = random_vec(c, 3),
            dy = random_vec(n * c, 4), prior = random_vec(n * c, 5);
  Vec y(n * c), mean(n), rstd(n);
  layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), bias.data(), n, c,
                    1e-5f);
  Vec dx0(n * c, 0.0f), dx1 = prior, dw(c, 0.0f), db(c, 0.0f);
  layernorm_backward(dx0.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), mean.data(),
                     rstd.data(), n, c);
  const Vec dw_once = dw, db_once = db;
  layernorm_backward(dx1.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), mean.data(),
                     rstd.data(), n, c);
  // Up to rounding (the kernel may fuse the += into an FMA), dx1 = prior + dx0.
  DVec want(n * c);
  for (int64_t i = 0; i < n * c; ++i) want[i] = double(prior[i]) + double(dx0[i]);
  EXPECT_TRUE(close(dx1, want, 1e-6));
  DVec dw2(c), db2(c);  // dw, db accumulate too
  for (int64_t j = 0; j < c; ++j) {
    dw2[j] = 2.0 * dw_once[j];
    db2[j] = 2.0 * db_once[j];
  }
  EXPECT_TRUE(close(dw, dw2, 1e-6));
  EXPECT_TRUE(close(db, db2, 1e-6));

  rmsnorm_forward(y.data(), rstd.data(), x.data(), w.data(), n, c, 1e-6f);
  Vec rdx0(n * c, 0.0f), rdx1 = prior, rdw(c, 0.0f);
  rmsnorm_backward(rdx0.data(), rdw.data(), dy.data(), x.data(), w.data(), rstd.data(), n, c);
  const Vec rdw_once = rdw;
  rmsnorm_backward(rdx1.data(), rdw.data(), dy.data(), x.data(), w.data(), rstd.data(), n, c);
  for (int64_t i = 0; i < n * c; ++i) want[i] = double(prior[i]) + double(rdx0[i]);
  EXPECT_TRUE(close(rdx1, want, 1e-6));
  for (int64_t j = 0; j < c; ++j) dw2[j] = 2.0 * rdw_once[j];
  EXPECT_TRUE(close(rdw, dw2, 1e-6));
}

TEST(Properties, AttentionProbsAreCausalRowsOfOne) {
  const int64_t b = 2, t = 70, nh = 2, nkv = 1, hd = 8;
  const Vec qkv = random_vec(b * t * (nh + 2 * nkv) * hd, 1, -3.0f, 3.0f);
  Vec out(b * t * nh * hd), probs(b * nh * t * t, 5.0f);
  attention_forward(out.data(), probs.data(), qkv.data(), b, t, nh, nkv, hd);
  for (int64_t r = 0; r < b * nh * t; ++r) {
    const int64_t t1 = r % t;
    double sum = 0.0;
    for (int64_t t2 = 0; t2 < t; ++t2) {
      const float p = probs[r * t + t2];
      if (t2 > t1) {
        ASSERT_EQ(p, 0.0f) << "row " << r << " col " << t2;
      } else {
        ASSERT_GE(p, 0.0f);
      }
      sum += p;
    }
    ASSERT_NEAR(sum, 1.0, 1e-5) << "row " << r;
  }
}

// Runs fn with 1, 2 and 3 OpenMP threads and expects bitwise-identical outputs.
void expect_thread_count_independent(const std::function<Vec()>& fn, const char* what) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const Vec one = fn();
  for (int threads : {2, 3}) {
    omp_set_num_threads(threads);
    EXPECT_EQ(fn(), one) << what << " differs with " << threads << " threads";
  }
  omp_set_num_threads(saved);
}

TEST(Properties, ResultsDoNotDependOnThreadCount) {
  const int64_t b = 3, t = 29, c = 200, vocab = 7;
  const auto tokens = random_tokens(b * t, vocab, 1);
  const Vec dout = random_vec(b * t * c, 2);
  expect_thread_count_independent(
      [&] {
        Vec dwte(vocab * c, 0.0f), dwpe(t * c, 0.0f);
        embedding_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), b, t, c);
        dwte.insert(dwte.end(), dwpe.begin(), dwpe.end());
        return dwte;
      },
      "embedding_backward");

  const int64_t n = b * t;
  const Vec x = random_vec(n * c, 3), w = random_vec(c, 4), bias = random_vec(c, 5);
  expect_thread_count_independent(
      [&] {
        Vec y(n * c), mean(n), rstd(n), dx(n * c, 0.0f), dw(c, 0.0f), db(c, 0.0f);
        layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), bias.data(), n, c,
                          1e-5f);
        layernorm_backward(dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(),
                           mean.data(), rstd.data(), n, c);
        dx.insert(dx.end(), dw.begin(), dw.end());
        dx.insert(dx.end(), db.begin(), db.end());
        return dx;
      },
      "layernorm");
  expect_thread_count_independent(
      [&] {
        Vec y(n * c), rstd(n), dx(n * c, 0.0f), dw(c, 0.0f);
        rmsnorm_forward(y.data(), rstd.data(), x.data(), w.data(), n, c, 1e-6f);
        rmsnorm_backward(dx.data(), dw.data(), dout.data(), x.data(), w.data(), rstd.data(), n, c);
        dx.insert(dx.end(), dw.begin(), dw.end());
        return dx;
      },
      "rmsnorm");
  expect_thread_count_independent(
      [&] {
        // dbias only: the dx and dw products belong to the GEMM library.
        const int64_t in = 16;
        const Vec xi = random_vec(n * in, 6), wi = random_vec(c * in, 7);
        Vec dw(c * in, 0.0f), db(c, 0.0f);
        linear_backward(nullptr, dw.data(), db.data(), dout.data(), xi.data(), wi.data(), n, in, c);
        return db;
      },
      "linear dbias");
  expect_thread_count_independent(
      [&] {
        const int64_t v = 301;
        Vec logits = random_vec(n * v, 8, -4.0f, 4.0f), losses(n);
        const auto targets = random_tokens(n, int32_t(v), 9);
        const double total = cross_entropy_forward_backward(losses.data(), logits.data(),
                                                            targets.data(), n, v, 0.1f);
        logits.push_back(float(total));
        logits.push_back(float(total - double(float(total))));
        return logits;
      },
      "cross_entropy");
  expect_thread_count_independent(
      [&] {
        const double s = sum_squares(dout.data(), int64_t(dout.size()));
        return Vec{float(s), float(s - double(float(s)))};
      },
      "sum_squares");
  expect_thread_count_independent(
      [&] {
        const int64_t nh = 4, nkv = 2, hd = 8, tt = 70;
        const Vec qkv = random_vec(2 * tt * (nh + 2 * nkv) * hd, 10);
        const Vec dattn = random_vec(2 * tt * nh * hd, 11);
        Vec out(2 * tt * nh * hd), probs(2 * nh * tt * tt), dqkv(qkv.size());
        Vec scratch(attention_backward_scratch(2, tt, nh, nkv, hd));
        attention_forward(out.data(), probs.data(), qkv.data(), 2, tt, nh, nkv, hd);
        attention_backward(dqkv.data(), scratch.data(), dattn.data(), qkv.data(), probs.data(), 2,
                           tt, nh, nkv, hd);
        out.insert(out.end(), dqkv.begin(), dqkv.end());
        return out;
      },
      "attention");
}

TEST(Properties, LinearBackwardIsRunToRunDeterministic) {
  const int64_t n = 300, in = 96, out = 80;
  const Vec x = random_vec(n * in, 1), w = random_vec(out * in, 2), dy = random_vec(n * out, 3);
  auto run = [&] {
    Vec dx(n * in), dw(out * in, 0.0f), db(out, 0.0f);
    linear_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), n, in, out);
    dx.insert(dx.end(), dw.begin(), dw.end());
    dx.insert(dx.end(), db.begin(), db.end());
    return dx;
  };
  const Vec first = run();
  EXPECT_EQ(run(), first);
}

}  // namespace
}  // namespace strata::kernels
