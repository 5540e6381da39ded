// AdamW and the global gradient norm reach the parameters, gradients and moments only through the
// Backend: on a GuardedBackend (guarded_backend.h: memory mprotect'ed PROT_NONE outside backend
// calls) a host access would crash. A few optimizer steps there must equal the plain CPU run
// bitwise: parameters, both moments, the bf16 working copy, every norm and loss.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "model/decoder.h"
#include "model/guarded_backend.h"
#include "model/tiny_model.h"
#include "optim/adamw.h"

namespace strata {
namespace {

using testing::GuardedBackend;
using testing::tiny_model;
using testing::tiny_tokens;

struct Result {
  std::vector<double> norms, losses;
  std::vector<float> params, m, v;
  std::vector<uint16_t> bf16;  // the working copy (bf16 only)
  int64_t unlocks = 0;         // backend calls that reached guarded memory during the steps
};

constexpr int64_t kBatch = 2, kSeq = 16, kSteps = 3;

template <class T>
std::vector<T> to_host(Backend& backend, const T* device, int64_t count) {
  std::vector<T> out(static_cast<size_t>(count));
  backend.copy_to_host(out.data(), device, out.size() * sizeof(T));
  return out;
}

// backend null: the plain CPU run (host arena). bf16: the optimizer also writes the model's bf16
// working copy (OptimSegment::param_bf16) and the next forward uses it.
Result run(ModelFamily family, DType precision, GuardedBackend* backend) {
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
  std::unique_ptr<AdamW> adam;
  const bool bf16 = precision == DType::bf16;
  if (bf16) {
    std::vector<OptimSegment> segments = segments_for_all(params);
    for (OptimSegment& s : segments) {
      s.param_bf16 = model.bf16_copy_of(s.param);
      EXPECT_NE(s.param_bf16, nullptr);
    }
    adam = std::make_unique<AdamW>(segments, params.size(), arena, oc, model.backend());
  } else {
    adam = std::make_unique<AdamW>(params, arena, oc);  // the store's backend
  }
  EXPECT_EQ(&adam->backend(), &model.backend());

  Result r;
  const int64_t unlocks0 = backend ? backend->guarded_memory().unlocks() : 0;
  for (int64_t step = 0; step < kSteps; ++step) {
    const auto in = tiny_tokens(kBatch * kSeq, 1 + static_cast<uint32_t>(step));
    const auto tg = tiny_tokens(kBatch * kSeq, 11 + static_cast<uint32_t>(step));
    params.zero_grads();
    r.losses.push_back(model.forward_backward(in.data(), tg.data(), 1.0f / (kBatch * kSeq)));
    const double norm = global_grad_norm(params);
    r.norms.push_back(norm);
    adam->step(learning_rate(oc, step, kSteps), clip_coefficient(norm, oc.grad_clip));
    params.bump_version();
    if (bf16) model.bf16_copy_written();
  }
  const auto in = tiny_tokens(kBatch * kSeq, 21), tg = tiny_tokens(kBatch * kSeq, 31);
  r.losses.push_back(model.forward(in.data(), tg.data(), kBatch, kSeq));  // uses the new weights
  if (backend) r.unlocks = backend->guarded_memory().unlocks() - unlocks0;

  Backend& be = model.backend();
  r.params = to_host(be, params.data(), params.size());
  r.m = to_host(be, adam->first_moment(), adam->state_size());
  r.v = to_host(be, adam->second_moment(), adam->state_size());
  if (bf16) r.bf16 = to_host(be, model.bf16_copy_of(params.data()), params.size());
  return r;
}

template <class T>
bool bitwise_equal(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

TEST(OptimBackend, GuardedStepsAreBitwiseThePlainCpuSteps) {
  for (ModelFamily family : {ModelFamily::gpt2, ModelFamily::llama}) {
    for (DType precision : {DType::f32, DType::bf16}) {
      const std::string what =
          std::string(family_name(family)) + " " + std::string(dtype_name(precision));
      const Result want = run(family, precision, nullptr);
      GuardedBackend guarded;
      const Result got = run(family, precision, &guarded);
      EXPECT_GT(got.unlocks, 0) << what;
      EXPECT_TRUE(guarded.guarded_memory().locked()) << what;
      ASSERT_EQ(want.norms.size(), static_cast<size_t>(kSteps)) << what;
      EXPECT_GT(want.norms.front(), 0.0) << what;
      EXPECT_EQ(got.norms, want.norms) << what;
      EXPECT_EQ(got.losses, want.losses) << what;
      EXPECT_TRUE(bitwise_equal(got.params, want.params)) << what;
      EXPECT_TRUE(bitwise_equal(got.m, want.m)) << what;
      EXPECT_TRUE(bitwise_equal(got.v, want.v)) << what;
      EXPECT_TRUE(bitwise_equal(got.bf16, want.bf16)) << what;
      EXPECT_EQ(got.bf16.empty(), precision == DType::f32) << what;
      // The steps moved the parameters and filled both moments.
      EXPECT_NE(want.v, std::vector<float>(want.v.size(), 0.0f)) << what;
    }
  }
}

// The moments come from the arena, which must be the optimizer's backend's.
TEST(OptimBackend, ArenaMustTakeTheBackendsMemory) {
  GuardedBackend guarded;
  Arena host;
  OptimConfig oc;
  std::string error;
  try {
    AdamW adam({}, 16, host, oc, guarded);
  } catch (const Error& e) {
    error = e.what();
  }
  EXPECT_NE(error.find("AdamW: the arena's memory (host) is not the memory of the optimizer's "
                       "backend (guarded)"),
            std::string::npos)
      << error;
  Arena device(guarded.memory());
  EXPECT_THROW(AdamW({}, 16, device, oc), Error);  // the default backend is the CPU
  AdamW ok({}, 16, device, oc, guarded);
  EXPECT_EQ(ok.state_size(), 16);
}

}  // namespace
}  // namespace strata
