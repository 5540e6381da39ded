// The Mixtral block (Mixtral 8x7B): Llama's attention (RMSNorm, grouped-query attention without
// biases, RoPE on q and k) and, in place of the dense MLP, a sparse Mixture-of-Experts SwiGLU FFN
// (model/moe_ffn.h): a router picks top_k of model.moe.experts experts per token.
//
//   x -> RMSNorm -> q|k|v -> RoPE(q, k) -> attention -> o + x = h -> RMSNorm -> router -> top-k
//     -> experts' gate|up -> SwiGLU -> down -> weighted sum + h
#include "model/block.h"
#include "model/moe_ffn.h"

namespace strata {

namespace {

class MixtralBlock final : public Block {
 public:
  BlockLayout layout() const override {
    return {.norm = NormKind::rmsnorm,
            .mlp_pre_factor = 2,
            .rope = true,
            .grouped_query = true,
            .moe = true};
  }

  BlockParams register_params(ParamStore& p, const ParamSlices& sl, int64_t layer) const override {
    const std::string pre = "layers." + std::to_string(layer) + ".";
    const int g = static_cast<int>(layer) + 1;
    BlockParams b;
    register_rope_attention(p, sl, pre, g, b);
    register_moe_ffn(p, sl, layer, b);
    return b;
  }

  void forward(BlockRun& r, LayerActivations& l, const float* x) const override {
    rope_attention_forward(r, l, x);
    moe_ffn_forward(r, l);
  }

  void backward(BlockRun& r, LayerActivations& l, const float* x) const override {
    moe_ffn_backward(r, l);
    // r.s.dresid now holds dL/d(residual after attention).
    rope_attention_backward(r, l, x);
  }
};

}  // namespace

const Block& mixtral_block() {
  static const MixtralBlock block;
  return block;
}

}  // namespace strata
