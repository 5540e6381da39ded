// The mixtral family at the model level (its backward against finite differences is in
// test_family_gradients.cc): the model.moe keys' errors, what the MoE layer does not run with yet
// (refused at construction, naming the key to change), the per-layer routing record, and full
// recomputation bitwise equal to keeping every activation.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "model/decoder.h"
#include "tiny_model.h"

namespace strata {
namespace {

ModelConfig mixtral() {
  return testing::tiny_model(ModelFamily::mixtral);
}

// The message of the Error that finalize() throws (empty when it throws none).
std::string finalize_error(ModelConfig c) {
  try {
    c.finalize();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string construction_error(const ModelConfig& c, DecoderOptions o) {
  try {
    Arena arena;
    Decoder m(c, arena, 2, 8, o);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(MoeModel, ConfigErrorsNameTheKey) {
  EXPECT_EQ(finalize_error(mixtral()), "");
  ModelConfig c = mixtral();
  c.moe.top_k = 5;  // of 4 experts
  EXPECT_NE(finalize_error(c).find("model.moe.top_k"), std::string::npos) << finalize_error(c);
  c = mixtral();
  c.moe.top_k = 0;
  EXPECT_NE(finalize_error(c).find("model.moe.top_k"), std::string::npos) << finalize_error(c);
  c = mixtral();
  c.moe.experts = 1;
  EXPECT_NE(finalize_error(c).find("model.moe.experts"), std::string::npos) << finalize_error(c);
  c = mixtral();
  c.moe.experts = 0;  // mixtral is never dense
  EXPECT_NE(finalize_error(c).find("model.moe.experts"), std::string::npos) << finalize_error(c);
  c = testing::tiny_model(ModelFamily::llama);
  c.moe.experts = 4;  // the dense families take no experts
  EXPECT_NE(finalize_error(c).find("model.moe.experts"), std::string::npos) << finalize_error(c);
  c = mixtral();
  c.moe.bias_update_rate = 1e-3f;  // softmax gating has no router bias to move
  EXPECT_NE(finalize_error(c).find("model.moe.bias_update_rate = 0.001 moves the router bias"),
            std::string::npos)
      << finalize_error(c);
  c.moe.gating = kernels::MoeGating::sigmoid_bias;
  EXPECT_EQ(finalize_error(c), "");
  c = mixtral();
  c.moe.capacity_factor = -1;
  EXPECT_NE(finalize_error(c).find("model.moe.capacity_factor"), std::string::npos);
  c = mixtral();
  c.moe.expert_ffn = -2;
  EXPECT_NE(finalize_error(c).find("model.moe.expert_ffn"), std::string::npos);
  c = mixtral();
  c.moe.aux_loss_coeff = -0.1f;
  EXPECT_NE(finalize_error(c).find("model.moe.aux_loss_coeff"), std::string::npos);
  c = mixtral();
  c.moe.z_loss_coeff = -0.1f;
  EXPECT_NE(finalize_error(c).find("model.moe.z_loss_coeff"), std::string::npos);
  c = mixtral();
  c.moe.routed_scale = 0;
  EXPECT_NE(finalize_error(c).find("model.moe.routed_scale"), std::string::npos);
}

TEST(MoeModel, ActiveParametersCountTopKExperts) {
  ModelConfig c = mixtral();
  c.finalize();
  // 2 layers, 2 of 4 experts idle per token, each 3 * c * F.
  EXPECT_EQ(c.num_params() - c.num_active_params(), 2 * 2 * 3 * 64 * 32);
  ModelConfig dense = testing::tiny_model(ModelFamily::llama);
  dense.finalize();
  EXPECT_EQ(dense.num_active_params(), dense.num_params());
}

TEST(MoeModel, UnsupportedCombinationsFailAtConstruction) {
  DecoderOptions o;
  EXPECT_EQ(construction_error(mixtral(), o), "");
  o.precision = DType::bf16;
  EXPECT_NE(construction_error(mixtral(), o).find("train.precision"), std::string::npos);
  // Every MoE family alike, named in the message.
  const std::string qwen3_moe = construction_error(testing::tiny_model(ModelFamily::qwen3_moe), o);
  EXPECT_NE(qwen3_moe.find("(family qwen3_moe) trains in f32 only"), std::string::npos)
      << qwen3_moe;
}

TEST(MoeModel, RoutingRecordPerLayer) {
  const int64_t b = 2, t = 8, n = b * t;
  const std::vector<int32_t> in = testing::tiny_tokens(n, 1), tg = testing::tiny_tokens(n, 2);
  for (double factor : {0.0, 0.5}) {
    ModelConfig c = mixtral();
    c.moe.capacity_factor = factor;  // 0.5: ceil(0.5 * 16 * 2 / 4) = 4 rows per expert
    Arena arena;
    Decoder m(c, arena, b, t);
    m.init(3);
    m.forward(in.data(), tg.data(), b, t);
    ASSERT_EQ(m.moe_stats().size(), 2u);
    for (const MoeLayerStats& st : m.moe_stats()) {
      ASSERT_EQ(st.tokens_per_expert.size(), 4u);
      EXPECT_EQ(
          std::accumulate(st.tokens_per_expert.begin(), st.tokens_per_expert.end(), int64_t{0}),
          n * 2);
      EXPECT_EQ(st.forwards, 1);
      int64_t over = 0;  // what a capacity of 4 must drop
      for (int64_t x : st.tokens_per_expert) over += factor > 0 ? std::max<int64_t>(0, x - 4) : 0;
      EXPECT_EQ(st.dropped, over) << factor;
      EXPECT_GT(st.aux_loss, 0.0);
      EXPECT_EQ(st.z_loss, 0.0);  // z_loss_coeff defaults to 0
    }
    // The default coefficient 0.02 times e * sum f P, which is 1 for a uniform router.
    EXPECT_NEAR(m.moe_loss(), 2 * 0.02, 0.02);
    // A second forward adds to the counts (a step's micro-batches) until they are reset.
    const double once = m.moe_loss();
    const int64_t dropped = m.moe_stats()[0].dropped;
    m.forward(in.data(), tg.data(), b, t);
    EXPECT_DOUBLE_EQ(m.moe_loss(), 2 * once);
    EXPECT_EQ(m.moe_stats()[0].dropped, 2 * dropped);
    m.reset_moe_stats();
    EXPECT_EQ(m.moe_loss(), 0.0);
    EXPECT_EQ(m.moe_stats()[0].forwards, 0);
  }
}

TEST(MoeModel, FullRecomputationIsBitwiseTheKeptRun) {
  const int64_t b = 2, t = 8;
  ModelConfig c = mixtral();
  c.moe.z_loss_coeff = 0.01f;
  c.moe.capacity_factor = 0.75;
  auto grads = [&](Recompute mode) {
    Arena arena;
    DecoderOptions o;
    o.recompute.mode = mode;
    Decoder m(c, arena, b, t, o);
    m.init(5);
    m.params().zero_grads();
    for (uint32_t micro = 0; micro < 2; ++micro) {
      const auto in = testing::tiny_tokens(b * t, 1 + micro);
      const auto tg = testing::tiny_tokens(b * t, 11 + micro);
      m.forward_backward(in.data(), tg.data(), 1.0f / float(2 * b * t));
    }
    return std::vector<float>(m.params().grads(), m.params().grads() + m.params().size());
  };
  const std::vector<float> kept = grads(Recompute::none);
  EXPECT_EQ(grads(Recompute::full), kept);
}

}  // namespace
}  // namespace strata
