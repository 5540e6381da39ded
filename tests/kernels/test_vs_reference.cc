// Every optimized kernel against its naive reference run in double on the same float inputs,
// on odd shapes (nothing a multiple of 16 or of the kernels' block sizes).
#include <omp.h>

#include "kernel_test_util.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/reference.h"

namespace strata::kernels {
namespace {

using namespace testing;

constexpr double kTol = 1e-5;  // relative, f32 kernels vs the double reference

TEST(VsReference, LinearForward) {
  const int64_t n = 37, in = 53, out = 29;
  Vec x = random_vec(n * in, 1), w = random_vec(out * in, 2), bias = random_vec(out, 3);
  for (bool with_bias : {true, false}) {
    Vec y(n * out);
    DVec want(n * out);
    ref::linear_forward<double>(want.data(), to_double(x).data(), to_double(w).data(),
                                with_bias ? to_double(bias).data() : nullptr, n, in, out);
    linear_forward(y.data(), x.data(), w.data(), with_bias ? bias.data() : nullptr, n, in, out);
    EXPECT_TRUE(close(y, want, kTol)) << "bias " << with_bias;
  }
}

TEST(VsReference, LinearBackward) {
  // out 157: whole column-sum blocks of the bias gradient (four vectors) at every width, then a
  // partial one.
  for (const int64_t out : {int64_t{29}, int64_t{157}}) {
    const int64_t n = 37, in = 53;
    Vec x = random_vec(n * in, 1), w = random_vec(out * in, 2), dy = random_vec(n * out, 3);
    // dw and dbias accumulate: start them non-zero.
    Vec dx(n * in), dw = random_vec(out * in, 4), db = random_vec(out, 5);
    DVec wdx(n * in), wdw = to_double(dw), wdb = to_double(db);
    ref::linear_backward<double>(wdx.data(), wdw.data(), wdb.data(), to_double(dy).data(),
                                 to_double(x).data(), to_double(w).data(), n, in, out);
    linear_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), n, in, out);
    EXPECT_TRUE(close(dx, wdx, kTol)) << "out " << out;
    EXPECT_TRUE(close(dw, wdw, kTol)) << "out " << out;
    EXPECT_TRUE(close(db, wdb, kTol)) << "out " << out;
    // dx and dbias may be null.
    Vec dw2 = random_vec(out * in, 4);
    linear_backward(nullptr, dw2.data(), nullptr, dy.data(), x.data(), w.data(), n, in, out);
    EXPECT_TRUE(close(dw2, wdw, kTol)) << "out " << out;
  }
}

TEST(VsReference, Embedding) {
  const int64_t b = 3, t = 17, c = 53, vocab = 11;  // small vocab: repeated tokens
  auto tokens = random_tokens(b * t, vocab, 1);
  Vec wte = random_vec(vocab * c, 2), wpe = random_vec(t * c, 3), dout = random_vec(b * t * c, 4);
  for (bool with_wpe : {true, false}) {
    Vec out(b * t * c);
    DVec want(b * t * c);
    ref::embedding_forward<double>(want.data(), tokens.data(), to_double(wte).data(),
                                   with_wpe ? to_double(wpe).data() : nullptr, b, t, c);
    embedding_forward(out.data(), tokens.data(), wte.data(), with_wpe ? wpe.data() : nullptr, b, t,
                      c);
    EXPECT_TRUE(close(out, want, kTol));

    Vec dwte = random_vec(vocab * c, 5), dwpe = random_vec(t * c, 6);
    DVec wdwte = to_double(dwte), wdwpe = to_double(dwpe);
    ref::embedding_backward<double>(wdwte.data(), with_wpe ? wdwpe.data() : nullptr,
                                    to_double(dout).data(), tokens.data(), b, t, c);
    embedding_backward(dwte.data(), with_wpe ? dwpe.data() : nullptr, dout.data(), tokens.data(), b,
                       t, c);
    EXPECT_TRUE(close(dwte, wdwte, kTol));
    EXPECT_TRUE(close(dwpe, wdwpe, kTol));
  }
}

