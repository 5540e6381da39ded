// Each family's whole backward (the block's order of kernels, its parameter registration, the
// head and embedding) against central finite differences of its loss, through the real Decoder:
// the kernels have their own finite-difference tests (tests/kernels), this checks that a block
// wires them together right. Above all for the families added through the block seam, Qwen3
// (per-head q/k norms, heads wider than d_model / n_head) and Llama 3.x (RoPE rescaling).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "model/decoder.h"
#include "tiny_model.h"

namespace strata {
namespace {

struct Family {
  const char* name;
  ModelConfig config;
};

std::vector<Family> families() {
  ModelConfig llama3 = testing::tiny_model(ModelFamily::llama);
  llama3.rope_scaling = RopeScaling::llama3;  // hd 16, theta 1e4: pairs in all three bands
  llama3.rope_original_max_seq_len = 64;
  llama3.rope_factor = 8.0;
  ModelConfig qwen3_tied = testing::tiny_model(ModelFamily::qwen3, AttentionKernel::naive, true);
  return {{"gpt2", testing::tiny_model(ModelFamily::gpt2)},
          {"llama", testing::tiny_model(ModelFamily::llama)},
          {"llama3", llama3},
          {"qwen3", testing::tiny_model(ModelFamily::qwen3)},
          {"qwen3_tied", qwen3_tied}};
}

TEST(FamilyGradients, BackwardMatchesFiniteDifferences) {
  const int64_t b = 2, t = 12;
  const std::vector<int32_t> in = testing::tiny_tokens(b * t, 1),
                             tg = testing::tiny_tokens(b * t, 2);
  for (const Family& f : families()) {
    ModelConfig c = f.config;
    c.init_std = 0.2f;  // logits far enough from uniform that every parameter matters
    Arena arena;
    Decoder m(c, arena, b, t);
    m.init(7);
    ParamStore& p = m.params();
    p.zero_grads();
    m.forward_backward(in.data(), tg.data(), 1.0f / float(b * t));  // grads of the mean loss
    // The 3 largest-gradient elements of every tensor, against (L(x + e) - L(x - e)) / 2e.
    int checked = 0;
    for (int i = 0; i < p.count(); ++i) {
      const ParamInfo& info = p.info(i);
      std::vector<int64_t> order(static_cast<size_t>(info.numel));
      std::iota(order.begin(), order.end(), 0);
      const float* g = p.grad(i);
      std::partial_sort(order.begin(), order.begin() + std::min<int64_t>(3, info.numel),
                        order.end(),
                        [&](int64_t a, int64_t z) { return std::abs(g[a]) > std::abs(g[z]); });
      for (int k = 0; k < std::min<int64_t>(3, info.numel); ++k) {
        const int64_t e = order[static_cast<size_t>(k)];
        float* x = p.param(i) + e;
        const float x0 = *x, eps = 1e-2f * std::max(1.0f, std::abs(x0));
        *x = x0 + eps;
        const double up = m.forward(in.data(), tg.data(), b, t);
        *x = x0 - eps;
        const double down = m.forward(in.data(), tg.data(), b, t);
        *x = x0;
        const double numeric = (up - down) / (double(x0 + eps) - double(x0 - eps));
        const double analytic = g[e];
        // f32 losses over a 2e step: about 1e-6 / 2e-2 absolute noise, plus the O(eps^2) term.
        EXPECT_NEAR(analytic, numeric, 2e-2 * std::abs(numeric) + 2e-4)
            << f.name << " " << info.name << "[" << e << "]";
        ++checked;
      }
    }
    EXPECT_GT(checked, 20) << f.name;
    if (c.family == ModelFamily::qwen3) {
      EXPECT_GE(p.index_of("layers.1.attn.k_norm.weight"), 0) << "qwen3 registers its head norms";
    }
  }
}

}  // namespace
}  // namespace strata
