// The Llama block (Llama 2 and 3.x): RMSNorm, grouped-query attention without biases and with
// RoPE on q and k (plain, or Llama 3's rescaled frequencies: ModelConfig::rope()), SwiGLU MLP
// (gate|up in one GEMM of width 2f, down).
//
//   x -> RMSNorm -> q|k|v -> RoPE(q, k) -> attention -> o + x = h -> RMSNorm -> gate|up -> SwiGLU
//     -> down + h
#include "model/block.h"

namespace strata {

namespace {

class LlamaBlock final : public Block {
 public:
  BlockLayout layout() const override {
    return {.norm = NormKind::rmsnorm, .mlp_pre_factor = 2, .rope = true, .grouped_query = true};
  }

  BlockParams register_params(ParamStore& p, const ParamSlices& sl, int64_t layer) const override {
    const std::string pre = "layers." + std::to_string(layer) + ".";
    const int g = static_cast<int>(layer) + 1;
    BlockParams b;
    register_rope_attention(p, sl, pre, g, b);
    register_swiglu_mlp(p, sl, pre, g, b);
    return b;
  }

  void forward(BlockRun& r, LayerActivations& l, const float* x) const override {
    rope_attention_forward(r, l, x);
    swiglu_mlp_forward(r, l);
  }

  void backward(BlockRun& r, LayerActivations& l, const float* x) const override {
    swiglu_mlp_backward(r, l);
    // r.s.dresid now holds dL/d(residual after attention).
    rope_attention_backward(r, l, x);
  }
};

}  // namespace

const Block& llama_block() {
  static const LlamaBlock block;
  return block;
}

}  // namespace strata