TEST(VsReference, LayerNorm) {
  const int64_t n = 131, c = 53;  // more rows than one backward block (64)
  Vec x = random_vec(n * c, 1, -2.0f, 3.0f), w = random_vec(c, 2), bias = random_vec(c, 3);
  Vec y(n * c), mean(n), rstd(n);
  DVec wy(n * c), wmean(n), wrstd(n);
  ref::layernorm_forward<double>(wy.data(), wmean.data(), wrstd.data(), to_double(x).data(),
                                 to_double(w).data(), to_double(bias).data(), n, c, 1e-5);
  layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), bias.data(), n, c,
                    1e-5f);
  EXPECT_TRUE(close(y, wy, kTol));
  EXPECT_TRUE(close(mean, wmean, kTol));
  EXPECT_TRUE(close(rstd, wrstd, kTol));

  Vec dy = random_vec(n * c, 4), dx = random_vec(n * c, 5), dw = random_vec(c, 6),
      db = random_vec(c, 7);
  DVec wdx = to_double(dx), wdw = to_double(dw), wdb = to_double(db);
  ref::layernorm_backward<double>(wdx.data(), wdw.data(), wdb.data(), to_double(dy).data(),
                                  to_double(x).data(), to_double(w).data(), wmean.data(),
                                  wrstd.data(), n, c);
  layernorm_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), mean.data(),
                     rstd.data(), n, c);
  EXPECT_TRUE(close(dx, wdx, kTol));
  EXPECT_TRUE(close(dw, wdw, kTol));
  EXPECT_TRUE(close(db, wdb, kTol));
}

TEST(VsReference, RmsNorm) {
  const int64_t n = 131, c = 53;
  Vec x = random_vec(n * c, 1, -2.0f, 3.0f), w = random_vec(c, 2);
  Vec y(n * c), rstd(n);
  DVec wy(n * c), wrstd(n);
  ref::rmsnorm_forward<double>(wy.data(), wrstd.data(), to_double(x).data(), to_double(w).data(), n,
                               c, 1e-6);
  rmsnorm_forward(y.data(), rstd.data(), x.data(), w.data(), n, c, 1e-6f);
  EXPECT_TRUE(close(y, wy, kTol));
  EXPECT_TRUE(close(rstd, wrstd, kTol));

  Vec dy = random_vec(n * c, 4), dx = random_vec(n * c, 5), dw = random_vec(c, 6);
  DVec wdx = to_double(dx), wdw = to_double(dw);
  ref::rmsnorm_backward<double>(wdx.data(), wdw.data(), to_double(dy).data(), to_double(x).data(),
                                to_double(w).data(), wrstd.data(), n, c);
  rmsnorm_backward(dx.data(), dw.data(), dy.data(), x.data(), w.data(), rstd.data(), n, c);
  EXPECT_TRUE(close(dx, wdx, kTol));
  EXPECT_TRUE(close(dw, wdw, kTol));
}

TEST(VsReference, Gelu) {
  const int64_t count = 10007;  // several parallel chunks and a masked tail
  Vec x = random_vec(count, 1, -9.0f, 9.0f), dy = random_vec(count, 2);
  Vec y(count), dx(count);
  DVec wy(count), wdx(count);
  ref::gelu_forward<double>(wy.data(), to_double(x).data(), count);
  ref::gelu_backward<double>(wdx.data(), to_double(x).data(), to_double(dy).data(), count);
  gelu_forward(y.data(), x.data(), count);
  gelu_backward(dx.data(), x.data(), dy.data(), count);
  EXPECT_TRUE(close(y, wy, kTol));
  EXPECT_TRUE(close(dx, wdx, kTol));
  // dx may alias dy.
  Vec d = dy;
  gelu_backward(d.data(), x.data(), d.data(), count);
  EXPECT_EQ(d, dx);
}

TEST(VsReference, SwiGlu) {
  const int64_t n = 37, f = 53;
  Vec gu = random_vec(n * 2 * f, 1, -8.0f, 8.0f), dy = random_vec(n * f, 2);
  Vec y(n * f), dgu(n * 2 * f);
  DVec wy(n * f), wdgu(n * 2 * f);
  ref::swiglu_forward<double>(wy.data(), to_double(gu).data(), n, f);
  ref::swiglu_backward<double>(wdgu.data(), to_double(gu).data(), to_double(dy).data(), n, f);
  swiglu_forward(y.data(), gu.data(), n, f);
  swiglu_backward(dgu.data(), gu.data(), dy.data(), n, f);
  EXPECT_TRUE(close(y, wy, kTol));
  EXPECT_TRUE(close(dgu, wdgu, kTol));
  // In place (dgate_up = gate_up) gives the same result: each element is read before written.
  Vec inplace = gu;
  swiglu_backward(inplace.data(), inplace.data(), dy.data(), n, f);
  EXPECT_EQ(inplace, dgu);
}

