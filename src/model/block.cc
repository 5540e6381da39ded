// The pieces every family's block is built from: parameter slices, norms, the attention
// sub-layer; and the table of families.
#include "model/block.h"

namespace strata {

const Block& gpt2_block();   // block_gpt2.cc
const Block& llama_block();  // block_llama.cc

const Block& block_for(ModelFamily family) {
  switch (family) {
    case ModelFamily::gpt2:
      return gpt2_block();
    case ModelFamily::llama:
      return llama_block();
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
  return bf16_flash_attention(r.linear.precision(), r.cfg);
}
}  // namespace

void attention_forward(BlockRun& r, LayerActivations& l, const float* x) {
  Backend& k = r.k;
  const DType prec = r.linear.precision();
  const int64_t b = r.b, t = r.t, n = r.n(), nh = r.heads(), nkv = r.kv_heads(), hd = r.head_dim();
  if (r.lowp()) {
    // q, k, v are kept in 16 bits; attention (scores, softmax, weighted sum in f32) reads the
    // rounded values in forward as backward will: bf16 flash attention reads them directly
    // (vdpbf16ps products), the other kernels widened to f32.
    const int64_t count = n * r.qkv_width();
    k.to_lowp(prec, l.qkv_lp, l.qkv, count);
    if (!bf16_flash(r)) k.from_lowp(prec, l.qkv, l.qkv_lp, count);
  }
  if (bf16_flash(r))
    k.flash_attention_forward_bf16(l.attn_out, l.lse, l.qkv_lp, b, t, nh, nkv, hd);
  else if (r.cfg.flash_attention())
    k.flash_attention_forward(l.attn_out, l.lse, l.qkv, b, t, nh, nkv, hd);
  else
    k.attention_forward(l.attn_out, l.probs, l.qkv, b, t, nh, nkv, hd);
  if (r.lowp()) k.to_lowp(prec, l.attn_out_lp, l.attn_out, n * nh * hd);
  r.linear.row_parallel(l.resid_mid, r.kept(l.attn_out, l.attn_out_lp), r.p.o_w, r.p.o_b, x, n,
                        nh * hd);
}

void attention_backward(BlockRun& r, LayerActivations& l) {
  Backend& k = r.k;
  GradScratch& s = r.s;
  const int64_t b = r.b, t = r.t, n = r.n(), nh = r.heads(), nkv = r.kv_heads(), hd = r.head_dim();
  const float* dy = r.tp.gather_rows(s.dresid, s.full_a, n, r.c());
  // Flash attention keeps attn_out in f32 (its backward reads it): round it again for the GEMM.
  if (r.lowp() && r.cfg.flash_attention())
    k.to_lowp(r.linear.precision(), l.attn_out_lp, l.attn_out, n * nh * hd);
  r.linear.backward(s.dattn, r.G(r.p.o_w), r.G(r.p.o_b), dy, r.kept(l.attn_out, l.attn_out_lp),
                    r.p.o_w, n, nh * hd, r.c());
  if (bf16_flash(r))
    k.flash_attention_backward_bf16(s.dqkv, s.attn_scratch, s.dattn, l.qkv_lp, l.attn_out, l.lse, b,
                                    t, nh, nkv, hd);
  else if (r.cfg.flash_attention())
    k.flash_attention_backward(s.dqkv, s.attn_scratch, s.dattn, l.qkv, l.attn_out, l.lse, b, t, nh,
                               nkv, hd);
  else
    k.attention_backward(s.dqkv, s.attn_scratch, s.dattn, l.qkv, l.probs, b, t, nh, nkv, hd);
}

}  // namespace strata
