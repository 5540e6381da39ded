// The Decoder reaches its device only through its Backend: run on a GuardedBackend (the CPU
// kernels behind memory that is mprotect'ed PROT_NONE outside backend calls, guarded_backend.h),
// any host access of a parameter, gradient or activation by model code would crash. The guarded
// runs must also give losses, gradients and logits bitwise equal to the plain CPU run.
#include <gtest/gtest.h>

#include <csignal>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "model/decoder.h"
#include "model/generate.h"
#include "model/guarded_backend.h"
#include "model/tiny_model.h"

namespace strata {
namespace {

using testing::GuardedBackend;
using testing::tiny_model;
using testing::tiny_tokens;

struct Result {
  std::vector<double> losses;  // two micro-batches of forward_backward, then forward
  std::vector<float> grads;
  std::vector<float> logits;  // of a forward without targets on a shorter sequence
  std::vector<int32_t> generated;
};

constexpr int64_t kBatch = 2, kSeq = 16;

// backend null: the plain CPU run (host arena).
Result run(const ModelConfig& c, DType precision, GuardedBackend* backend) {
  Arena arena(backend ? backend->memory() : nullptr);
  DecoderOptions o;
  o.precision = precision;
  o.backend = backend;
  Decoder m(c, arena, kBatch, kSeq, o);
  m.init(7);
  m.params().zero_grads();
  Result r;
  for (uint32_t micro = 0; micro < 2; ++micro) {  // gradients accumulate over micro-batches
    const auto in = tiny_tokens(kBatch * kSeq, 1 + micro),
               tg = tiny_tokens(kBatch * kSeq, 11 + micro);
    r.losses.push_back(m.forward_backward(in.data(), tg.data(), 1.0f / (2 * kBatch * kSeq)));
  }
  r.grads.resize(static_cast<size_t>(m.params().size()));
  m.backend().copy_to_host(r.grads.data(), m.params().grads(), r.grads.size() * sizeof(float));

  const auto in = tiny_tokens(kBatch * kSeq, 21), tg = tiny_tokens(kBatch * kSeq, 31);
  r.losses.push_back(m.forward(in.data(), tg.data(), kBatch, kSeq));
  const int64_t b = 1, t = 9;  // a shape below the planned one
  m.forward(in.data(), nullptr, b, t);
  r.logits.resize(static_cast<size_t>(b * t * c.vocab_size));
  m.backend().copy_to_host(r.logits.data(), m.logits(), r.logits.size() * sizeof(float));
  return r;
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(Backend, GuardedRunIsBitwiseThePlainCpuRun) {
  for (ModelFamily family : {ModelFamily::gpt2, ModelFamily::llama, ModelFamily::qwen3,
                             ModelFamily::mixtral, ModelFamily::qwen3_moe}) {
    const bool moe = family == ModelFamily::mixtral || family == ModelFamily::qwen3_moe;
    for (DType precision : {DType::f32, DType::bf16}) {
      if (moe && precision != DType::f32) continue;  // f32 only yet
      for (AttentionKernel attention : {AttentionKernel::naive, AttentionKernel::flash}) {
        for (bool tied : {true, false}) {
          const ModelConfig c = tiny_model(family, attention, tied);
          const std::string what = std::string(family_name(family)) + " " +
                                   std::string(dtype_name(precision)) + " " +
                                   std::string(enum_name(attention)) + (tied ? " tied" : " untied");
          const Result want = run(c, precision, nullptr);
          GuardedBackend guarded;
          const Result got = run(c, precision, &guarded);
          EXPECT_GT(guarded.guarded_memory().unlocks(), 0) << what;
          EXPECT_TRUE(guarded.guarded_memory().locked()) << what;
          EXPECT_EQ(got.losses, want.losses) << what;
          EXPECT_TRUE(bitwise_equal(got.grads, want.grads)) << what;
          EXPECT_TRUE(bitwise_equal(got.logits, want.logits)) << what;
        }
      }
    }
  }
}

// generate reads the logits through the backend.
TEST(Backend, GenerateOnTheGuardedBackend) {
  const ModelConfig c = tiny_model(ModelFamily::llama, AttentionKernel::flash, false);
  SampleOptions s;
  s.max_new_tokens = 6;
  s.temperature = 0.7f;
  s.top_k = 10;
  std::vector<std::vector<int32_t>> out;
  for (bool guard : {false, true}) {
    GuardedBackend guarded;
    Arena arena(guard ? guarded.memory() : nullptr);
    DecoderOptions o;
    o.backend = guard ? &guarded : nullptr;
    Decoder m(c, arena, 1, 8, o);
    m.init(5);
    out.push_back(generate(m, {3, 14, 15, 92}, s));
  }
  EXPECT_EQ(out[0].size(), 10u);
  EXPECT_EQ(out[1], out[0]);
}

// The guard is real: touching a guarded buffer from the host kills the process (by SIGSEGV, or
// under AddressSanitizer by its SEGV report and exit status 1: any death counts).
TEST(BackendDeathTest, HostAccessOfDeviceMemoryCrashes) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        GuardedBackend guarded;
        Arena arena(guarded.memory());
        DecoderOptions o;
        o.backend = &guarded;
        Decoder m(tiny_model(ModelFamily::gpt2, AttentionKernel::flash, true), arena, 1, 8, o);
        m.init(1);
        volatile float x = m.params().data()[0];
        (void)x;
      },
      "");
}