TEST(VsReference, Rope) {
  const int64_t b = 2, t = 17, nh = 4, hd = 8;
  // Plain RoPE, and Llama 3's rescaling with a short original context so that pairs fall in all
  // three bands (kept, interpolated, slowed) at hd 8.
  const RopeSpec llama3{.theta = 10000.0,
                        .scaling = RopeScaling::llama3,
                        .factor = 8.0,
                        .low_freq_factor = 1.0,
                        .high_freq_factor = 4.0,
                        .original_max_positions = 64.0};
  for (const RopeSpec& rope : {RopeSpec{}, llama3}) {
    for (int64_t nkv : {4, 2, 1}) {
      const AttentionShape s{b, t, nh, nkv, hd};
      const int64_t count = s.rows() * s.qkv_width();
      Vec qkv = random_vec(count, 1);
      DVec want = to_double(qkv);
      ref::rope_forward<double>(want.data(), s, rope);
      rope_forward(qkv.data(), s, rope);
      EXPECT_TRUE(close(qkv, want, kTol)) << "nkv " << nkv;
      Vec g = random_vec(count, 2);
      DVec wg = to_double(g);
      ref::rope_backward<double>(wg.data(), s, rope);
      rope_backward(g.data(), s, rope);
      EXPECT_TRUE(close(g, wg, kTol)) << "nkv " << nkv;
    }
  }
}

TEST(VsReference, RopeLlama3FrequencyBands) {
  // transformers' _compute_llama3_parameters for theta 500000, factor 8, low 1, high 4, original
  // context 8192, hd 128: pair 0 is kept, pair 63 slowed by 8, and a pair in between smoothed.
  const RopeSpec r{.theta = 500000.0, .scaling = RopeScaling::llama3};
  const RopeSpec plain{.theta = 500000.0};
  EXPECT_EQ(rope_inv_freq(r, 0, 128), rope_inv_freq(plain, 0, 128));
  EXPECT_DOUBLE_EQ(rope_inv_freq(r, 63, 128), rope_inv_freq(plain, 63, 128) / 8.0);
  int smoothed = 0;
  for (int64_t i = 0; i < 64; ++i) {
    const double got = rope_inv_freq(r, i, 128), base = rope_inv_freq(plain, i, 128);
    EXPECT_LE(got, base);
    EXPECT_GE(got, base / 8.0);
    if (got < base && got > base / 8.0) ++smoothed;
  }
  EXPECT_GT(smoothed, 0);
}

TEST(VsReference, HeadRmsNorm) {
  for (const AttentionShape s : {AttentionShape{2, 5, 4, 2, 64}, AttentionShape{1, 3, 2, 2, 6},
                                 AttentionShape{3, 7, 4, 1, 128}}) {
    const int64_t count = s.rows() * s.qkv_width(), kept = s.rows() * s.qk_heads();
    const Vec qkv = random_vec(count, 1), wq = random_vec(s.head_dim, 2),
              wk = random_vec(s.head_dim, 3), dy = random_vec(count, 4);
    Vec y = qkv, pre(kept * s.head_dim), rstd(kept);
    head_rmsnorm_forward(y.data(), pre.data(), rstd.data(), wq.data(), wk.data(), s, 1e-6f);
    DVec wy = to_double(qkv), wpre(kept * s.head_dim), wrstd(kept);
    const DVec dwq_in = to_double(wq), dwk_in = to_double(wk);
    ref::head_rmsnorm_forward<double>(wy.data(), wpre.data(), wrstd.data(), dwq_in.data(),
                                      dwk_in.data(), s, 1e-6);
    EXPECT_TRUE(close(y, wy, kTol));
    EXPECT_TRUE(close(pre, wpre, 0.0));
    EXPECT_TRUE(close(rstd, wrstd, kTol));
    Vec g = dy, dwq(s.head_dim, 0.5f), dwk(s.head_dim, -0.5f);  // dw accumulates
    head_rmsnorm_backward(g.data(), dwq.data(), dwk.data(), pre.data(), rstd.data(), wq.data(),
                          wk.data(), s);
    DVec wg = to_double(dy), wdwq(s.head_dim, 0.5), wdwk(s.head_dim, -0.5);
    ref::head_rmsnorm_backward<double>(wg.data(), wdwq.data(), wdwk.data(), wpre.data(),
                                       wrstd.data(), dwq_in.data(), dwk_in.data(), s);
    EXPECT_TRUE(close(g, wg, kTol));
    EXPECT_TRUE(close(dwq, wdwq, kTol));
    EXPECT_TRUE(close(dwk, wdwk, kTol));
    // v heads are untouched in both directions.
    const int64_t v0 = s.qk_heads() * s.head_dim;
    for (int64_t r = 0; r < s.rows(); ++r)
      for (int64_t j = v0; j < s.qkv_width(); ++j) {
        ASSERT_EQ(y[r * s.qkv_width() + j], qkv[r * s.qkv_width() + j]);
        ASSERT_EQ(g[r * s.qkv_width() + j], dy[r * s.qkv_width() + j]);
      }
  }
}

