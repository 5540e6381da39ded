// The Qwen3-MoE block (Qwen3-30B-A3B, Qwen3-235B-A22B): Qwen3's attention (per-head RMSNorm of q
// and k before RoPE, head_dim apart from d_model; block.h's qk_norm_attention) and, in every
// layer, the sparse Mixture-of-Experts SwiGLU FFN of model/moe_ffn.h: softmax top-k routing,
// renormalised or not (Hugging Face's norm_topk_prob, model.moe.normalize_topk), no shared
// expert. Hugging Face's decoder_sparse_step and mlp_only_layers (dense layers among the sparse
// ones) are not modelled: every layer is sparse, and the import refuses anything else.
//
//   x -> RMSNorm -> q|k|v -> RMSNorm per head (q, k) -> RoPE(q, k) -> attention -> o + x = h
//     -> RMSNorm -> router -> top-k -> experts' gate|up -> SwiGLU -> down -> weighted sum + h
#include "model/block.h"
#include "model/moe_ffn.h"

namespace strata {

namespace {

class Qwen3MoeBlock final : public Block {
 public:
  BlockLayout layout() const override {
    return {.norm = NormKind::rmsnorm,
            .mlp_pre_factor = 2,
            .head_norm = true,
            .rope = true,
            .grouped_query = true,
            .moe = true};
  }

  BlockParams register_params(ParamStore& p, const ParamSlices& sl, int64_t layer) const override {
    const std::string pre = "layers." + std::to_string(layer) + ".";
    const int g = static_cast<int>(layer) + 1;
    BlockParams b;
    register_qk_norm_attention(p, sl, pre, g, b);
    register_moe_ffn(p, sl, layer, b);
    return b;
  }

  void forward(BlockRun& r, LayerActivations& l, const float* x) const override {
    qk_norm_attention_forward(r, l, x);
    moe_ffn_forward(r, l);
  }

  void backward(BlockRun& r, LayerActivations& l, const float* x) const override {
    moe_ffn_backward(r, l);
    // r.s.dresid now holds dL/d(residual after attention).
    qk_norm_attention_backward(r, l, x);
  }
};

}  // namespace

const Block& qwen3_moe_block() {
  static const Qwen3MoeBlock block;
  return block;
}

}  // namespace strata
