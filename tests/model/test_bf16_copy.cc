// The bf16 working weights that AdamW writes as it updates the f32 masters must be exactly what
// the model would convert itself: forward after a fused update equals forward after the model
// re-converts every group from the masters.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "model/decoder.h"
#include "model/tiny_model.h"
#include "optim/adamw.h"

namespace strata {
namespace {

TEST(Bf16Copy, OptimizerWrittenCopyEqualsTheModelsOwnConversion) {
  for (ModelFamily family : {ModelFamily::gpt2, ModelFamily::llama}) {
    const int64_t b = 2, t = 16;
    Arena arena;
    DecoderOptions o;
    o.precision = DType::bf16;
    Decoder m(testing::tiny_model(family), arena, b, t, o);
    m.init(3);
    std::mt19937 rng(5);
    std::vector<int32_t> in(b * t), tg(b * t);
    for (auto& x : in) x = static_cast<int32_t>(rng() % 101);
    for (auto& x : tg) x = static_cast<int32_t>(rng() % 101);

    std::vector<OptimSegment> segments = segments_for_all(m.params());
    for (OptimSegment& s : segments) {
      s.param_bf16 = m.bf16_copy_of(s.param);
      ASSERT_NE(s.param_bf16, nullptr);
    }
    OptimConfig oc;
    AdamW adam(segments, m.params().size(), arena, oc);
    m.params().zero_grads();
    m.forward_backward(in.data(), tg.data(), 1.0f / (b * t));
    adam.step(1e-2f, 1.0f);
    m.params().bump_version();
    m.bf16_copy_written();
    const double fused = m.forward(in.data(), tg.data(), b, t);
    const std::vector<float> fused_logits(m.logits(), m.logits() + b * t * 101);

    m.params().bump_version();  // stale: every group converts again from the masters
    const double converted = m.forward(in.data(), tg.data(), b, t);
    EXPECT_EQ(fused, converted);
    EXPECT_EQ(fused_logits, std::vector<float>(m.logits(), m.logits() + b * t * 101));
  }
}

TEST(Bf16Copy, NoCopyOutsideTheParametersOrInF32) {
  Arena arena;
  DecoderOptions o;
  Decoder f32(testing::tiny_model(ModelFamily::gpt2), arena, 1, 8, o);
  EXPECT_EQ(f32.bf16_copy_of(f32.params().data()), nullptr);
  o.precision = DType::bf16;
  Decoder bf16(testing::tiny_model(ModelFamily::gpt2), arena, 1, 8, o);
  float outside = 0;
  EXPECT_EQ(bf16.bf16_copy_of(&outside), nullptr);
  EXPECT_NE(bf16.bf16_copy_of(bf16.params().data()), nullptr);
}

}  // namespace
}  // namespace strata