struct AttnShape {
  int64_t b, t, nh, nkv, hd;
};

void check_attention(const AttnShape& s) {
  SCOPED_TRACE(::testing::Message() << "b=" << s.b << " t=" << s.t << " nh=" << s.nh
                                    << " nkv=" << s.nkv << " hd=" << s.hd);
  const int64_t row = (s.nh + 2 * s.nkv) * s.hd;
  Vec qkv = random_vec(s.b * s.t * row, 1, -2.0f, 2.0f);
  Vec dout = random_vec(s.b * s.t * s.nh * s.hd, 2);
  Vec out(s.b * s.t * s.nh * s.hd), probs(s.b * s.nh * s.t * s.t, -1.0f);
  DVec wout(out.size()), wprobs(probs.size());
  const DVec qkvd = to_double(qkv);
  ref::attention_forward<double>(wout.data(), wprobs.data(), qkvd.data(), s.b, s.t, s.nh, s.nkv,
                                 s.hd);
  attention_forward(out.data(), probs.data(), qkv.data(), s.b, s.t, s.nh, s.nkv, s.hd);
  EXPECT_TRUE(close(out, wout, 2e-5));
  EXPECT_TRUE(close(probs, wprobs, 2e-5));

  Vec dqkv(qkv.size(), 123.0f);  // overwritten entirely
  Vec scratch(attention_backward_scratch(s.b, s.t, s.nh, s.nkv, s.hd));
  DVec wdqkv(qkv.size());
  ref::attention_backward<double>(wdqkv.data(), to_double(dout).data(), qkvd.data(), wprobs.data(),
                                  s.b, s.t, s.nh, s.nkv, s.hd);
  attention_backward(dqkv.data(), scratch.data(), dout.data(), qkv.data(), probs.data(), s.b, s.t,
                     s.nh, s.nkv, s.hd);
  EXPECT_TRUE(close(dqkv, wdqkv, 2e-5));
}

TEST(VsReference, Attention) {
  for (const AttnShape& s :
       {AttnShape{2, 17, 4, 4, 8}, AttnShape{2, 17, 4, 2, 6}, AttnShape{3, 17, 4, 1, 8},
        AttnShape{1, 1, 2, 1, 6},
        // t = 150: three 64-row blocks, with 6-row tiles straddling them
        AttnShape{2, 150, 2, 1, 8},
        // head_dim > 64 and not a multiple of 16: two column chunks, masked tails
        AttnShape{1, 70, 4, 2, 72}, AttnShape{2, 33, 2, 2, 20}}) {
    check_attention(s);
  }
}

TEST(VsReference, CrossEntropy) {
  const int64_t n = 37, v = 301;
  Vec logits = random_vec(n * v, 1, -6.0f, 6.0f);
  auto targets = random_tokens(n, int32_t(v), 2);
  targets[3] = -1;
  targets[20] = -1;
  targets[36] = -100;  // any negative target is ignored
  Vec losses(n, 7.0f);
  DVec wlosses(n);
  const double want_total = ref::cross_entropy_forward<double>(
      wlosses.data(), to_double(logits).data(), targets.data(), n, v);
  const double total = cross_entropy_forward(losses.data(), logits.data(), targets.data(), n, v);
  EXPECT_TRUE(close(losses, wlosses, kTol));
  EXPECT_NEAR(total, want_total, 1e-5 * std::abs(want_total));

  Vec grad = logits;
  DVec wgrad = to_double(logits);
  const float scale = 1.0f / 34.0f;
  const double want_total2 = ref::cross_entropy_forward_backward<double>(
      wlosses.data(), wgrad.data(), targets.data(), n, v, double(scale));
  const double total2 =
      cross_entropy_forward_backward(losses.data(), grad.data(), targets.data(), n, v, scale);
  EXPECT_TRUE(close(losses, wlosses, kTol));
  EXPECT_NEAR(total2, want_total2, 1e-5 * std::abs(want_total2));
  EXPECT_TRUE(close(grad, wgrad, kTol));
}

