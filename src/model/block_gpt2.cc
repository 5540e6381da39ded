// The GPT-2 block: LayerNorm, multi-head attention with biases, GELU(tanh) MLP of width f with
// biases; positions are a learned table added to the embedding (outside the block).
//
//   x -> LN -> q|k|v (+b) -> attention -> o (+b) + x = h -> LN -> fc (+b) -> GELU -> proj (+b) + h
#include "model/block.h"

namespace strata {

namespace {

class Gpt2Block final : public Block {
 public:
  BlockLayout layout() const override {
    return {.norm = NormKind::layernorm,
            .mlp_pre_factor = 1,
            .biases = true,
            .learned_positions = true};
  }

  BlockParams register_params(ParamStore& p, const ParamSlices& sl, int64_t layer) const override {
    const ModelConfig& cfg = sl.cfg;
    const int64_t c = cfg.d_model, f = sl.sh.ffn(cfg), f0 = sl.sh.tp_rank * f;
    const std::string pre = "layers." + std::to_string(layer) + ".";
    const int g = static_cast<int>(layer) + 1;
    BlockParams b;
    b.attn_norm_w = p.add(pre + "attn_norm.weight", {c}, g, sl.replicated(true));
    b.attn_norm_b = p.add(pre + "attn_norm.bias", {c}, g, sl.replicated(true));
    register_attention(p, sl, pre, g, /*bias=*/true, b);
    b.mlp_norm_w = p.add(pre + "mlp_norm.weight", {c}, g, sl.replicated(true));
    b.mlp_norm_b = p.add(pre + "mlp_norm.bias", {c}, g, sl.replicated(true));
    b.fc_w = p.add(pre + "mlp.fc.weight", {f, c}, g, sl.split(0, f0, cfg.d_ff));
    b.fc_b = p.add(pre + "mlp.fc.bias", {f}, g, sl.split(0, f0, cfg.d_ff));
    b.proj_w = p.add(pre + "mlp.proj.weight", {c, f}, g, sl.split(1, f0, cfg.d_ff));
    b.proj_b = p.add(pre + "mlp.proj.bias", {c}, g, sl.replicated(false));
    return b;
  }

  void forward(BlockRun& r, LayerActivations& l, const float* x) const override {
    const BlockParams& p = r.p;
    const int64_t n = r.n(), ns = r.ns(), c = r.c(), f = r.ffn();
    norm_forward(r.k, r.cfg, NormKind::layernorm, l.attn_norm, l.attn_mean, l.attn_rstd, x,
                 r.P(p.attn_norm_w), r.P(p.attn_norm_b), ns);
    LinearInput in = r.linear.column_input(l.attn_norm, l.attn_norm_lp, r.s.full_a, n, true);
    r.linear.forward(l.qkv, in, p.q_w, p.q_b, n, c, r.qkv_width());
    attention_forward(r, l, x);

    norm_forward(r.k, r.cfg, NormKind::layernorm, l.mlp_norm, l.mlp_mean, l.mlp_rstd, l.resid_mid,
                 r.P(p.mlp_norm_w), r.P(p.mlp_norm_b), ns);
    in = r.linear.column_input(l.mlp_norm, l.mlp_norm_lp, r.s.full_a, n, true);
    r.linear.forward(l.mlp_pre, in, p.fc_w, p.fc_b, n, c, f);
    // bf16 GELU writes the proj GEMM's bf16 input straight away (no f32 activation to round).
    const DType prec = r.linear.precision();
    if (prec == DType::bf16) {
      r.k.gelu_forward(DType::bf16, l.mlp_act_lp, l.mlp_pre, n * f);
    } else {
      r.k.gelu_forward(DType::f32, l.mlp_act, l.mlp_pre, n * f);
      if (r.lowp()) r.k.to_lowp(prec, l.mlp_act_lp, l.mlp_act, n * f);
    }
    r.linear.row_parallel(l.resid_out, r.kept(l.mlp_act, l.mlp_act_lp), p.proj_w, p.proj_b,
                          l.resid_mid, n, f);
  }

  void backward(BlockRun& r, LayerActivations& l, const float* x) const override {
    const BlockParams& p = r.p;
    GradScratch& s = r.s;
    const int64_t n = r.n(), ns = r.ns(), c = r.c(), f = r.ffn();
    // Under sp, full_a holds the gathered output gradient, then the full-row input gradient;
    // full_b the re-gathered norm output (forward kept only this rank's rows of it).
    float* dnorm_rows = r.tp.sp() ? s.full_a : s.dnorm;

    // s.dresid holds dL/d(block output); the residual path passes it through unchanged.
    const float* dy = r.tp.gather_rows(s.dresid, s.full_a, n, c);
    r.linear.backward(s.dmlp_act, r.G(p.proj_w), r.G(p.proj_b), dy, r.kept(l.mlp_act, l.mlp_act_lp),
                      p.proj_w, n, f, c);
    r.k.gelu_backward(s.dmlp_pre, l.mlp_pre, s.dmlp_act, n * f);
    LinearInput in = r.linear.column_input(l.mlp_norm, l.mlp_norm_lp, s.full_b, n, false);
    r.linear.backward(dnorm_rows, r.G(p.fc_w), r.G(p.fc_b), s.dmlp_pre, in, p.fc_w, n, c, f);
    r.tp.reduce_rows(dnorm_rows, s.dnorm, n, c);
    norm_backward(r.k, r.cfg, NormKind::layernorm, s.dresid, r.G(p.mlp_norm_w), r.G(p.mlp_norm_b),
                  s.dnorm, l.resid_mid, r.P(p.mlp_norm_w), l.mlp_mean, l.mlp_rstd, ns);

    // s.dresid now holds dL/d(residual after attention).
    attention_backward(r, l);
    in = r.linear.column_input(l.attn_norm, l.attn_norm_lp, s.full_b, n, false);
    r.linear.backward(dnorm_rows, r.G(p.q_w), r.G(p.q_b), s.dqkv, in, p.q_w, n, c, r.qkv_width());
    r.tp.reduce_rows(dnorm_rows, s.dnorm, n, c);
    norm_backward(r.k, r.cfg, NormKind::layernorm, s.dresid, r.G(p.attn_norm_w), r.G(p.attn_norm_b),
                  s.dnorm, x, r.P(p.attn_norm_w), l.attn_mean, l.attn_rstd, ns);
  }
};

}  // namespace

const Block& gpt2_block() {
  static const Gpt2Block block;
  return block;
}

}  // namespace strata
