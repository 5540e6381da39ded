// Every reference backward against central finite differences, in double precision.
// Each check defines a scalar loss L = sum(forward outputs * R) for fixed random R, runs the
// reference backward with dout = R, and compares every input gradient with
// (L(x + h e_i) - L(x - h e_i)) / 2h, h = 1e-6. In double, truncation error is O(h^2) ~ 1e-12
// and rounding error ~ 1e-16 * |L| / h ~ 1e-10, so 1e-7 relative is a tight test.
#include <functional>

#include "kernel_test_util.h"
#include "kernels/cpu/reference.h"

namespace strata::kernels {
namespace {

using namespace testing;

constexpr double kTol = 1e-7;

TEST(FiniteDiff, Linear) {
  const int64_t n = 5, in = 7, out = 3;
  DVec x = random_dvec(n * in, 1), w = random_dvec(out * in, 2), b = random_dvec(out, 3);
  const DVec r = random_dvec(n * out, 4);
  auto loss = [&] {
    DVec y(n * out);
    ref::linear_forward<double>(y.data(), x.data(), w.data(), b.data(), n, in, out);
    return dot(y, r);
  };
  DVec dx(n * in), dw(out * in, 0.0), db(out, 0.0);
  ref::linear_backward<double>(dx.data(), dw.data(), db.data(), r.data(), x.data(), w.data(), n, in,
                               out);
  EXPECT_TRUE(close(dx, numeric_grad(x, loss), kTol));
  EXPECT_TRUE(close(dw, numeric_grad(w, loss), kTol));
  EXPECT_TRUE(close(db, numeric_grad(b, loss), kTol));
}

TEST(FiniteDiff, Embedding) {
  const int64_t b = 2, t = 3, c = 4, vocab = 5;
  const std::vector<int32_t> tokens = {1, 3, 1, 4, 1, 0};  // token 1 repeats
  DVec wte = random_dvec(vocab * c, 1), wpe = random_dvec(t * c, 2);
  const DVec r = random_dvec(b * t * c, 3);
  auto loss = [&] {
    DVec out(b * t * c);
    ref::embedding_forward<double>(out.data(), tokens.data(), wte.data(), wpe.data(), b, t, c);
    return dot(out, r);
  };
  DVec dwte(vocab * c, 0.0), dwpe(t * c, 0.0);
  ref::embedding_backward<double>(dwte.data(), dwpe.data(), r.data(), tokens.data(), b, t, c);
  EXPECT_TRUE(close(dwte, numeric_grad(wte, loss), kTol));
  EXPECT_TRUE(close(dwpe, numeric_grad(wpe, loss), kTol));
}

TEST(FiniteDiff, LayerNorm) {
  const int64_t n = 3, c = 7;
  DVec x = random_dvec(n * c, 1, -2.0, 3.0), w = random_dvec(c, 2), b = random_dvec(c, 3);
  const DVec r = random_dvec(n * c, 4);
  DVec mean(n), rstd(n);
  auto loss = [&] {
    DVec y(n * c);
    ref::layernorm_forward<double>(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(),
                                   n, c, 1e-5);
    return dot(y, r);
  };
  loss();  // fills mean and rstd at the unperturbed x
  const DVec mean0 = mean, rstd0 = rstd;
  DVec dx(n * c, 0.0), dw(c, 0.0), db(c, 0.0);
  ref::layernorm_backward<double>(dx.data(), dw.data(), db.data(), r.data(), x.data(), w.data(),
                                  mean0.data(), rstd0.data(), n, c);
  EXPECT_TRUE(close(dx, numeric_grad(x, loss), kTol));
  EXPECT_TRUE(close(dw, numeric_grad(w, loss), kTol));
  EXPECT_TRUE(close(db, numeric_grad(b, loss), kTol));
}

TEST(FiniteDiff, RmsNorm) {
  const int64_t n = 3, c = 7;
  DVec x = random_dvec(n * c, 1, -2.0, 3.0), w = random_dvec(c, 2);
  const DVec r = random_dvec(n * c, 4);
  DVec rstd(n);
  auto loss = [&] {
    DVec y(n * c);
    ref::rmsnorm_forward<double>(y.data(), rstd.data(), x.data(), w.data(), n, c, 1e-6);
    return dot(y, r);
  };
  loss();
  const DVec rstd0 = rstd;
  DVec dx(n * c, 0.0), dw(c, 0.0);
  ref::rmsnorm_backward<double>(dx.data(), dw.data(), r.data(), x.data(), w.data(), rstd0.data(), n,
                                c);
  EXPECT_TRUE(close(dx, numeric_grad(x, loss), kTol));
  EXPECT_TRUE(close(dw, numeric_grad(w, loss), kTol));
}

TEST(FiniteDiff, Gelu) {
  const int64_t count = 41;
  DVec x = random_dvec(count, 1, -5.0, 5.0);
  const DVec r = random_dvec(count, 2);
  auto loss = [&] {
    DVec y(count);
    ref::gelu_forward<double>(y.data(), x.data(), count);
    return dot(y, r);
  };
  DVec dx(count);
  ref::gelu_backward<double>(dx.data(), x.data(), r.data(), count);
  EXPECT_TRUE(close(dx, numeric_grad(x, loss), kTol));
}

TEST(FiniteDiff, SwiGlu) {
  const int64_t n = 3, f = 5;
  DVec gu = random_dvec(n * 2 * f, 1, -4.0, 4.0);
  const DVec r = random_dvec(n * f, 2);
  auto loss = [&] {
    DVec y(n * f);
    ref::swiglu_forward<double>(y.data(), gu.data(), n, f);
    return dot(y, r);
  };
  DVec dgu(n * 2 * f);
  ref::swiglu_backward<double>(dgu.data(), gu.data(), r.data(), n, f);
  EXPECT_TRUE(close(dgu, numeric_grad(gu, loss), kTol));
}

TEST(FiniteDiff, Rope) {
  const int64_t b = 2, t = 5, nh = 2, nkv = 1, hd = 6;
  const int64_t count = b * t * (nh + 2 * nkv) * hd;
  DVec qkv = random_dvec(count, 1);
  const DVec r = random_dvec(count, 2);
  auto loss = [&] {
    DVec y = qkv;
    ref::rope_forward<double>(y.data(), {b, t, nh, nkv, hd}, RopeSpec{.theta = 100.0});
    return dot(y, r);
  };
  DVec g = r;
  ref::rope_backward<double>(g.data(), {b, t, nh, nkv, hd}, RopeSpec{.theta = 100.0});
  EXPECT_TRUE(close(g, numeric_grad(qkv, loss), kTol));
}

TEST(FiniteDiff, HeadRmsNorm) {
  const AttentionShape s{2, 3, 4, 2, 6};
  const int64_t count = s.rows() * s.qkv_width(), kept = s.rows() * s.qk_heads();
  DVec qkv = random_dvec(count, 1);
  DVec wq = random_dvec(s.head_dim, 3, 0.5, 1.5), wk = random_dvec(s.head_dim, 4, 0.5, 1.5);
  const DVec r = random_dvec(count, 2);
  auto loss = [&] {
    DVec y = qkv, pre(kept * s.head_dim), rstd(kept);
    ref::head_rmsnorm_forward<double>(y.data(), pre.data(), rstd.data(), wq.data(), wk.data(), s,
                                      1e-6);
    return dot(y, r);
  };
  DVec y = qkv, pre(kept * s.head_dim), rstd(kept);
  ref::head_rmsnorm_forward<double>(y.data(), pre.data(), rstd.data(), wq.data(), wk.data(), s,
                                    1e-6);
  DVec g = r, dwq(s.head_dim, 0.0), dwk(s.head_dim, 0.0);
  ref::head_rmsnorm_backward<double>(g.data(), dwq.data(), dwk.data(), pre.data(), rstd.data(),
                                     wq.data(), wk.data(), s);
  EXPECT_TRUE(close(g, numeric_grad(qkv, loss), kTol));
  EXPECT_TRUE(close(dwq, numeric_grad(wq, loss), kTol));
  EXPECT_TRUE(close(dwk, numeric_grad(wk, loss), kTol));
}

TEST(FiniteDiff, Attention) {
  for (int64_t nkv : {2, 1}) {
    const int64_t b = 2, t = 4, nh = 2, hd = 3;
    DVec qkv = random_dvec(b * t * (nh + 2 * nkv) * hd, 1, -1.5, 1.5);
    const DVec r = random_dvec(b * t * nh * hd, 2);
    DVec probs(b * nh * t * t);
    auto loss = [&] {
      DVec out(b * t * nh * hd);
      ref::attention_forward<double>(out.data(), probs.data(), qkv.data(), b, t, nh, nkv, hd);
      return dot(out, r);
    };
    loss();
    const DVec probs0 = probs;
    DVec dqkv(qkv.size());
    ref::attention_backward<double>(dqkv.data(), r.data(), qkv.data(), probs0.data(), b, t, nh, nkv,
                                    hd);
    EXPECT_TRUE(close(dqkv, numeric_grad(qkv, loss), kTol)) << "nkv " << nkv;
  }
}

TEST(FiniteDiff, CrossEntropy) {
  const int64_t n = 4, v = 9;
  DVec logits = random_dvec(n * v, 1, -3.0, 3.0);
  const std::vector<int32_t> targets = {2, -1, 8, 0};
  auto loss = [&] {
    DVec losses(n);
    return ref::cross_entropy_forward<double>(losses.data(), logits.data(), targets.data(), n, v);
  };
  DVec grad = logits, losses(n);
  ref::cross_entropy_forward_backward<double>(losses.data(), grad.data(), targets.data(), n, v,
                                              1.0);
  EXPECT_TRUE(close(grad, numeric_grad(logits, loss), kTol));
}

}  // namespace
}  // namespace strata::kernels
