// Activation offload (DecoderOptions::offload_activations): gradients and losses bitwise those of a
// model that keeps every activation on the device, on the CPU backend and on the GuardedBackend
// (whose device memory the host cannot touch: the offload moves it only through the CopyQueue),
// for both families, f32 and bf16, recompute none and selective, with gradient accumulation and an
// evaluation forward in between; the device arena's activations shrink by what moved to the host;
// unsupported combinations are refused with a message naming them.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "model/activation_offload.h"
#include "model/decoder.h"
#include "model/guarded_backend.h"
#include "model/tiny_model.h"

namespace strata {
namespace {

using testing::GuardedBackend;
using testing::tiny_model;
using testing::tiny_tokens;

constexpr int64_t kBatch = 2, kSeq = 16, kLayers = 5;

struct Case {
  ModelFamily family;
  DType precision;
  Recompute recompute;
  AttentionKernel attention;
  std::string name() const {
    return cat(family_name(family), " ", dtype_name(precision), " recompute ", recompute, " ",
               attention);
  }
};

ModelConfig model_config(const Case& c) {
  ModelConfig m = tiny_model(c.family, c.attention);
  m.n_layer = kLayers;  // more layers than the window: three of them are offloaded
  return m;
}

struct Result {
  std::vector<double> losses;
  std::vector<float> grads;
  int64_t device_activations = 0, host_activations = 0;
};

Result run(const Case& c, Backend* backend, bool offload) {
  Arena arena(backend ? backend->memory() : nullptr);
  DecoderOptions o;
  o.precision = c.precision;
  o.backend = backend;
  o.recompute = {c.recompute, 0};
  o.offload_activations = offload;
  Decoder model(model_config(c), arena, kBatch, kSeq, o);
  model.init(3);
  Result r;
  r.device_activations = arena.current(MemCategory::activations);
  if (const ActivationOffload* off = model.activation_offload())
    r.host_activations = off->host_arena().current(MemCategory::activations);
  ParamStore& params = model.params();
  params.zero_grads();
  for (uint32_t mb = 0; mb < 2; ++mb) {  // two micro-batches accumulate
    const auto in = tiny_tokens(kBatch * kSeq, 1 + mb), tg = tiny_tokens(kBatch * kSeq, 7 + mb);
    r.losses.push_back(model.forward_backward(in.data(), tg.data(), 0.5f / (kBatch * kSeq)));
    // An evaluation forward between them overwrites the slots without saving anything.
    const auto ev = tiny_tokens(kBatch * kSeq, 40 + mb);
    r.losses.push_back(model.forward(ev.data(), tg.data(), kBatch, kSeq));
  }
  r.grads.resize(static_cast<size_t>(params.size()));
  model.backend().copy_to_host(r.grads.data(), params.grads(), r.grads.size() * sizeof(float));
  return r;
}

TEST(ActivationOffload, BitwiseTheGradientsOfKeepingEverything) {
  std::vector<Case> cases;
  for (ModelFamily family : {ModelFamily::gpt2, ModelFamily::llama})
    for (DType precision : {DType::f32, DType::bf16})
      for (Recompute recompute : {Recompute::none, Recompute::selective})
        cases.push_back({family, precision, recompute, AttentionKernel::flash});
  // Naive attention keeps the probabilities (none) or recomputes them from the uploaded q, k.
  cases.push_back({ModelFamily::gpt2, DType::f32, Recompute::none, AttentionKernel::naive});
  cases.push_back({ModelFamily::llama, DType::bf16, Recompute::selective, AttentionKernel::naive});
  // The MoE layer's kept tensors, int32 and int64 among them (mixtral trains in f32 only).
  for (Recompute recompute : {Recompute::none, Recompute::selective})
    cases.push_back({ModelFamily::mixtral, DType::f32, recompute, AttentionKernel::flash});
  cases.push_back({ModelFamily::mixtral, DType::f32, Recompute::selective, AttentionKernel::naive});
  cases.push_back(
      {ModelFamily::qwen3_moe, DType::f32, Recompute::selective, AttentionKernel::flash});
  for (const Case& c : cases) {
    const Result want = run(c, nullptr, false);
    const Result cpu = run(c, nullptr, true);
    GuardedBackend guarded;
    const Result dev = run(c, &guarded, true);
    for (const Result* got : {&cpu, &dev}) {
      const std::string what = c.name() + (got == &cpu ? " (cpu)" : " (guarded)");
      EXPECT_EQ(got->losses, want.losses) << what;
      ASSERT_EQ(got->grads.size(), want.grads.size()) << what;
      EXPECT_EQ(std::memcmp(got->grads.data(), want.grads.data(), want.grads.size() * 4), 0)
          << what;
      // What left the device is what the host holds: three layers less their block outputs.
      EXPECT_GT(got->host_activations, 0) << what;
      EXPECT_EQ(want.device_activations - got->device_activations, got->host_activations) << what;
    }
    EXPECT_TRUE(guarded.guarded_memory().locked()) << c.name();
    EXPECT_NE(want.grads, std::vector<float>(want.grads.size(), 0.0f)) << c.name();
  }
}

// The window: two layers' activations on the device, of kLayers, plus every block output.
TEST(ActivationOffload, DeviceHoldsTwoLayersAndTheBlockOutputs) {
  const Case c{ModelFamily::gpt2, DType::f32, Recompute::none, AttentionKernel::flash};
  ModelConfig m = model_config(c);
  m.finalize();  // as the Decoder does (the ffn width)
  const ModelShard shard = ModelShard::whole(m);
  const int64_t layer = layer_bytes(m, shard, Recompute::none, MemCategory::activations, kBatch,
                                    kSeq)[static_cast<int>(MemCategory::activations)];
  const int64_t output = kBatch * kSeq * m.d_model * 4;
  const Result keep = run(c, nullptr, false), off = run(c, nullptr, true);
  EXPECT_EQ(keep.device_activations - off.device_activations, 3 * (layer - output));
  const MemBytes planned =
      ActivationOffload::device_bytes(m, shard, {0, kLayers}, {}, kBatch, kSeq, DType::f32);
  EXPECT_EQ(planned[static_cast<int>(MemCategory::activations)], 2 * layer + 3 * output);
}

std::string construction_error(const DecoderOptions& o) {
  Arena arena;
  try {
    Decoder model(
        model_config({ModelFamily::gpt2, DType::f32, Recompute::none, AttentionKernel::flash}),
        arena, kBatch, kSeq, o);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ActivationOffload, RefusesWhatItCannotServe) {
  DecoderOptions o;
  o.offload_activations = true;
  o.recompute = {Recompute::full, 0};
  EXPECT_NE(construction_error(o).find("activation offload with full recomputation"),
            std::string::npos)
      << construction_error(o);
  o.recompute = {Recompute::full, 2};  // some layers full: refused too
  EXPECT_NE(construction_error(o).find("full recomputation"), std::string::npos);
  o.recompute = {};
  o.slots = 2;
  EXPECT_NE(construction_error(o).find("activation offload keeps one micro-batch's activations"),
            std::string::npos)
      << construction_error(o);
}

}  // namespace
}  // namespace strata
