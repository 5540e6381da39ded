// The Llama block: RMSNorm, grouped-query attention without biases and with RoPE on q and k,
// SwiGLU MLP (gate|up in one GEMM of width 2f, down).
//
//   x -> RMSNorm -> q|k|v -> RoPE(q, k) -> attention -> o + x = h -> RMSNorm -> gate|up -> SwiGLU
//     -> down + h
#include "model/block.h"

namespace strata {

namespace {

class LlamaBlock final : public Block {
 public:
  BlockLayout layout() const override { return {.norm = NormKind::rmsnorm, .mlp_pre_factor = 2}; }

  BlockParams register_params(ParamStore& p, const ParamSlices& sl, int64_t layer) const override {
    const ModelConfig& cfg = sl.cfg;
    const int64_t c = cfg.d_model, f = sl.sh.ffn(cfg), f0 = sl.sh.tp_rank * f;
    const std::string pre = "layers." + std::to_string(layer) + ".";
    const int g = static_cast<int>(layer) + 1;
    BlockParams b;
    b.attn_norm_w = p.add(pre + "attn_norm.weight", {c}, g, sl.replicated(true));
    register_attention(p, sl, pre, g, /*bias=*/false, b);
    b.mlp_norm_w = p.add(pre + "mlp_norm.weight", {c}, g, sl.replicated(true));
    b.gate_w = p.add(pre + "mlp.gate.weight", {f, c}, g, sl.split(0, f0, cfg.d_ff));
    b.up_w = p.add(pre + "mlp.up.weight", {f, c}, g, sl.split(0, f0, cfg.d_ff));
    b.down_w = p.add(pre + "mlp.down.weight", {c, f}, g, sl.split(1, f0, cfg.d_ff));
    return b;
  }

  void forward(BlockRun& r, LayerActivations& l, const float* x) const override {
    const BlockParams& p = r.p;
    const int64_t n = r.n(), ns = r.ns(), c = r.c(), f = r.ffn();
    norm_forward(r.k, r.cfg, NormKind::rmsnorm, l.attn_norm, nullptr, l.attn_rstd, x,
                 r.P(p.attn_norm_w), nullptr, ns);
    LinearInput in = r.linear.column_input(l.attn_norm, l.attn_norm_lp, r.s.full_a, n, true);
    r.linear.forward(l.qkv, in, p.q_w, -1, n, c, r.qkv_width());
    r.k.rope_forward(l.qkv, r.b, r.t, r.heads(), r.kv_heads(), r.head_dim(), r.cfg.rope_theta);
    attention_forward(r, l, x);

    norm_forward(r.k, r.cfg, NormKind::rmsnorm, l.mlp_norm, nullptr, l.mlp_rstd, l.resid_mid,
                 r.P(p.mlp_norm_w), nullptr, ns);
    in = r.linear.column_input(l.mlp_norm, l.mlp_norm_lp, r.s.full_a, n, true);
    r.linear.forward(l.mlp_pre, in, p.gate_w, -1, n, c, 2 * f);
    r.k.swiglu_forward(l.mlp_act, l.mlp_pre, n, f);
    if (r.lowp()) r.k.to_lowp(r.linear.precision(), l.mlp_act_lp, l.mlp_act, n * f);
    r.linear.row_parallel(l.resid_out, r.kept(l.mlp_act, l.mlp_act_lp), p.down_w, -1, l.resid_mid,
                          n, f);
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
    r.linear.backward(s.dmlp_act, r.G(p.down_w), nullptr, dy, r.kept(l.mlp_act, l.mlp_act_lp),
                      p.down_w, n, f, c);
    r.k.swiglu_backward(s.dmlp_pre, l.mlp_pre, s.dmlp_act, n, f);
    LinearInput in = r.linear.column_input(l.mlp_norm, l.mlp_norm_lp, s.full_b, n, false);
    r.linear.backward(dnorm_rows, r.G(p.gate_w), nullptr, s.dmlp_pre, in, p.gate_w, n, c, 2 * f);
    r.tp.reduce_rows(dnorm_rows, s.dnorm, n, c);
    norm_backward(r.k, r.cfg, NormKind::rmsnorm, s.dresid, r.G(p.mlp_norm_w), nullptr, s.dnorm,
                  l.resid_mid, r.P(p.mlp_norm_w), nullptr, l.mlp_rstd, ns);

    // s.dresid now holds dL/d(residual after attention).
    attention_backward(r, l);
    r.k.rope_backward(s.dqkv, r.b, r.t, r.heads(), r.kv_heads(), r.head_dim(), r.cfg.rope_theta);
    in = r.linear.column_input(l.attn_norm, l.attn_norm_lp, s.full_b, n, false);
    r.linear.backward(dnorm_rows, r.G(p.q_w), nullptr, s.dqkv, in, p.q_w, n, c, r.qkv_width());
    r.tp.reduce_rows(dnorm_rows, s.dnorm, n, c);
    norm_backward(r.k, r.cfg, NormKind::rmsnorm, s.dresid, r.G(p.attn_norm_w), nullptr, s.dnorm, x,
                  r.P(p.attn_norm_w), nullptr, l.attn_rstd, ns);
  }
};

}  // namespace

const Block& llama_block() {
  static const LlamaBlock block;
  return block;
}

}  // namespace strata
