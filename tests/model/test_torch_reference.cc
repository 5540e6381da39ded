// The whole model against PyTorch: tools/torch_reference.py builds the same decoder (both
// families) in float64 from the same weights and writes golden logits, loss, gradients and the
// parameters after 3 AdamW steps with clipping. strata must match at <= 1e-5 relative error.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/safetensors.h"
#include "model/decoder.h"
#include "optim/adamw.h"

namespace strata {
namespace {

struct Golden {
  io::SafetensorsFile file;
  nlohmann::json config, optim;

  explicit Golden(const std::string& name)
      : file(io::SafetensorsFile::open(std::string(STRATA_SOURCE_DIR) + "/tests/golden/" + name)) {
    config = nlohmann::json::parse(file.metadata().at("config"));
    optim = nlohmann::json::parse(file.metadata().at("optim"));
  }
  template <typename T>
  std::vector<T> read(const std::string& name) const {
    const auto info = file.info(name);
    int64_t n = 1;
    for (int64_t d : info.shape) n *= d;
    std::vector<T> out(static_cast<size_t>(n));
    file.read_into(name, out.data(), out.size() * sizeof(T));
    return out;
  }
};

ModelConfig model_config(const nlohmann::json& j) {
  ModelConfig c;
  c.family = family_from_name(j.at("family").get<std::string>());
  c.n_layer = j.at("n_layer");
  c.n_head = j.at("n_head");
  c.n_kv_head = j.at("n_kv_head");
  c.d_model = j.at("d_model");
  c.d_ff = j.at("d_ff");
  c.vocab_size = j.at("vocab_size");
  c.max_seq_len = j.at("max_seq_len");
  c.norm_eps = j.at("norm_eps");
  c.rope_theta = j.at("rope_theta");
  c.tie_embeddings = j.at("tie_embeddings");
  return c;
}

// ||a - b|| / ||b||, in double.
double rel_error(const float* a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    num += d * d;
    den += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

constexpr double kTol = 1e-5;

void check_against_torch(const std::string& golden_name) {
  const Golden g(golden_name);
  const int64_t batch = g.config.at("batch"), seq = g.config.at("seq_len");
  Arena arena;
  Decoder model(model_config(g.config), arena, batch, seq);
  ParamStore& params = model.params();
  for (const ParamInfo& p : params.all()) {
    const auto w = g.read<float>("param." + p.name);
    ASSERT_EQ(static_cast<int64_t>(w.size()), p.numel) << p.name;
    std::copy(w.begin(), w.end(), params.param(params.index_of(p.name)));
  }
  // Every golden parameter exists in strata's model and vice versa.
  int golden_params = 0;
  for (const std::string& n : g.file.names()) golden_params += n.rfind("param.", 0) == 0;
  EXPECT_EQ(golden_params, params.count());

  // Logits and loss of step 0.
  const auto inputs0 = g.read<int32_t>("step0.inputs");
  const auto targets0 = g.read<int32_t>("step0.targets");
  const double loss0 = model.forward(inputs0.data(), targets0.data(), batch, seq);
  EXPECT_LT(rel_error(model.logits(), g.read<float>("step0.logits")), kTol) << "logits";
  EXPECT_NEAR(loss0, g.read<float>("step0.loss")[0], kTol * std::abs(loss0));

  OptimConfig oc;
  oc.lr = g.optim.at("lr");
  oc.beta1 = g.optim.at("beta1");
  oc.beta2 = g.optim.at("beta2");
  oc.eps = g.optim.at("eps");
  oc.weight_decay = g.optim.at("weight_decay");
  oc.grad_clip = g.optim.at("grad_clip");
  AdamW adamw(params, arena, oc);
  const int steps = g.optim.at("steps");
  for (int s = 0; s < steps; ++s) {
    const std::string pre = "step" + std::to_string(s) + ".";
    const auto in = g.read<int32_t>(pre + "inputs");
    const auto tg = g.read<int32_t>(pre + "targets");
    params.zero_grads();
    const double loss =
        model.forward_backward(in.data(), tg.data(), 1.0f / static_cast<float>(batch * seq));
    EXPECT_NEAR(loss, g.read<float>(pre + "loss")[0], kTol * std::abs(loss)) << pre;
    for (const ParamInfo& p : params.all()) {
      EXPECT_LT(rel_error(params.grad(params.index_of(p.name)), g.read<float>(pre + "grad." + p.name)),
                kTol)
          << pre << "grad." << p.name;
    }
    const double norm = global_grad_norm(params);
    EXPECT_NEAR(norm, g.read<float>(pre + "grad_norm")[0], kTol * norm) << pre;
    const float coef = clip_coefficient(norm, oc.grad_clip);
    EXPECT_LT(coef, 1.0f) << "the golden data is meant to exercise clipping";
    adamw.step(oc.lr, coef);
  }
  for (const ParamInfo& p : params.all()) {
    EXPECT_LT(rel_error(params.param(params.index_of(p.name)), g.read<float>("final." + p.name)), kTol)
        << "final." << p.name;
  }
}

TEST(TorchReference, Gpt2) { check_against_torch("gpt2_tiny.safetensors"); }
TEST(TorchReference, Llama) { check_against_torch("llama_tiny.safetensors"); }

}  // namespace
}  // namespace strata
