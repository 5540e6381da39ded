// Each family's whole backward (the block's order of kernels, its parameter registration, the
// head and embedding) against central finite differences of its loss, through the real Decoder:
// the kernels have their own finite-difference tests (tests/kernels), this checks that a block
// wires them together right. Above all for the families added through the block seam, Qwen3
// (per-head q/k norms, heads wider than d_model / n_head), Llama 3.x (RoPE rescaling) and
// Mixtral (the MoE FFN, its balancing losses part of the objective, with and without drops) and
// Qwen3-MoE (both together).
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
  uint64_t seed = 7;  // of the initial weights
};

std::vector<Family> families() {
  ModelConfig llama3 = testing::tiny_model(ModelFamily::llama);
  llama3.rope_scaling = RopeScaling::llama3;  // hd 16, theta 1e4: pairs in all three bands
  llama3.rope_original_max_seq_len = 64;
  llama3.rope_factor = 8.0;
  ModelConfig qwen3_tied = testing::tiny_model(ModelFamily::qwen3, AttentionKernel::naive, true);
  // Mixtral: top-2 of 4 experts with both balancing losses, weighted so that they matter; then
  // with a capacity that drops assignments (ceil(0.5 * 24 * 2 / 4) = 6 rows per expert).
  ModelConfig mixtral = testing::tiny_model(ModelFamily::mixtral);
  mixtral.moe.aux_loss_coeff = 0.1f;
  mixtral.moe.z_loss_coeff = 0.05f;
  ModelConfig mixtral_capacity = mixtral;
  mixtral_capacity.moe.capacity_factor = 0.5;
  // DeepSeek-V3's gating (sigmoid scores, renormalised, scaled) and Switch's (top-1, the softmax
  // probability itself as the weight).
  ModelConfig mixtral_sigmoid = mixtral;
  mixtral_sigmoid.moe.gating = kernels::MoeGating::sigmoid_bias;
  mixtral_sigmoid.moe.routed_scale = 2.5f;
  ModelConfig mixtral_top1 = mixtral;
  mixtral_top1.moe.top_k = 1;
  mixtral_top1.moe.normalize_topk = false;
  // DeepSeek's shared experts: two of width 12 beside the routed ones, every token through them.
  // Seed 11: with seed 7 one embedding element's 1e-2 step moves two tokens between experts
  // without changing the per-expert counts the test compares (at steps of 1e-3 and 2.5e-4 every
  // element of seed 7 agrees).
  ModelConfig mixtral_shared = mixtral;
  mixtral_shared.moe.shared_experts = 2;
  mixtral_shared.moe.shared_ffn = 12;
  // GELU experts (Switch / GShard style: fc, GELU, down), with GELU shared experts beside them.
  ModelConfig mixtral_gelu = mixtral_shared;
  mixtral_gelu.moe.activation = MoeActivation::gelu;
  // Qwen3-MoE: the per-head q/k norms ahead of the MoE FFN, its weights renormalised
  // (norm_topk_prob) or not. Without the renormalisation, seed 7's weights leave a layer-1 token
  // within a finite-difference step of a tie between two experts (nearly every step reroutes it),
  // hence another seed.
  ModelConfig qwen3_moe = testing::tiny_model(ModelFamily::qwen3_moe);
  qwen3_moe.moe.aux_loss_coeff = 0.1f;
  qwen3_moe.moe.z_loss_coeff = 0.05f;
  ModelConfig qwen3_moe_unnormalized = qwen3_moe;
  qwen3_moe_unnormalized.moe.normalize_topk = false;
  return {{"gpt2", testing::tiny_model(ModelFamily::gpt2)},
          {"llama", testing::tiny_model(ModelFamily::llama)},
          {"llama3", llama3},
          {"qwen3", testing::tiny_model(ModelFamily::qwen3)},
          {"qwen3_tied", qwen3_tied},
          {"mixtral", mixtral},
          {"mixtral_capacity", mixtral_capacity},
          {"mixtral_sigmoid", mixtral_sigmoid},
          {"mixtral_top1", mixtral_top1},
          {"mixtral_shared", mixtral_shared, 11},
          {"mixtral_gelu", mixtral_gelu, 11},
          {"qwen3_moe", qwen3_moe},
          {"qwen3_moe_unnormalized", qwen3_moe_unnormalized, 11}};
}

// What an MoE model's last forward routed, per layer: tokens per expert and drops (empty for a
// dense model). A finite-difference step that changes it is not a derivative.
std::vector<int64_t> routing(const Decoder& m) {
  std::vector<int64_t> out;
  for (const MoeLayerStats& st : m.moe_stats()) {
    out.insert(out.end(), st.tokens_per_expert.begin(), st.tokens_per_expert.end());
    out.push_back(st.dropped);
  }
  return out;
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
    m.init(f.seed);
    ParamStore& p = m.params();
    p.zero_grads();
    m.forward_backward(in.data(), tg.data(), 1.0f / float(b * t));  // grads of the mean loss
    const std::vector<int64_t> base_routing = routing(m);
    int rerouted = 0;
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
        const float x0 = *x;
        // The objective: the mean token loss plus (MoE) the layers' balancing losses, of this
        // forward alone (the statistics count from reset_moe_stats).
        auto objective = [&] {
          m.reset_moe_stats();
          return m.forward(in.data(), tg.data(), b, t) + m.moe_loss();
        };
        // The experts' choice is piecewise constant: a step that changes it is no derivative.
        // Such an element is tried again with a step 4 times smaller, then left out.
        bool done = false;
        for (const float step : {1e-2f, 2.5e-3f}) {
          const float eps = step * std::max(1.0f, std::abs(x0));
          *x = x0 + eps;
          const double up = objective();
          const bool same_up = routing(m) == base_routing;
          *x = x0 - eps;
          const double down = objective();
          const bool same_down = routing(m) == base_routing;
          *x = x0;
          if (!same_up || !same_down) continue;
          const double numeric = (up - down) / (double(x0 + eps) - double(x0 - eps));
          const double analytic = g[e];
          // f32 losses over a 2e step: about 1e-6 / 2e absolute noise, plus the O(eps^2) term.
          EXPECT_NEAR(analytic, numeric, 2e-2 * std::abs(numeric) + 2e-6 / step)
              << f.name << " " << info.name << "[" << e << "] step " << step;
          done = true;
          break;
        }
        if (!done) {
          ++rerouted;
          continue;
        }
        ++checked;
      }
    }
    EXPECT_GT(checked, 20) << f.name;
    EXPECT_LE(rerouted, checked / 10) << f.name;
    if (c.moe.experts > 0) {
      EXPECT_GT(m.moe_stats()[0].aux_loss, 0.0) << f.name;
      EXPECT_GT(m.moe_stats()[0].z_loss, 0.0) << f.name;
      EXPECT_EQ(m.moe_stats()[0].dropped > 0, c.moe.capacity_factor > 0) << f.name;
      const bool gelu = c.moe.activation == MoeActivation::gelu;
      EXPECT_GE(p.index_of(gelu ? "layers.1.moe.experts.fc.weight"
                                : "layers.1.moe.experts.gate_up.weight"),
                0)
          << f.name;
      EXPECT_EQ(p.has("layers.1.moe.router.bias"), c.moe.router_bias()) << f.name;
    }
    if (c.family == ModelFamily::qwen3) {
      EXPECT_GE(p.index_of("layers.1.attn.k_norm.weight"), 0) << "qwen3 registers its head norms";
    }
  }
}

}  // namespace
}  // namespace strata
