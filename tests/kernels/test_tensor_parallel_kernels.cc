// The tensor-parallel kernels, composed over simulated ranks (vocabulary blocks, row blocks), give
// what the whole-tensor reference gives: embedding lookup and its gradient, learned positions on
// row blocks, vocabulary-parallel cross-entropy (loss and dlogits) without the full logits.
#include <gtest/gtest.h>

#include "kernel_test_util.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/reference.h"

namespace strata::kernels {
namespace {

using namespace testing;
constexpr double kTol = 1e-5;

TEST(TensorParallelKernels, VocabRangeEmbeddingSumsToTheWhole) {
  const int64_t n = 29, c = 37, vocab = 12;
  auto tokens = random_tokens(n, vocab, 1);
  Vec wte = random_vec(vocab * c, 2), dout = random_vec(n * c, 3);
  DVec want(n * c), wdwte(vocab * c, 0.0);
  ref::embedding_forward<double>(want.data(), tokens.data(), to_double(wte).data(), nullptr, 1, n,
                                 c);
  ref::embedding_backward<double>(wdwte.data(), nullptr, to_double(dout).data(), tokens.data(), 1,
                                  n, c);
  for (int64_t ranks : {1, 2, 3, 4}) {
    const int64_t rows = vocab / ranks;
    Vec sum(n * c, 0.0f), dwte(vocab * c, 0.0f), part(n * c);
    for (int64_t r = 0; r < ranks; ++r) {
      embedding_range_forward(part.data(), tokens.data(), wte.data() + r * rows * c, r * rows, rows,
                              n, c);
      add_inplace(sum.data(), part.data(), n * c);
      embedding_range_backward(dwte.data() + r * rows * c, dout.data(), tokens.data(), r * rows,
                               rows, n, c);
    }
    EXPECT_TRUE(close(sum.data(), want.data(), n * c, kTol)) << ranks << " ranks";
    EXPECT_TRUE(close(dwte.data(), wdwte.data(), vocab * c, kTol)) << ranks << " ranks";
  }
}

TEST(TensorParallelKernels, PositionsOnRowBlocks) {
  const int64_t b = 3, t = 8, c = 21, n = b * t;
  Vec wpe = random_vec(t * c, 1), dout = random_vec(n * c, 2);
  std::vector<int32_t> zeros(n, 0);
  Vec zero_table(c, 0.0f);
  DVec want(n * c), wdwpe(t * c, 0.0), dummy(c, 0.0);
  ref::embedding_forward<double>(want.data(), zeros.data(), DVec(c, 0.0).data(),
                                 to_double(wpe).data(), b, t, c);
  ref::embedding_backward<double>(dummy.data(), wdwpe.data(), to_double(dout).data(), zeros.data(),
                                  b, t, c);
  for (int64_t ranks : {1, 2, 4, 6}) {
    const int64_t rows = n / ranks;
    Vec out(n * c, 0.0f), dwpe(t * c, 0.0f);
    for (int64_t r = 0; r < ranks; ++r) {
      positions_add_forward(out.data() + r * rows * c, wpe.data(), r * rows, rows, t, c);
      positions_add_backward(dwpe.data(), dout.data() + r * rows * c, r * rows, rows, t, c);
    }
    EXPECT_TRUE(close(out.data(), want.data(), n * c, kTol)) << ranks << " ranks";
    EXPECT_TRUE(close(dwpe.data(), wdwpe.data(), t * c, kTol)) << ranks << " ranks";
  }
}

TEST(TensorParallelKernels, AddBias) {
  const int64_t n = 7, c = 19;
  Vec y = random_vec(n * c, 1), bias = random_vec(c, 2);
  DVec want = to_double(y);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < c; ++j) want[i * c + j] += bias[j];
  add_bias(y.data(), bias.data(), n, c);
  EXPECT_TRUE(close(y.data(), want.data(), n * c, kTol));
}

// Simulates `ranks` vocabulary blocks with the reductions done by hand, as the Decoder does them
// through the tp group's all-reduces.
TEST(TensorParallelKernels, VocabParallelCrossEntropyMatchesTheWhole) {
  const int64_t n = 23, v = 120;
  Vec logits = random_vec(n * v, 1, -6.0f, 6.0f);
  auto targets = random_tokens(n, int32_t(v), 2);
  targets[4] = -1;
  const float scale = 1.0f / 17.0f;
  DVec wlosses(n), wgrad = to_double(logits);
  const double want = ref::cross_entropy_forward_backward<double>(
      wlosses.data(), wgrad.data(), targets.data(), n, v, double(scale));
  for (int64_t ranks : {1, 2, 3, 4}) {
    const int64_t vl = v / ranks;
    std::vector<Vec> local(static_cast<size_t>(ranks));
    for (int64_t r = 0; r < ranks; ++r) {  // rank r's logits: columns [r*vl, (r+1)*vl)
      local[r].resize(n * vl);
      for (int64_t i = 0; i < n; ++i)
        std::copy(logits.begin() + i * v + r * vl, logits.begin() + i * v + (r + 1) * vl,
                  local[r].begin() + i * vl);
    }
    Vec row_max(n, -INFINITY), part(n), sum_exp(n, 0.0f), target(n, 0.0f), part2(n);
    for (int64_t r = 0; r < ranks; ++r) {
      vocab_parallel_ce_max(part.data(), local[r].data(), n, vl);
      for (int64_t i = 0; i < n; ++i) row_max[i] = std::max(row_max[i], part[i]);
    }
    for (int64_t r = 0; r < ranks; ++r) {
      vocab_parallel_ce_sums(part.data(), part2.data(), local[r].data(), row_max.data(),
                             targets.data(), n, vl, r * vl);
      add_inplace(sum_exp.data(), part.data(), n);
      add_inplace(target.data(), part2.data(), n);
    }
    for (int64_t r = 0; r < ranks; ++r) {
      Vec losses(n);
      const double total = vocab_parallel_ce_finish(losses.data(), local[r].data(), row_max.data(),
                                                    sum_exp.data(), target.data(), targets.data(),
                                                    n, vl, r * vl, /*backward=*/true, scale);
      EXPECT_NEAR(total, want, 1e-5 * std::abs(want)) << ranks << " ranks";
      EXPECT_TRUE(close(losses.data(), wlosses.data(), n, kTol));
      DVec wblock(n * vl);
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < vl; ++j) wblock[i * vl + j] = wgrad[i * v + r * vl + j];
      EXPECT_TRUE(close(local[r].data(), wblock.data(), n * vl, kTol)) << ranks << " ranks";
    }
  }
}

}  // namespace
}  // namespace strata::kernels
