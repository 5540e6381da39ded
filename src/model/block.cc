// The pieces every family's block is built from: parameter slices, norms, the attention
// sub-layer; and the table of families.
#include "model/block.h"

namespace strata {

const Block& gpt2_block();       // block_gpt2.cc
const Block& llama_block();      // block_llama.cc
const Block& qwen3_block();      // block_qwen3.cc
const Block& mixtral_block();    // block_mixtral.cc
const Block& qwen3_moe_block();  // block_qwen3_moe.cc

const Block& block_for(ModelFamily family) {
  switch (family) {
    case ModelFamily::gpt2:
      return gpt2_block();
    case ModelFamily::llama:
      return llama_block();
    case ModelFamily::qwen3:
      return qwen3_block();
    case ModelFamily::mixtral:
      return mixtral_block();
    case ModelFamily::qwen3_moe:
      return qwen3_moe_block();
  }
  fail("unknown model family ", static_cast<int>(family));
}

// ---- parameter slices --------------------------------------------------------------------------

TensorSlice ParamSlices::split(int dim, int64_t begin, int64_t global) const {
  TensorSlice s;
  if (sh.tp == 1) return s;
  s.dim = dim;
  s.begin = begin;
  s.global = global;
  return s;
}

TensorSlice ParamSlices::replicated(bool row_partial) const {
  TensorSlice s;
  if (sh.tp == 1) return s;
  s.holders = sh.tp;
  s.holder_index = sh.tp_rank;
  s.replicated = true;
  s.sum_grads = row_partial && sh.sp;
  return s;
}

TensorSlice ParamSlices::head_partial() const {
  TensorSlice s = replicated(false);
  s.sum_grads = sh.tp > 1;
  return s;
}

TensorSlice ParamSlices::experts() const {
  TensorSlice s = replicated(true);
  s.expert = true;
  if (sh.ep > 1) {
    s.dim = 0;
    s.begin = sh.expert_begin(cfg);
    s.global = cfg.moe.experts;
  }
  return s;
}

TensorSlice ParamSlices::kv(int64_t per_head) const {
  TensorSlice s = split(0, sh.kv_head_begin(cfg) * per_head, cfg.kv_heads() * per_head);
  if (sh.tp > 1 && sh.kv_holders(cfg) > 1) {
    s.holders = sh.kv_holders(cfg);
    s.holder_index = sh.tp_rank % sh.kv_holders(cfg);
    s.sum_grads = true;
  }
  return s;
}

TensorSlice ParamSlices::query(int dim) const {
  const int64_t hd = cfg.head_dim();
  return split(dim, sh.tp_rank * sh.heads(cfg) * hd, cfg.n_head * hd);
}

void register_attention(ParamStore& p, const ParamSlices& sl, const std::string& pre, int g,
                        bool bias, BlockParams& b) {
  const int64_t c = sl.cfg.d_model, hd = sl.cfg.head_dim();
  const int64_t nh = sl.sh.heads(sl.cfg), nkv = sl.sh.kv_heads(sl.cfg);
  b.q_w = p.add(pre + "attn.q.weight", {nh * hd, c}, g, sl.query(0));
  b.k_w = p.add(pre + "attn.k.weight", {nkv * hd, c}, g, sl.kv(hd));
  b.v_w = p.add(pre + "attn.v.weight", {nkv * hd, c}, g, sl.kv(hd));
  if (bias) {
    b.q_b = p.add(pre + "attn.q.bias", {nh * hd}, g, sl.query(0));
    b.k_b = p.add(pre + "attn.k.bias", {nkv * hd}, g, sl.kv(hd));
    b.v_b = p.add(pre + "attn.v.bias", {nkv * hd}, g, sl.kv(hd));
  }
  b.o_w = p.add(pre + "attn.o.weight", {c, nh * hd}, g, sl.query(1));
  // A row-parallel bias is added after the reduction, and its gradient comes from the full rows
  // of the output gradient: replicated, never partial.
  if (bias) b.o_b = p.add(pre + "attn.o.bias", {c}, g, sl.replicated(false));
}

// ---- norms -------------------------------------------------------------------------------------

void norm_forward(Backend& k, const ModelConfig& cfg, NormKind norm, float* y, float* mean,
                  float* rstd, const float* x, const float* w, const float* bias, int64_t rows) {
  if (norm == NormKind::layernorm)
    k.layernorm_forward(y, mean, rstd, x, w, bias, rows, cfg.d_model, cfg.norm_eps);
  else
    k.rmsnorm_forward(y, rstd, x, w, rows, cfg.d_model, cfg.norm_eps);
}

void norm_backward(Backend& k, const ModelConfig& cfg, NormKind norm, float* dx, float* dw,
                   float* dbias, const float* dy, const float* x, const float* w, const float* mean,
                   const float* rstd, int64_t rows) {
  if (norm == NormKind::layernorm)
    k.layernorm_backward(dx, dw, dbias, dy, x, w, mean, rstd, rows, cfg.d_model);
  else
    k.rmsnorm_backward(dx, dw, dy, x, w, rstd, rows, cfg.d_model);
}

// ---- attention ---------------------------------------------------------------------------------

namespace {
bool bf16_flash(const BlockRun& r) {
  return bf16_flash_attention(r.linear.precision(), r.cfg) && !r.context;
}
// What flash attention reads: the bf16 copy of q, k, v where it reads bf16, else the f32 values.
DType qkv_type(const BlockRun& r) {
  return bf16_flash(r) ? DType::bf16 : DType::f32;
}
const void* flash_qkv(const BlockRun& r, const LayerActivations& l) {
  return bf16_flash(r) ? static_cast<const void*>(l.qkv_lp) : l.qkv;
}
}  // namespace

void attention_forward(BlockRun& r, LayerActivations& l, const float* x) {
  Backend& k = r.k;
  const DType prec = r.linear.precision();
  const int64_t n = r.n(), nh = r.heads(), hd = r.head_dim();
  if (r.lowp()) {
    // q, k, v are kept in 16 bits; attention (scores, softmax, weighted sum in f32) reads the
    // rounded values in forward as backward will: bf16 flash attention reads them directly
    // (vdpbf16ps products), the other kernels widened to f32.
    const int64_t count = n * r.qkv_width();
    k.to_lowp(prec, l.qkv_lp, l.qkv, count);
    if (!bf16_flash(r)) k.from_lowp(prec, l.qkv, l.qkv_lp, count);
  }
  if (r.context)
    r.context->forward(r.context_slot, l.attn_out, l.lse, l.qkv, r.attention_shape());
  else if (r.cfg.flash_attention())
    k.flash_attention_forward(qkv_type(r), l.attn_out, l.lse, flash_qkv(r, l), r.attention_shape());
  else
    k.attention_forward(l.attn_out, l.probs, l.qkv, r.attention_shape());
  if (r.lowp()) k.to_lowp(prec, l.attn_out_lp, l.attn_out, n * nh * hd);
  r.linear.row_parallel(l.resid_mid, r.kept(l.attn_out, l.attn_out_lp), r.p.o_w, r.p.o_b, x, n,
                        nh * hd);
}

void attention_backward(BlockRun& r, LayerActivations& l) {
  Backend& k = r.k;
  GradScratch& s = r.s;
  const int64_t n = r.n(), nh = r.heads(), hd = r.head_dim();
  const float* dy = r.tp.gather_rows(s.dresid, s.full_a, n, r.c());
  // Flash attention keeps attn_out in f32 (its backward reads it): round it again for the GEMM.
  if (r.lowp() && r.cfg.flash_attention())
    k.to_lowp(r.linear.precision(), l.attn_out_lp, l.attn_out, n * nh * hd);
  r.linear.backward(s.dattn, r.G(r.p.o_w), r.G(r.p.o_b), dy, r.kept(l.attn_out, l.attn_out_lp),
                    r.p.o_w, n, nh * hd, r.c());
  if (r.context)
    r.context->backward(r.context_slot, s.dqkv, s.dattn, l.qkv, l.attn_out, l.lse,
                        r.attention_shape());
  else if (r.cfg.flash_attention())
    k.flash_attention_backward(qkv_type(r), s.dqkv, s.attn_scratch, s.dattn, flash_qkv(r, l),
                               l.attn_out, l.lse, r.attention_shape());
  else
    k.attention_backward(s.dqkv, s.attn_scratch, s.dattn, l.qkv, l.probs, r.attention_shape());
}

// ---- the RMSNorm families' qkv input and SwiGLU MLP ------------------------------------------

void rms_qkv_forward(BlockRun& r, LayerActivations& l, const float* x) {
  const int64_t n = r.n(), c = r.c();
  norm_forward(r.k, r.cfg, NormKind::rmsnorm, l.attn_norm, nullptr, l.attn_rstd, x,
               r.P(r.p.attn_norm_w), nullptr, r.ns());
  LinearInput in = r.linear.column_input(l.attn_norm, l.attn_norm_lp, r.s.full_a, n, true);
  r.linear.forward(l.qkv, in, r.p.q_w, -1, n, c, r.qkv_width());
}

void rms_qkv_backward(BlockRun& r, LayerActivations& l, const float* x) {
  GradScratch& s = r.s;
  const int64_t n = r.n(), c = r.c();
  // Under sp, full_a receives the full-row input gradient, full_b the re-gathered norm output.
  float* dnorm_rows = r.tp.sp() ? s.full_a : s.dnorm;
  LinearInput in = r.linear.column_input(l.attn_norm, l.attn_norm_lp, s.full_b, n, false);
  r.linear.backward(dnorm_rows, r.G(r.p.q_w), nullptr, s.dqkv, in, r.p.q_w, n, c, r.qkv_width());
  r.tp.reduce_rows(dnorm_rows, s.dnorm, n, c);
  norm_backward(r.k, r.cfg, NormKind::rmsnorm, s.dresid, r.G(r.p.attn_norm_w), nullptr, s.dnorm, x,
                r.P(r.p.attn_norm_w), nullptr, l.attn_rstd, r.ns());
}

// ---- Llama's attention: RMSNorm, q|k|v without biases, RoPE --------------------------------

void register_rope_attention(ParamStore& p, const ParamSlices& sl, const std::string& pre, int g,
                             BlockParams& b) {
  b.attn_norm_w = p.add(pre + "attn_norm.weight", {sl.cfg.d_model}, g, sl.replicated(true));
  register_attention(p, sl, pre, g, /*bias=*/false, b);
}

void rope_attention_forward(BlockRun& r, LayerActivations& l, const float* x) {
  rms_qkv_forward(r, l, x);
  r.k.rope_forward(l.qkv, r.attention_shape(), r.cfg.rope(), r.positions());
  attention_forward(r, l, x);
}

void rope_attention_backward(BlockRun& r, LayerActivations& l, const float* x) {
  attention_backward(r, l);
  r.k.rope_backward(r.s.dqkv, r.attention_shape(), r.cfg.rope(), r.positions());
  rms_qkv_backward(r, l, x);
}

// ---- Qwen3's attention: Llama's, with a per-head RMSNorm of q and k before RoPE --------------

void register_qk_norm_attention(ParamStore& p, const ParamSlices& sl, const std::string& pre, int g,
                                BlockParams& b) {
  const int64_t hd = sl.cfg.head_dim();
  register_rope_attention(p, sl, pre, g, b);
  b.q_norm_w = p.add(pre + "attn.q_norm.weight", {hd}, g, sl.head_partial());
  b.k_norm_w = p.add(pre + "attn.k_norm.weight", {hd}, g, sl.head_partial());
}

void qk_norm_attention_forward(BlockRun& r, LayerActivations& l, const float* x) {
  rms_qkv_forward(r, l, x);
  r.k.head_rmsnorm_forward(l.qkv, l.qk_pre, l.qk_rstd, r.P(r.p.q_norm_w), r.P(r.p.k_norm_w),
                           r.attention_shape(), r.cfg.norm_eps);
  r.k.rope_forward(l.qkv, r.attention_shape(), r.cfg.rope(), r.positions());
  attention_forward(r, l, x);
}

void qk_norm_attention_backward(BlockRun& r, LayerActivations& l, const float* x) {
  attention_backward(r, l);
  r.k.rope_backward(r.s.dqkv, r.attention_shape(), r.cfg.rope(), r.positions());
  r.k.head_rmsnorm_backward(r.s.dqkv, r.G(r.p.q_norm_w), r.G(r.p.k_norm_w), l.qk_pre, l.qk_rstd,
                            r.P(r.p.q_norm_w), r.P(r.p.k_norm_w), r.attention_shape());
  rms_qkv_backward(r, l, x);
}

void register_swiglu_mlp(ParamStore& p, const ParamSlices& sl, const std::string& pre, int g,
                         BlockParams& b) {
  const ModelConfig& cfg = sl.cfg;
  const int64_t c = cfg.d_model, f = sl.sh.ffn(cfg), f0 = sl.sh.tp_rank * f;
  b.mlp_norm_w = p.add(pre + "mlp_norm.weight", {c}, g, sl.replicated(true));
  b.gate_w = p.add(pre + "mlp.gate.weight", {f, c}, g, sl.split(0, f0, cfg.d_ff));
  b.up_w = p.add(pre + "mlp.up.weight", {f, c}, g, sl.split(0, f0, cfg.d_ff));
  b.down_w = p.add(pre + "mlp.down.weight", {c, f}, g, sl.split(1, f0, cfg.d_ff));
}

void swiglu_mlp_forward(BlockRun& r, LayerActivations& l) {
  const BlockParams& p = r.p;
  const int64_t n = r.n(), c = r.c(), f = r.ffn();
  norm_forward(r.k, r.cfg, NormKind::rmsnorm, l.mlp_norm, nullptr, l.mlp_rstd, l.resid_mid,
               r.P(p.mlp_norm_w), nullptr, r.ns());
  LinearInput in = r.linear.column_input(l.mlp_norm, l.mlp_norm_lp, r.s.full_a, n, true);
  r.linear.forward(l.mlp_pre, in, p.gate_w, -1, n, c, 2 * f);
  r.k.swiglu_forward(l.mlp_act, l.mlp_pre, n, f);
  if (r.lowp()) r.k.to_lowp(r.linear.precision(), l.mlp_act_lp, l.mlp_act, n * f);
  r.linear.row_parallel(l.resid_out, r.kept(l.mlp_act, l.mlp_act_lp), p.down_w, -1, l.resid_mid, n,
                        f);
}

void swiglu_mlp_backward(BlockRun& r, LayerActivations& l) {
  const BlockParams& p = r.p;
  GradScratch& s = r.s;
  const int64_t n = r.n(), c = r.c(), f = r.ffn();
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
                l.resid_mid, r.P(p.mlp_norm_w), nullptr, l.mlp_rstd, r.ns());
}

}  // namespace strata
