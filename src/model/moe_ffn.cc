#include "model/moe_ffn.h"

namespace strata {

void register_moe_ffn(ParamStore& p, const ParamSlices& sl, const std::string& pre, int g,
                      BlockParams& b) {
  const ModelConfig& cfg = sl.cfg;
  const int64_t c = cfg.d_model, e = cfg.moe.experts, f = cfg.expert_ffn();
  // Whole tensors: one process holds every expert (no tensor or expert parallelism yet).
  b.mlp_norm_w = p.add(pre + "mlp_norm.weight", {c}, g, sl.replicated(true));
  b.router_w = p.add(pre + "moe.router.weight", {e, c}, g, TensorSlice{});
  b.experts_gate_up_w = p.add(pre + "moe.experts.gate_up.weight", {e, 2 * f, c}, g, TensorSlice{});
  b.experts_down_w = p.add(pre + "moe.experts.down.weight", {e, c, f}, g, TensorSlice{});
  if (const int64_t s = cfg.shared_ffn(); s > 0) {
    b.shared_gate_up_w = p.add(pre + "moe.shared.gate_up.weight", {2 * s, c}, g, TensorSlice{});
    b.shared_down_w = p.add(pre + "moe.shared.down.weight", {c, s}, g, TensorSlice{});
  }
}

void moe_ffn_forward(BlockRun& r, LayerActivations& l) {
  Backend& k = r.k;
  const BlockParams& p = r.p;
  const MoeConfig& m = r.cfg.moe;
  const int64_t n = r.n(), c = r.c(), e = m.experts, top = m.top_k, f = r.cfg.expert_ffn();
  norm_forward(k, r.cfg, NormKind::rmsnorm, l.mlp_norm, nullptr, l.mlp_rstd, l.resid_mid,
               r.P(p.mlp_norm_w), nullptr, n);
  // The layer keeps the logits only when the z-loss's backward reads them again.
  float* logits = l.moe_logits ? l.moe_logits : r.s.moe_logits;
  k.linear_forward(DType::f32, logits, l.mlp_norm, r.P(p.router_w), nullptr, {n, c, e}, {});
  k.moe_route_forward(m.gating, l.moe_expert_idx, l.moe_weight, l.moe_probs, logits, nullptr, n, e,
                      top, m.normalize_topk, m.routed_scale);
  const int64_t dropped =
      k.moe_dispatch_plan(l.moe_offsets, l.moe_row_token, nullptr, l.moe_token_row,
                          l.moe_tokens_per_expert, l.moe_expert_idx, n, e, top, m.capacity(n));
  const int64_t rows = n * top - dropped;
  k.moe_permute_forward(l.moe_xs, l.mlp_norm, l.moe_row_token, rows, c);
  k.moe_grouped_linear_forward(l.moe_gate_up, l.moe_xs, r.P(p.experts_gate_up_w), l.moe_offsets, e,
                               c, 2 * f);
  k.swiglu_forward(l.moe_h, l.moe_gate_up, rows, f);
  k.moe_grouped_linear_forward(l.moe_ys, l.moe_h, r.P(p.experts_down_w), l.moe_offsets, e, f, c);
  k.moe_combine_forward(l.resid_out, l.moe_ys, l.moe_weight, l.moe_token_row, n, top, c);
  if (const int64_t s = r.cfg.shared_ffn(); s > 0) {  // + the shared experts' SwiGLU, every token
    k.linear_forward(DType::f32, l.moe_shared_gate_up, l.mlp_norm, r.P(p.shared_gate_up_w), nullptr,
                     {n, c, 2 * s}, {});
    k.swiglu_forward(l.moe_shared_h, l.moe_shared_gate_up, n, s);
    // resid_out += h_s down^T, accumulated by the GEMM itself (beta 1): no [n, c] temporary.
    k.gemm(DType::f32, false, true, n, c, s, 1.0f, l.moe_shared_h, s, r.P(p.shared_down_w), s, 1.0f,
           l.resid_out, c);
  }
  k.add_inplace(l.resid_out, l.resid_mid, n * c);

  MoeLayerStats& st = *r.moe;
  st.rows = rows;
  st.dropped = dropped;
  st.tokens_per_expert.resize(static_cast<size_t>(e));
  k.copy_to_host(st.tokens_per_expert.data(), l.moe_tokens_per_expert,
                 static_cast<size_t>(e) * sizeof(int64_t));
  st.aux_loss = m.aux_loss_coeff > 0
                    ? k.moe_aux_loss_forward(m.gating, l.moe_probs, l.moe_tokens_per_expert, n, e,
                                             top, m.aux_loss_coeff)
                    : 0.0;
  st.z_loss = m.z_loss_coeff > 0 ? k.moe_z_loss_forward(logits, n, e, m.z_loss_coeff) : 0.0;
}

void moe_ffn_backward(BlockRun& r, LayerActivations& l) {
  Backend& k = r.k;
  GradScratch& s = r.s;
  const BlockParams& p = r.p;
  const MoeConfig& m = r.cfg.moe;
  const int64_t n = r.n(), c = r.c(), e = m.experts, top = m.top_k, f = r.cfg.expert_ffn();
  const int64_t rows = r.moe->rows;
  // s.dresid holds dL/d(block output); the residual path passes it through unchanged. The
  // expert rows' gradient buffer holds dys, then (dys read) dxs, then the router's dx.
  k.moe_combine_backward(s.moe_drows, s.moe_dweight, s.dresid, l.moe_ys, l.moe_weight,
                         l.moe_token_row, n, top, c);
  k.moe_grouped_linear_backward(s.moe_dh, r.G(p.experts_down_w), s.moe_drows, l.moe_h,
                                r.P(p.experts_down_w), l.moe_offsets, e, f, c);
  k.swiglu_backward(s.moe_dgate_up, l.moe_gate_up, s.moe_dh, rows, f);
  k.moe_grouped_linear_backward(s.moe_drows, r.G(p.experts_gate_up_w), s.moe_dgate_up, l.moe_xs,
                                r.P(p.experts_gate_up_w), l.moe_offsets, e, c, 2 * f);
  k.moe_permute_backward(s.dnorm, s.moe_drows, l.moe_token_row, n, top, c);
  if (const int64_t sf = r.cfg.shared_ffn(); sf > 0) {  // the shared experts, into dnorm too
    k.linear_backward(DType::f32, s.moe_shared_dh, r.G(p.shared_down_w), nullptr, s.dresid,
                      l.moe_shared_h, r.P(p.shared_down_w), {n, sf, c}, {});
    k.swiglu_backward(s.moe_shared_dgate_up, l.moe_shared_gate_up, s.moe_shared_dh, n, sf);
    k.linear_backward(DType::f32, s.moe_drows, r.G(p.shared_gate_up_w), nullptr,
                      s.moe_shared_dgate_up, l.mlp_norm, r.P(p.shared_gate_up_w), {n, c, 2 * sf},
                      {});
    k.add_inplace(s.dnorm, s.moe_drows, n * c);
  }
  // The router: the combine weights' gradient through the chosen probabilities, plus the
  // balancing losses at this micro-batch's weight in the objective (see moe_ffn.h).
  k.moe_route_backward(m.gating, s.moe_dlogits, s.moe_dweight, l.moe_probs, l.moe_expert_idx, n, e,
                       top, m.normalize_topk, m.routed_scale);
  const float weight = r.loss_scale * static_cast<float>(n);
  if (m.aux_loss_coeff > 0)
    k.moe_aux_loss_backward(m.gating, s.moe_dlogits, l.moe_probs, l.moe_tokens_per_expert, n, e,
                            top, m.aux_loss_coeff * weight);
  if (m.z_loss_coeff > 0)
    k.moe_z_loss_backward(s.moe_dlogits, l.moe_logits, n, e, m.z_loss_coeff * weight);
  k.linear_backward(DType::f32, s.moe_drows, r.G(p.router_w), nullptr, s.moe_dlogits, l.mlp_norm,
                    r.P(p.router_w), {n, c, e}, {});
  k.add_inplace(s.dnorm, s.moe_drows, n * c);
  norm_backward(k, r.cfg, NormKind::rmsnorm, s.dresid, r.G(p.mlp_norm_w), nullptr, s.dnorm,
                l.resid_mid, r.P(p.mlp_norm_w), nullptr, l.mlp_rstd, n);
}

}  // namespace strata
