// Structure of the decoder: parameter names and layout, initialisation from (seed, name, index),
// and the activation accounting.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "core/philox.h"
#include "model/decoder.h"
#include "model/generate.h"

namespace strata {
namespace {

ModelConfig tiny(ModelFamily family) {
  ModelConfig c;
  c.family = family;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_kv_head = family == ModelFamily::gpt2 ? 0 : 2;
  if (block_for(family).layout().head_norm) c.attn_head_dim = 12;  // apart from d_model / n_head
  c.d_model = 32;
  c.vocab_size = 97;
  c.max_seq_len = 16;
  c.tie_embeddings = family == ModelFamily::gpt2;
  if (block_for(family).layout().moe) c.moe.experts = 4;  // top-2, experts d_ff wide
  return c;
}

// The family's residual output projection of the FFN (initialised with std / sqrt(2L)).
std::string ffn_projection(ModelFamily family) {
  switch (family) {
    case ModelFamily::gpt2:
      return "layers.0.mlp.proj.weight";
    case ModelFamily::mixtral:
    case ModelFamily::qwen3_moe:
      return "layers.0.moe.experts.down.weight";
    default:
      return "layers.0.mlp.down.weight";
  }
}

class DecoderFamilies : public ::testing::TestWithParam<ModelFamily> {};

TEST_P(DecoderFamilies, ParameterCountMatchesConfig) {
  Arena arena;
  Decoder model(tiny(GetParam()), arena, 2, 8);
  EXPECT_EQ(model.params().size(), model.config().num_params(true));
  if (model.config().moe.enabled()) {  // and with shared experts beside the routed ones
    ModelConfig shared = tiny(GetParam());
    shared.moe.shared_experts = 2;
    shared.moe.shared_ffn = 20;
    Arena a2;
    Decoder with_shared(shared, a2, 2, 8);
    EXPECT_EQ(with_shared.params().size(), with_shared.config().num_params(true));
    EXPECT_EQ(with_shared.params().size() - model.params().size(),
              shared.n_layer * 3 * shared.d_model * 40);
    EXPECT_EQ(with_shared.config().num_params() - with_shared.config().num_active_params(),
              model.config().num_params() - model.config().num_active_params());
  }
  EXPECT_EQ(arena.current(MemCategory::params), model.params().size() * 4);
  EXPECT_EQ(arena.current(MemCategory::grads), model.params().size() * 4);
}

TEST_P(DecoderFamilies, FusedProjectionsAreAdjacentAndGroupsInBackwardOrder) {
  Arena arena;
  Decoder model(tiny(GetParam()), arena, 2, 8);
  const ParamStore& p = model.params();
  auto off = [&](const std::string& n) { return p.info(p.index_of(n)).offset; };
  auto numel = [&](const std::string& n) { return p.info(p.index_of(n)).numel; };
  for (const std::string l : {"layers.0.", "layers.1."}) {
    EXPECT_EQ(off(l + "attn.k.weight"), off(l + "attn.q.weight") + numel(l + "attn.q.weight"));
    EXPECT_EQ(off(l + "attn.v.weight"), off(l + "attn.k.weight") + numel(l + "attn.k.weight"));
    if (GetParam() == ModelFamily::llama || GetParam() == ModelFamily::qwen3) {
      EXPECT_EQ(off(l + "mlp.up.weight"),
                off(l + "mlp.gate.weight") + numel(l + "mlp.gate.weight"));
    }
  }
  // Backward finishes the final norm first, then layer 1, layer 0, and the embedding last. An
  // MoE model's experts are groups of their own (reduced over another group), laid out ahead of
  // all the others, the last layer's first.
  const bool moe = tiny(GetParam()).moe.enabled();
  int64_t experts = 0;
  if (moe) {
    for (const std::string l : {"layers.1.", "layers.0."})
      for (const std::string w : {"moe.experts.gate_up.weight", "moe.experts.down.weight"}) {
        EXPECT_EQ(off(l + w), experts) << l + w;
        experts += numel(l + w);
      }
  }
  EXPECT_EQ(off("final_norm.weight"), experts);
  EXPECT_LT(off("layers.1.attn_norm.weight"), off("layers.0.attn_norm.weight"));
  EXPECT_LT(off("layers.0.mlp_norm.weight"), off("embed.weight"));
}

TEST_P(DecoderFamilies, InitDependsOnlyOnSeedNameAndIndex) {
  Arena arena;
  Decoder a(tiny(GetParam()), arena, 2, 8), b(tiny(GetParam()), arena, 1, 4);
  a.init(42);
  b.init(42);
  const ParamStore& p = a.params();
  for (int i = 0; i < p.count(); ++i) {
    const ParamInfo& info = p.info(i);
    const float* x = p.param(i);
    const float* y = b.params().param(b.params().index_of(info.name));
    for (int64_t e = 0; e < info.numel; ++e) ASSERT_EQ(x[e], y[e]) << info.name;
  }
  // Spot-check the formula: element e of a matrix is std * normal(Philox(seed, hash(name)), e).
  const std::string name = "layers.1.attn.q.weight";
  const CounterRng rng(42, hash_name(name));
  const float* q = p.param(p.index_of(name));
  for (int64_t e : {0, 7, 500})
    EXPECT_EQ(q[e], static_cast<float>(0.02f * rng.normal(static_cast<uint64_t>(e))));
  const float* proj = p.param(p.index_of(ffn_projection(GetParam())));
  double s2 = 0;
  const int64_t n = p.info(p.index_of(ffn_projection(GetParam()))).numel;
  for (int64_t e = 0; e < n; ++e) s2 += static_cast<double>(proj[e]) * proj[e];
  EXPECT_NEAR(std::sqrt(s2 / n), 0.02 / std::sqrt(4.0), 0.002) << "residual projections scaled";
  a.init(43);
  EXPECT_NE(a.params().param(0)[0], b.params().param(0)[0]);
}

TEST_P(DecoderFamilies, ShorterSequencesGiveThePrefixLogits) {
  // Causality: the logits of the first t positions do not depend on later tokens.
  Arena arena;
  Decoder model(tiny(GetParam()), arena, 1, 8);
  model.init(3);
  std::vector<int32_t> tokens = {5, 9, 2, 77, 31, 0, 96, 4};
  model.forward(tokens.data(), nullptr, 1, 8);
  std::vector<float> full(model.logits(), model.logits() + 5 * 97);
  model.forward(tokens.data(), nullptr, 1, 5);
  for (size_t i = 0; i < full.size(); ++i) ASSERT_NEAR(model.logits()[i], full[i], 1e-5) << i;
}

TEST_P(DecoderFamilies, SeededSamplingIsDeterministic) {
  Arena arena;
  Decoder model(tiny(GetParam()), arena, 1, 16);
  model.init(5);
  SampleOptions opt;
  opt.max_new_tokens = 20;
  opt.temperature = 0.7f;
  opt.seed = 9;
  const auto a = generate(model, {1, 2, 3}, opt);
  const auto b = generate(model, {1, 2, 3}, opt);
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.size(), 23u);
  for (int32_t t : a) EXPECT_TRUE(t >= 0 && t < 97);
  // A tokenizer smaller than the (padded) model vocabulary: only its ids are drawn, greedy too.
  for (float temperature : {0.7f, 0.0f}) {
    opt.temperature = temperature;
    opt.vocab_limit = 10;
    const auto c = generate(model, {1, 2, 3}, opt);
    for (size_t i = 3; i < c.size(); ++i) EXPECT_LT(c[i], 10) << "temperature " << temperature;
  }
}

TEST_P(DecoderFamilies, FlashAttentionGivesTheSameLossAndGradients) {
  // model.attention = "flash" changes how attention is computed and what it saves, not the result.
  ModelConfig naive_cfg = tiny(GetParam()), flash_cfg = tiny(GetParam());
  flash_cfg.attention = AttentionKernel::flash;
  Arena arena;
  Decoder naive(naive_cfg, arena, 2, 16), flash(flash_cfg, arena, 2, 16);
  naive.init(11);
  flash.init(11);
  std::vector<int32_t> in(32), tg(32);
  for (int i = 0; i < 32; ++i) {
    in[i] = (i * 37 + 5) % 97;
    tg[i] = (i * 53 + 11) % 97;
  }
  naive.params().zero_grads();
  flash.params().zero_grads();
  const double a = naive.forward_backward(in.data(), tg.data(), 1.0f / 32);
  const double b = flash.forward_backward(in.data(), tg.data(), 1.0f / 32);
  EXPECT_NEAR(a, b, 1e-6 * std::abs(a));
  const ParamStore& pn = naive.params();
  const ParamStore& pf = flash.params();
  double total = 0;
  for (int64_t e = 0; e < pn.size(); ++e)
    total += static_cast<double>(pn.grads()[e]) * pn.grads()[e];
  // Relative to the tensor, or to 1e-3 of the global norm for a tensor whose true gradient is
  // zero (gpt2's k bias: softmax ignores a constant added to every score of a query).
  const double floor = 1e-3 * std::sqrt(total);
  for (int i = 0; i < pn.count(); ++i) {
    double num = 0, den = 0;
    for (int64_t e = 0; e < pn.info(i).numel; ++e) {
      const double d = static_cast<double>(pn.grad(i)[e]) - pf.grad(i)[e];
      num += d * d;
      den += static_cast<double>(pn.grad(i)[e]) * pn.grad(i)[e];
    }
    EXPECT_LT(std::sqrt(num) / std::max(std::sqrt(den), floor), 1e-5) << pn.info(i).name;
  }
  // Flash keeps no T x T probabilities.
  Arena a_naive, a_flash;
  Decoder n2(naive_cfg, a_naive, 2, 16), f2(flash_cfg, a_flash, 2, 16);
  EXPECT_LT(a_flash.current(MemCategory::activations), a_naive.current(MemCategory::activations));
}

TEST(Decoder, BadShapesAreClearErrors) {
  ModelConfig c = tiny(ModelFamily::gpt2);
  c.n_head = 5;
  Arena arena;
  try {
    Decoder model(c, arena, 1, 8);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.n_head"), std::string::npos) << e.what();
  }
  c = tiny(ModelFamily::gpt2);
  try {
    Decoder model(c, arena, 1, 64);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("max_seq_len"), std::string::npos) << e.what();
  }
  Decoder model(tiny(ModelFamily::gpt2), arena, 1, 8);
  std::vector<int32_t> bad = {1, 2, 97};
  EXPECT_THROW(model.forward(bad.data(), nullptr, 1, 3), Error);
}

INSTANTIATE_TEST_SUITE_P(Families, DecoderFamilies,
                         ::testing::Values(ModelFamily::gpt2, ModelFamily::llama,
                                           ModelFamily::qwen3, ModelFamily::mixtral,
                                           ModelFamily::qwen3_moe),
                         [](const auto& param_info) {
                           return std::string(family_name(param_info.param));
                         });

}  // namespace
}  // namespace strata
