// The whole model on the GPU: the same Decoder as on the CPU, given the CUDA backend. Checked
// against PyTorch's float64 golden data (tests/golden, as tests/model/test_torch_reference.cc does
// on the CPU) at GPU tolerance, and in bf16 against the CPU's bf16 run.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "gpu_test.h"
#include "kernels/backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "model/decoder.h"
#include "model/golden.h"

namespace strata {
namespace {

using testing::Golden;

// f32 GEMMs in full f32 (TF32 off) and f32 accumulation everywhere; the reductions run in another
// order than on the CPU, so 1e-4 instead of the CPU's 1e-5.
constexpr double kTol = 1e-4;

ModelConfig model_config(const nlohmann::json& j) {
  ModelConfig c = testing::golden_model_config(j);
  c.attention = AttentionKernel::flash;  // the GPU's attention (no naive kernel on cuda)
  return c;
}

double rel_error(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    num += d * d;
    den += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

std::vector<float> download(Backend& be, const float* device, int64_t count) {
  std::vector<float> host(static_cast<size_t>(count));
  be.copy_to_host(host.data(), device, host.size() * sizeof(float));
  return host;
}

void load_params(Backend& be, const Golden& g, ParamStore& params, const std::string& prefix) {
  for (const ParamInfo& p : params.all()) {
    const auto w = g.read<float>(prefix + p.name);
    ASSERT_EQ(static_cast<int64_t>(w.size()), p.numel) << prefix << p.name;
    be.copy_from_host(params.param(params.index_of(p.name)), w.data(), w.size() * sizeof(float));
  }
}

void check_against_torch(const std::string& golden_name) {
  const Golden g(golden_name);
  const int64_t batch = g.config.at("batch"), seq = g.config.at("seq_len");
  std::unique_ptr<Backend> be = make_cuda_backend(0);
  Arena arena(be->memory());
  DecoderOptions o;
  o.backend = be.get();
  Decoder model(model_config(g.config), arena, batch, seq, o);
  ParamStore& params = model.params();
  const int64_t v = model.config().vocab_size;

  load_params(*be, g, params, "param.");
  const auto in0 = g.read<int32_t>("step0.inputs");
  const auto tg0 = g.read<int32_t>("step0.targets");
  const double loss0 = model.forward(in0.data(), tg0.data(), batch, seq);
  EXPECT_LT(
      rel_error(download(*be, model.logits(), batch * seq * v), g.read<float>("step0.logits")),
      kTol);
  EXPECT_NEAR(loss0, g.read<float>("step0.loss")[0], kTol * std::abs(loss0));

  params.zero_grads();
  const double loss = model.forward_backward(in0.data(), tg0.data(), 1.0f / float(batch * seq));
  EXPECT_NEAR(loss, g.read<float>("step0.loss")[0], kTol * std::abs(loss));
  const double norm = std::sqrt(be->sum_squares(params.grads(), params.size()));
  EXPECT_NEAR(norm, g.read<float>("step0.grad_norm")[0], kTol * norm);
  for (const ParamInfo& p : params.all()) {
    const auto want = g.read<float>("step0.grad." + p.name);
    const auto got = download(*be, params.grad(params.index_of(p.name)), p.numel);
    double want_norm = 0;
    for (float x : want) want_norm += double(x) * x;
    if (std::sqrt(want_norm) < 1e-9 * norm) continue;  // a zero gradient (gpt2's k bias)
    EXPECT_LT(rel_error(got, want), kTol) << p.name;
  }
}

TEST(CudaModel, Gpt2MatchesPytorch) {
  REQUIRE_GPU();
  check_against_torch("gpt2_tiny.safetensors");
}

TEST(CudaModel, LlamaMatchesPytorch) {
  REQUIRE_GPU();
  check_against_torch("llama_tiny.safetensors");
}

// bf16 on the GPU against bf16 on the CPU, from the same initial weights: both round the same
// GEMM inputs; they differ by accumulation order only, so within bf16's resolution.
TEST(CudaModel, Bf16TrainsLikeTheCpu) {
  REQUIRE_GPU();
  for (ModelFamily family : {ModelFamily::gpt2, ModelFamily::llama}) {
    ModelConfig c;
    c.family = family;
    c.n_layer = 2;
    c.n_head = 2;
    c.n_kv_head = family == ModelFamily::llama ? 1 : 0;
    c.d_model = 128;
    c.vocab_size = 1000;
    c.max_seq_len = 64;
    c.tie_embeddings = family == ModelFamily::gpt2;
    c.attention = AttentionKernel::flash;
    const int64_t b = 2, t = 64;
    std::mt19937 rng(3);
    std::vector<int32_t> in(b * t), tg(b * t);
    for (auto& x : in) x = static_cast<int32_t>(rng() % 1000);
    for (auto& x : tg) x = static_cast<int32_t>(rng() % 1000);

    DecoderOptions cpu_o;
    cpu_o.precision = DType::bf16;
    Arena cpu_arena;
    Decoder cpu(c, cpu_arena, b, t, cpu_o);
    cpu.init(9);
    cpu.params().zero_grads();
    const double cpu_loss = cpu.forward_backward(in.data(), tg.data(), 1.0f / float(b * t));

    std::unique_ptr<Backend> be = make_cuda_backend(0);
    Arena arena(be->memory());
    DecoderOptions o = cpu_o;
    o.backend = be.get();
    Decoder gpu(c, arena, b, t, o);
    gpu.init(9);
    gpu.params().zero_grads();
    const double gpu_loss = gpu.forward_backward(in.data(), tg.data(), 1.0f / float(b * t));

    EXPECT_NEAR(gpu_loss, cpu_loss, 1e-2 * cpu_loss);
    const std::vector<float> want(cpu.params().grads(), cpu.params().grads() + cpu.params().size());
    EXPECT_LT(rel_error(download(*be, gpu.params().grads(), gpu.params().size()), want), 3e-2);
  }
}

}  // namespace
}  // namespace strata
