// The Qwen3 block (Qwen3 dense models): the Llama layer with an RMSNorm over each q head and each
// k head (weights q_norm, k_norm of head_dim, shared by all heads) between the projection and
// RoPE, and heads whose width is set apart from d_model (head_dim). No biases; the head is tied
// or untied (ModelConfig::tie_embeddings).
//
//   x -> RMSNorm -> q|k|v -> RMSNorm per head (q, k) -> RoPE(q, k) -> attention -> o + x = h
//     -> RMSNorm -> gate|up -> SwiGLU -> down + h
#include "model/block.h"

namespace strata {

namespace {

class Qwen3Block final : public Block {
 public:
  BlockLayout layout() const override {
    return {.norm = NormKind::rmsnorm,
            .mlp_pre_factor = 2,
            .head_norm = true,
            .rope = true,
            .grouped_query = true};
  }

  BlockParams register_params(ParamStore& p, const ParamSlices& sl, int64_t layer) const override {
    const std::string pre = "layers." + std::to_string(layer) + ".";
    const int g = static_cast<int>(layer) + 1;
    BlockParams b;
    register_qk_norm_attention(p, sl, pre, g, b);
    register_swiglu_mlp(p, sl, pre, g, b);
    return b;
  }

  void forward(BlockRun& r, LayerActivations& l, const float* x) const override {
    qk_norm_attention_forward(r, l, x);
    swiglu_mlp_forward(r, l);
  }

  void backward(BlockRun& r, LayerActivations& l, const float* x) const override {
    swiglu_mlp_backward(r, l);
    // r.s.dresid now holds dL/d(residual after attention).
    qk_norm_attention_backward(r, l, x);
  }
};

}  // namespace

const Block& qwen3_block() {
  static const Qwen3Block block;
  return block;
}

}  // namespace strata
