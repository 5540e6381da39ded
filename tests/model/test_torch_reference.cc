// The whole model against PyTorch: tools/torch_reference.py builds the same decoder (both
// families) in float64 from the same weights and writes golden logits, loss, gradients and the
// parameters after 3 AdamW steps with clipping. strata must match at <= 1e-5 relative error.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/decoder.h"
#include "model/golden.h"
#include "optim/adamw.h"

namespace strata {
namespace {

using testing::Golden;

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

void load_params(const Golden& g, ParamStore& params, const std::string& prefix) {
  for (const ParamInfo& p : params.all()) {
    const auto w = g.read<float>(prefix + p.name);
    ASSERT_EQ(static_cast<int64_t>(w.size()), p.numel) << prefix << p.name;
    std::copy(w.begin(), w.end(), params.param(params.index_of(p.name)));
  }
}

std::string params_before_step(int s) {
  return s == 0 ? std::string("param.") : "step" + std::to_string(s) + ".params.";
}

// A gradient whose true value is zero (gpt2's k bias: softmax ignores a constant added to every
// score of a query) has no meaningful relative error; it must be zero up to rounding instead.
void expect_grad_close(const float* ours, const std::vector<float>& golden, double step_norm,
                       const std::string& what) {
  double golden_norm = 0, ours_norm = 0;
  for (size_t i = 0; i < golden.size(); ++i) {
    golden_norm += static_cast<double>(golden[i]) * golden[i];
    ours_norm += static_cast<double>(ours[i]) * ours[i];
  }
  if (std::sqrt(golden_norm) < 1e-9 * step_norm) {
    EXPECT_LT(std::sqrt(ours_norm), 1e-6 * step_norm) << what << " should be zero";
  } else {
    EXPECT_LT(rel_error(ours, golden), kTol) << what;
  }
}

OptimConfig golden_optim(const Golden& g) {
  OptimConfig oc;
  oc.lr = g.optim.at("lr");
  oc.beta1 = g.optim.at("beta1");
  oc.beta2 = g.optim.at("beta2");
  oc.eps = g.optim.at("eps");
  oc.weight_decay = g.optim.at("weight_decay");
  oc.grad_clip = g.optim.at("grad_clip");
  return oc;
}

void check_against_torch(const std::string& golden_name) {
  const Golden g(golden_name);
  const int64_t batch = g.config.at("batch"), seq = g.config.at("seq_len");
  const int steps = g.optim.at("steps");
  const OptimConfig oc = golden_optim(g);
  Arena arena;
  Decoder model(testing::golden_model_config(g.config), arena, batch, seq);
  ParamStore& params = model.params();
  // Every golden parameter exists in strata's model and vice versa.
  int golden_params = 0;
  for (const std::string& n : g.file.names()) golden_params += n.rfind("param.", 0) == 0;
  EXPECT_EQ(golden_params, params.count());

  // 1. Logits and loss of step 0.
  load_params(g, params, "param.");
  const auto inputs0 = g.read<int32_t>("step0.inputs");
  const auto targets0 = g.read<int32_t>("step0.targets");
  const double loss0 = model.forward(inputs0.data(), targets0.data(), batch, seq);
  EXPECT_LT(rel_error(model.logits(), g.read<float>("step0.logits")), kTol) << "logits";
  EXPECT_NEAR(loss0, g.read<float>("step0.loss")[0], kTol * std::abs(loss0));

  // 2. Loss, every gradient and the global norm of each step, from PyTorch's parameters at it.
  for (int s = 0; s < steps; ++s) {
    const std::string pre = "step" + std::to_string(s) + ".";
    load_params(g, params, params_before_step(s));
    const auto in = g.read<int32_t>(pre + "inputs");
    const auto tg = g.read<int32_t>(pre + "targets");
    params.zero_grads();
    const double loss =
        model.forward_backward(in.data(), tg.data(), 1.0f / static_cast<float>(batch * seq));
    EXPECT_NEAR(loss, g.read<float>(pre + "loss")[0], kTol * std::abs(loss)) << pre;
    const double norm = global_grad_norm(params);
    EXPECT_NEAR(norm, g.read<float>(pre + "grad_norm")[0], kTol * norm) << pre;
    for (const ParamInfo& p : params.all())
      expect_grad_close(params.grad(params.index_of(p.name)), g.read<float>(pre + "grad." + p.name),
                        norm, pre + "grad." + p.name);
  }

  // 3. Clipping and AdamW: PyTorch's gradients in, PyTorch's parameters out, step after step.
  {
    load_params(g, params, "param.");
    AdamW adamw(params, arena, oc);
    for (int s = 0; s < steps; ++s) {
      const std::string pre = "step" + std::to_string(s) + ".";
      for (const ParamInfo& p : params.all()) {
        const auto grad = g.read<float>(pre + "grad." + p.name);
        std::copy(grad.begin(), grad.end(), params.grad(params.index_of(p.name)));
      }
      const double norm = global_grad_norm(params);
      const float coef = clip_coefficient(norm, oc.grad_clip);
      EXPECT_LT(coef, 1.0f) << "the golden data is meant to exercise clipping";
      adamw.step(oc.lr, coef);
      const std::string next = s + 1 < steps ? params_before_step(s + 1) : std::string("final.");
      for (const ParamInfo& p : params.all())
        EXPECT_LT(rel_error(params.param(params.index_of(p.name)), g.read<float>(next + p.name)),
                  kTol)
            << "after step " << s << ": " << p.name;
    }
  }

  // 4. End to end, strata's own gradients feeding its own optimizer for all steps. Adam maps a
  // gradient near eps to any update in [0, lr], so f32 rounding in near-zero gradients moves a
  // few weights by up to lr: compared at 2e-4, and the zero-gradient k bias not at all.
  {
    Arena arena2;
    Decoder chained(testing::golden_model_config(g.config), arena2, batch, seq);
    ParamStore& cp = chained.params();
    load_params(g, cp, "param.");
    AdamW adamw(cp, arena2, oc);
    for (int s = 0; s < steps; ++s) {
      const std::string pre = "step" + std::to_string(s) + ".";
      const auto in = g.read<int32_t>(pre + "inputs");
      const auto tg = g.read<int32_t>(pre + "targets");
      cp.zero_grads();
      chained.forward_backward(in.data(), tg.data(), 1.0f / static_cast<float>(batch * seq));
      adamw.step(oc.lr, clip_coefficient(global_grad_norm(cp), oc.grad_clip));
    }
    for (const ParamInfo& p : cp.all()) {
      if (p.name.find("attn.k.bias") != std::string::npos) continue;
      EXPECT_LT(rel_error(cp.param(cp.index_of(p.name)), g.read<float>("final." + p.name)), 2e-4)
          << "chained final " << p.name;
    }
  }
}

TEST(TorchReference, Gpt2) {
  check_against_torch("gpt2_tiny.safetensors");
}
TEST(TorchReference, Llama) {
  check_against_torch("llama_tiny.safetensors");
}

}  // namespace
}  // namespace strata