TEST(VsReference, CrossEntropyLargeVocab) {
  // GPT-2's padded vocabulary: long rows, many masked-tail-free steps, double accumulation.
  const int64_t n = 5, v = 50304;
  Vec logits = random_vec(n * v, 3, -10.0f, 10.0f);
  auto targets = random_tokens(n, int32_t(v), 4);
  Vec losses(n), grad = logits;
  DVec wlosses(n), wgrad = to_double(logits);
  ref::cross_entropy_forward_backward<double>(wlosses.data(), wgrad.data(), targets.data(), n, v,
                                              1.0);
  cross_entropy_forward_backward(losses.data(), grad.data(), targets.data(), n, v, 1.0f);
  EXPECT_TRUE(close(losses, wlosses, kTol));
  EXPECT_TRUE(close(grad, wgrad, kTol));
}

TEST(VsReference, Elementwise) {
  const int64_t count = 20011;  // more than two parallel chunks, and a tail
  Vec a = random_vec(count, 1), b = random_vec(count, 2), out(count);
  DVec want(count);
  ref::add<double>(want.data(), to_double(a).data(), to_double(b).data(), count);
  add(out.data(), a.data(), b.data(), count);
  EXPECT_TRUE(close(out, want, 1e-7));
  add_inplace(a.data(), b.data(), count);
  EXPECT_EQ(a, out);
  ref::scale_inplace<double>(want.data(), 0.3, count);
  scale_inplace(out.data(), 0.3f, count);
  EXPECT_TRUE(close(out, want, 1e-7));
}

TEST(VsReference, AdamwAndSumSquares) {
  const int64_t count = 1003;
  Vec p = random_vec(count, 1), m = random_vec(count, 2, -0.1f, 0.1f),
      v = random_vec(count, 3, 0.0f, 0.01f);
  DVec wp = to_double(p), wm = to_double(m), wv = to_double(v);
  for (int64_t step = 1; step <= 3; ++step) {
    Vec g = random_vec(count, 10 + uint32_t(step));
    ref::adamw_update<double>(wp.data(), to_double(g).data(), wm.data(), wv.data(), count, 1e-3,
                              0.9, 0.95, 1e-8, 0.1, 0.5, step);
    adamw_update(p.data(), g.data(), m.data(), v.data(), count, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f,
                 0.5f, step);
  }
  EXPECT_TRUE(close(p, wp, kTol));
  EXPECT_TRUE(close(m, wm, kTol));
  EXPECT_TRUE(close(v, wv, kTol));
  const double want = ref::sum_squares<double>(to_double(p).data(), count);
  EXPECT_NEAR(sum_squares(p.data(), count), want, 1e-12 * want);
}

// With a bf16 output, AdamW's f32 results are unchanged and the copy is exactly to_lowp's
// rounding of them (a count that ends inside a block and inside a vector).
TEST(VsReference, AdamwWritesTheBf16CopyExactly) {
  const int64_t count = 5003;
  Vec p = random_vec(count, 1), m = random_vec(count, 2, -0.1f, 0.1f),
      v = random_vec(count, 3, 0.0f, 0.01f), g = random_vec(count, 4);
  Vec p2 = p, m2 = m, v2 = v;
  std::vector<uint16_t> copy(static_cast<size_t>(count), 0), want(copy.size());
  adamw_update(p.data(), g.data(), m.data(), v.data(), count, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f,
               2);
  adamw_update(p2.data(), g.data(), m2.data(), v2.data(), count, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f,
               0.5f, 2, copy.data());
  EXPECT_EQ(p, p2);
  EXPECT_EQ(m, m2);
  EXPECT_EQ(v, v2);
  to_lowp(DType::bf16, want.data(), p.data(), count);
  EXPECT_EQ(copy, want);
}

}  // namespace
}  // namespace strata::kernels