class NoNaiveBackend final : public GuardedBackend {
 public:
  bool supports_naive_attention() const override { return false; }
};

std::string construction_error(const ModelConfig& c, Backend& backend, Arena& arena) {
  DecoderOptions o;
  o.backend = &backend;
  try {
    Decoder m(c, arena, 1, 8, o);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Backend, NaiveAttentionNeedsABackendThatHasIt) {
  NoNaiveBackend backend;
  Arena arena(backend.memory());
  EXPECT_EQ(construction_error(tiny_model(ModelFamily::gpt2, AttentionKernel::naive, true), backend,
                               arena),
            "model.attention = \"naive\" is not available on cpu; use \"flash\"");
  EXPECT_EQ(construction_error(tiny_model(ModelFamily::gpt2, AttentionKernel::flash, true), backend,
                               arena),
            "");
}

// The operands' type is an argument of one method, not a twin: bf16 operands (1.5 and 2, exact
// in bf16) go through the 16-bit GEMM (read as f32 they would be denormals, and C about 0), and
// a type the method does not have is an error that names both.
TEST(Backend, OperandTypeIsAnArgument) {
  Backend& cpu = cpu_backend();
  const uint16_t a16[2] = {0x3fc0, 0}, b16[2] = {0x4000, 0};
  float c = 0;
  cpu.gemm(DType::bf16, false, false, 1, 1, 1, 1.0f, a16, 1, b16, 1, 0.0f, &c, 1);
  EXPECT_EQ(c, 3.0f);
  const float a = 1.5f, b = 2.0f;
  c = 0;
  cpu.gemm(DType::f32, false, false, 1, 1, 1, 1.0f, &a, 1, &b, 1, 0.0f, &c, 1);
  EXPECT_EQ(c, 3.0f);
  try {
    float out[8], lse[2];
    const uint16_t qkv[24] = {};
    cpu.flash_attention_forward(DType::f16, out, lse, qkv, AttentionShape{1, 1, 1, 1, 8});
    ADD_FAILURE() << "f16 flash attention did not throw";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("flash_attention_forward"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("f16"), std::string::npos) << e.what();
  }
}

TEST(Backend, ArenaMustTakeTheBackendsMemory) {
  GuardedBackend backend;
  Arena host;
  const std::string error = construction_error(
      tiny_model(ModelFamily::llama, AttentionKernel::flash, false), backend, host);
  EXPECT_NE(error.find("the arena's memory (host) is not the memory of the model's backend "
                       "(guarded)"),
            std::string::npos)
      << error;
}

}  // namespace
}  // namespace strata
