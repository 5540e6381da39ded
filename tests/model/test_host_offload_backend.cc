// HostOffloadAdamW (optim.offload = "cpu") with a model: the gradients download through the
// backend's CopyQueue as backward finishes each group (HostOffloadGradHooks), the update runs on
// the host, the new params and bf16 copies upload. On the CPU backend and on the GuardedBackend
// (device memory mprotect'ed outside backend calls: the optimizer never touches it directly),
// training with gradient accumulation equals in-device AdamW bitwise: losses, norms, params, the
// bf16 working copy, both moments.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "model/decoder.h"
#include "model/guarded_backend.h"
#include "model/tiny_model.h"
#include "optim/adamw.h"
#include "optim/host_offload.h"

namespace strata {
namespace {

using testing::GuardedBackend;
using testing::tiny_model;
using testing::tiny_tokens;

struct Result {
  std::vector<double> norms, losses;
  std::vector<float> params, m, v;
  std::vector<uint16_t> bf16;
};

constexpr int64_t kBatch = 2, kSeq = 16, kSteps = 3, kMicro = 2;

template <class T>
std::vector<T> to_host(Backend& backend, const T* device, int64_t count) {
  std::vector<T> out(static_cast<size_t>(count));
  backend.copy_to_host(out.data(), device, out.size() * sizeof(T));
  return out;
}

enum class Optimizer { adamw, host_offload };

// backend null: the CPU backend. `clobber`: zero the device gradients after the last backward of
// each step, before the update (what only an optimizer that already downloaded them survives).
Result run(ModelFamily family, DType precision, Backend* backend, Optimizer which,
           bool clobber = false) {
  Arena arena(backend ? backend->memory() : nullptr);
  DecoderOptions o;
  o.precision = precision;
  o.backend = backend;
  Decoder model(tiny_model(family, AttentionKernel::flash), arena, kBatch, kSeq, o);
  model.init(7);
  ParamStore& params = model.params();
  OptimConfig oc;
  oc.lr = 1e-2f;
  oc.warmup_steps = 1;
  oc.grad_clip = 0.5f;  // small enough to clip
  const bool bf16 = precision == DType::bf16;
  std::vector<OptimSegment> segments = segments_for_all(params);
  for (OptimSegment& s : segments) s.param_bf16 = bf16 ? model.bf16_copy_of(s.param) : nullptr;
  std::unique_ptr<AdamW> adam;
  std::unique_ptr<HostOffloadAdamW> host;
  std::unique_ptr<HostOffloadGradHooks> hooks;
  if (which == Optimizer::adamw) {
    adam = std::make_unique<AdamW>(segments, params.size(), arena, oc, model.backend());
  } else {
    HostOffloadOptions ho;
    ho.chunk_elements = 1000;  // many chunks, most of them spanning several parameters
    host = std::make_unique<HostOffloadAdamW>(segments, params.size(), oc, model.backend(), ho);
    hooks = std::make_unique<HostOffloadGradHooks>(params, *host);
    model.set_hooks(hooks.get());
  }
  Result r;
  for (int64_t step = 0; step < kSteps; ++step) {
    params.zero_grads();
    double loss = 0;
    for (int64_t mb = 0; mb < kMicro; ++mb) {
      const auto seed = static_cast<uint32_t>(10 * step + mb);
      const auto in = tiny_tokens(kBatch * kSeq, 1 + seed),
                 tg = tiny_tokens(kBatch * kSeq, 50 + seed);
      if (hooks) hooks->begin_micro_batch(mb == kMicro - 1);
      loss += model.forward_backward(in.data(), tg.data(), 1.0f / (kMicro * kBatch * kSeq));
    }
    r.losses.push_back(loss);
    const double norm = global_grad_norm(params);
    r.norms.push_back(norm);
    if (clobber) params.zero_grads();
    const float lr = learning_rate(oc, step, kSteps), scale = clip_coefficient(norm, oc.grad_clip);
    adam ? adam->step(lr, scale) : host->step(lr, scale);
    params.bump_version();
    if (bf16) model.bf16_copy_written();
  }
  const auto in = tiny_tokens(kBatch * kSeq, 21), tg = tiny_tokens(kBatch * kSeq, 31);
  r.losses.push_back(model.forward(in.data(), tg.data(), kBatch, kSeq));  // the new weights

  Backend& be = model.backend();
  r.params = to_host(be, params.data(), params.size());
  if (bf16) r.bf16 = to_host(be, model.bf16_copy_of(params.data()), params.size());
  if (adam) {
    r.m = to_host(be, adam->first_moment(), adam->state_size());
    r.v = to_host(be, adam->second_moment(), adam->state_size());
  } else {
    std::vector<float> master(static_cast<size_t>(params.size()));
    r.m = r.v = master;
    host->read_state(master.data(), r.m.data(), r.v.data());
    EXPECT_EQ(std::memcmp(master.data(), r.params.data(), master.size() * sizeof(float)), 0)
        << "the device params are the host master values";
  }
  return r;
}

template <class T>
bool bitwise_equal(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

void expect_same(const Result& got, const Result& want, const std::string& what) {
  ASSERT_EQ(want.norms.size(), static_cast<size_t>(kSteps)) << what;
  EXPECT_GT(want.norms.front(), 0.0) << what;
  EXPECT_EQ(got.norms, want.norms) << what;
  EXPECT_EQ(got.losses, want.losses) << what;
  EXPECT_TRUE(bitwise_equal(got.params, want.params)) << what;
  EXPECT_TRUE(bitwise_equal(got.m, want.m)) << what;
  EXPECT_TRUE(bitwise_equal(got.v, want.v)) << what;
  EXPECT_TRUE(bitwise_equal(got.bf16, want.bf16)) << what;
}

TEST(HostOffloadBackend, BitwiseLikeAdamWOnCpuAndGuardedBackends) {
  for (ModelFamily family : {ModelFamily::gpt2, ModelFamily::llama}) {
    for (DType precision : {DType::f32, DType::bf16}) {
      const std::string what =
          std::string(family_name(family)) + " " + std::string(dtype_name(precision));
      const Result want = run(family, precision, nullptr, Optimizer::adamw);
      EXPECT_EQ(want.bf16.empty(), precision == DType::f32) << what;
      expect_same(run(family, precision, nullptr, Optimizer::host_offload), want, what + " cpu");
      GuardedBackend guarded;
      expect_same(run(family, precision, &guarded, Optimizer::host_offload), want,
                  what + " guarded");
      EXPECT_TRUE(guarded.guarded_memory().locked()) << what;
    }
  }
}

// The hooks download each group's gradients during the last micro-batch's backward: zeroing the
// device gradients after backward no longer changes the update (it would with AdamW, or with
// downloads left to step()).
TEST(HostOffloadBackend, GradientsDownloadDuringBackward) {
  const Result want = run(ModelFamily::gpt2, DType::f32, nullptr, Optimizer::adamw);
  expect_same(run(ModelFamily::gpt2, DType::f32, nullptr, Optimizer::host_offload, true), want,
              "clobbered after backward");
  const Result adam_clobbered = run(ModelFamily::gpt2, DType::f32, nullptr, Optimizer::adamw, true);
  EXPECT_FALSE(bitwise_equal(adam_clobbered.params, want.params)) << "the clobber has an effect";
}

}  // namespace
}  // namespace strata
