#include "model/moe_ffn.h"

namespace strata {

void register_moe_ffn(ParamStore& p, const ParamSlices& sl, int64_t layer, BlockParams& b) {
  const ModelConfig& cfg = sl.cfg;
  const std::string pre = "layers." + std::to_string(layer) + ".";
  const int g = layer_group(layer), eg = expert_group(cfg, layer);
  const MoeConfig& m = cfg.moe;
  const int64_t c = cfg.d_model, e = sl.sh.experts(cfg), f = cfg.expert_ffn(),
                in = m.input_factor();
  // SwiGLU's fused gate|up, or GELU's fc (GPT-2's name), of the experts and shared experts.
  const std::string first = m.activation == MoeActivation::swiglu ? "gate_up" : "fc";
  b.mlp_norm_w = p.add(pre + "mlp_norm.weight", {c}, g, sl.replicated(true));
  b.router_w = p.add(pre + "moe.router.weight", {m.experts, c}, g, sl.replicated(true));
  // DeepSeek-V3's e_score_correction_bias: no gradient reaches it (it only shifts the choice), so
  // AdamW leaves it alone; the step's balancing update moves it (Trainer).
  if (m.router_bias())
    b.router_b = p.add(pre + "moe.router.bias", {m.experts}, g, sl.replicated(false));
  if (const int64_t s = cfg.shared_ffn(); s > 0) {
    b.shared_gate_up_w =
        p.add(pre + "moe.shared." + first + ".weight", {in * s, c}, g, sl.replicated(true));
    b.shared_down_w = p.add(pre + "moe.shared.down.weight", {c, s}, g, sl.replicated(true));
  }
  b.experts_gate_up_w =
      p.add(pre + "moe.experts." + first + ".weight", {e, in * f, c}, eg, sl.experts());
  b.experts_down_w = p.add(pre + "moe.experts.down.weight", {e, c, f}, eg, sl.experts());
}

namespace {

// The experts' activation: SwiGLU of [rows, 2f] gate|up, or GELU of [rows, f].
void act_forward(Backend& k, MoeActivation act, float* h, const float* pre, int64_t rows,
                 int64_t f) {
  if (act == MoeActivation::swiglu)
    k.swiglu_forward(h, pre, rows, f);
  else
    k.gelu_forward(DType::f32, h, pre, rows * f);
}
void act_backward(Backend& k, MoeActivation act, float* dpre, const float* pre, const float* dh,
                  int64_t rows, int64_t f) {
  if (act == MoeActivation::swiglu)
    k.swiglu_backward(dpre, pre, dh, rows, f);
  else
    k.gelu_backward(dpre, pre, dh, rows * f);
}

// The auxiliary loss's loads and coefficient. Scope "micro_batch": this rank's loads and the
// coefficient. Scope "global": the loads added over the R ranks holding rows of the micro-batch
// (kept in l.moe_balance_counts for backward; `gather` in forward) and the coefficient / R: with
// f from the global loads, each rank's loss coeff/R * e * sum f P_rank averages (and its gradient
// sums) over the ranks to coeff * e * sum f P_global, the loss of one process holding all rows.
struct AuxTerms {
  const int64_t* counts;
  float coeff;
};
AuxTerms aux_terms(BlockRun& r, LayerActivations& l, bool gather) {
  const MoeConfig& m = r.cfg.moe;
  if (m.aux_loss_scope != MoeAuxScope::global || !r.batch_groups)
    return {l.moe_tokens_per_expert, m.aux_loss_coeff};
  int ranks = 1;
  for (Comm* g : *r.batch_groups) ranks *= g->size();
  if (gather) {
    const int64_t e = m.experts;
    std::vector<int64_t> wide(static_cast<size_t>(e));
    std::vector<int32_t> load(static_cast<size_t>(e));
    r.k.copy_to_host(wide.data(), l.moe_tokens_per_expert, wide.size() * sizeof(int64_t));
    for (int64_t x = 0; x < e; ++x) load[x] = static_cast<int32_t>(wide[x]);
    for (Comm* g : *r.batch_groups)
      if (g->size() > 1) g->all_reduce(load.data(), e, DType::i32, ReduceOp::sum)->wait();
    for (int64_t x = 0; x < e; ++x) wide[x] = load[x];
    r.k.copy_from_host(l.moe_balance_counts, wide.data(), wide.size() * sizeof(int64_t));
  }
  return {l.moe_balance_counts, m.aux_loss_coeff / static_cast<float>(ranks)};
}

// The last of a device int64 array (the dispatch plan's row count), on the host.
int64_t last_of(Backend& k, const int64_t* offsets, int64_t e) {
  int64_t v = 0;
  k.copy_to_host(&v, offsets + e, sizeof(int64_t));
  return v;
}

// The exchange of this micro-batch, from the counts the layer kept (backward), on the host.
ExpertParallel::Exchange kept_exchange(const BlockRun& r, const LayerActivations& l) {
  const int64_t e = r.cfg.moe.experts;
  std::vector<int32_t> counts(static_cast<size_t>(r.ep->size() * e));
  r.k.copy_to_host(counts.data(), l.moe_ep_counts, counts.size() * sizeof(int32_t));
  return r.ep->plan(counts.data(), e, r.c(), nullptr, nullptr, nullptr);
}

// Forward with expert parallelism: the plan's rows (global-expert order, this rank's tokens) go to
// the experts' ranks, this rank's experts run on what arrives, and their outputs come back into
// l.moe_ys in the plan's row order. `overlap` runs while the rows travel.
template <class F>
void exchange_forward(BlockRun& r, LayerActivations& l, int64_t rows, F&& overlap) {
  Backend& k = r.k;
  const BlockParams& p = r.p;
  const int64_t c = r.c(), e = r.cfg.moe.experts, el = r.shard.experts(r.cfg);
  const int64_t f = r.cfg.expert_ffn(), ep = r.ep->size();
  float* send = r.s.moe_drows;  // free until backward
  k.moe_permute_forward(send, l.mlp_norm, l.moe_row_token, rows, c);
  std::vector<int64_t> offsets(static_cast<size_t>(e + 1)), local(static_cast<size_t>(el + 1));
  std::vector<int32_t> counts(static_cast<size_t>(ep * e));
  k.copy_to_host(offsets.data(), l.moe_offsets, offsets.size() * sizeof(int64_t));
  r.ep->gather_counts(offsets.data(), e, counts.data());
  const int64_t max_in = moe_expert_rows(r.cfg, r.shard, r.ns());
  std::vector<int32_t> sort(static_cast<size_t>(max_in)), unsort(static_cast<size_t>(max_in));
  const ExpertParallel::Exchange ex =
      r.ep->plan(counts.data(), e, c, local.data(), sort.data(), unsort.data());
  STRATA_CHECK(ex.rows_in <= max_in, "moe: ", ex.rows_in,
               " rows arrived for this rank's experts, above the ", max_in, " sized for");
  const WorkHandle dispatch = r.ep->to_experts(send, r.s.moe_recv, ex);
  k.copy_from_host(l.moe_ep_counts, counts.data(), counts.size() * sizeof(int32_t));
  k.copy_from_host(l.moe_ep_offsets, local.data(), local.size() * sizeof(int64_t));
  const size_t perm = static_cast<size_t>(ex.rows_in) * sizeof(int32_t);
  k.copy_from_host(l.moe_ep_sort, sort.data(), perm);
  k.copy_from_host(l.moe_ep_unsort, unsort.data(), perm);
  overlap();
  dispatch->wait();
  const int64_t in = ex.rows_in;
  k.moe_permute_forward(l.moe_xe, r.s.moe_recv, l.moe_ep_sort, in, c);
  k.moe_grouped_linear_forward(l.moe_gate_up, l.moe_xe, r.P(p.experts_gate_up_w), l.moe_ep_offsets,
                               el, c, r.cfg.moe.input_factor() * f);
  act_forward(k, r.cfg.moe.activation, l.moe_h, l.moe_gate_up, in, f);
  k.moe_grouped_linear_forward(r.s.moe_recv, l.moe_h, r.P(p.experts_down_w), l.moe_ep_offsets, el,
                               f, c);
  k.moe_permute_forward(r.s.moe_recv2, r.s.moe_recv, l.moe_ep_unsort, in, c);
  r.ep->from_experts(r.s.moe_recv2, l.moe_ys, ex)->wait();
}

// Its backward: dL/d(rows' outputs) in s.moe_drows (plan order) to dL/d(rows' inputs) there,
// the experts' weight gradients accumulated on the way. `overlap` runs while the rows travel.
template <class F>
void exchange_backward(BlockRun& r, LayerActivations& l, F&& overlap) {
  Backend& k = r.k;
  GradScratch& s = r.s;
  const BlockParams& p = r.p;
  const int64_t c = r.c(), el = r.shard.experts(r.cfg), f = r.cfg.expert_ffn();
  const ExpertParallel::Exchange ex = kept_exchange(r, l);
  const int64_t in = ex.rows_in;
  const WorkHandle dispatch = r.ep->to_experts(s.moe_drows, s.moe_recv, ex);
  overlap();
  dispatch->wait();
  k.moe_permute_forward(s.moe_recv2, s.moe_recv, l.moe_ep_sort, in, c);  // dys, expert-major
  k.moe_grouped_linear_backward(s.moe_dh, r.G(p.experts_down_w), s.moe_recv2, l.moe_h,
                                r.P(p.experts_down_w), l.moe_ep_offsets, el, f, c);
  act_backward(k, r.cfg.moe.activation, s.moe_dgate_up, l.moe_gate_up, s.moe_dh, in, f);
  k.moe_grouped_linear_backward(s.moe_recv2, r.G(p.experts_gate_up_w), s.moe_dgate_up, l.moe_xe,
                                r.P(p.experts_gate_up_w), l.moe_ep_offsets, el, c,
                                r.cfg.moe.input_factor() * f);
  k.moe_permute_forward(s.moe_recv, s.moe_recv2, l.moe_ep_unsort, in, c);  // dxs, source-major
  r.ep->from_experts(s.moe_recv, s.moe_drows, ex)->wait();
}

}  // namespace

void moe_ffn_forward(BlockRun& r, LayerActivations& l) {
  Backend& k = r.k;
  const BlockParams& p = r.p;
  const MoeConfig& m = r.cfg.moe;
  const int64_t n = r.ns(), c = r.c(), e = m.experts, top = m.top_k, f = r.cfg.expert_ffn();
  const int64_t sf = r.cfg.shared_ffn();
  norm_forward(k, r.cfg, NormKind::rmsnorm, l.mlp_norm, nullptr, l.mlp_rstd, l.resid_mid,
               r.P(p.mlp_norm_w), nullptr, n);
  // The layer keeps the logits only when the z-loss's backward reads them again.
  float* logits = l.moe_logits ? l.moe_logits : r.s.moe_logits;
  k.linear_forward(DType::f32, logits, l.mlp_norm, r.P(p.router_w), nullptr, {n, c, e}, {});
  k.moe_route_forward(m.gating, l.moe_expert_idx, l.moe_weight, l.moe_probs, logits,
                      r.P(p.router_b), n, e, top, m.normalize_topk, m.routed_scale);
  const int64_t dropped =
      k.moe_dispatch_plan(l.moe_offsets, l.moe_row_token, nullptr, l.moe_token_row,
                          l.moe_tokens_per_expert, l.moe_expert_idx, n, e, top, m.capacity(n));
  const int64_t rows = n * top - dropped;
  // The shared experts' gate|up and SwiGLU on every token, while the rows travel (ep > 1).
  auto shared_up = [&] {
    if (sf <= 0) return;
    k.linear_forward(DType::f32, l.moe_shared_gate_up, l.mlp_norm, r.P(p.shared_gate_up_w), nullptr,
                     {n, c, m.input_factor() * sf}, {});
    act_forward(k, m.activation, l.moe_shared_h, l.moe_shared_gate_up, n, sf);
  };
  if (r.ep && r.ep->active()) {
    exchange_forward(r, l, rows, shared_up);
  } else {
    k.moe_permute_forward(l.moe_xs, l.mlp_norm, l.moe_row_token, rows, c);
    k.moe_grouped_linear_forward(l.moe_gate_up, l.moe_xs, r.P(p.experts_gate_up_w), l.moe_offsets,
                                 e, c, m.input_factor() * f);
    act_forward(k, m.activation, l.moe_h, l.moe_gate_up, rows, f);
    k.moe_grouped_linear_forward(l.moe_ys, l.moe_h, r.P(p.experts_down_w), l.moe_offsets, e, f, c);
    shared_up();
  }
  k.moe_combine_forward(l.resid_out, l.moe_ys, l.moe_weight, l.moe_token_row, n, top, c);
  if (sf > 0) {
    // resid_out += h_s down^T, accumulated by the GEMM itself (beta 1): no [n, c] temporary.
    k.gemm(DType::f32, false, true, n, c, sf, 1.0f, l.moe_shared_h, sf, r.P(p.shared_down_w), sf,
           1.0f, l.resid_out, c);
  }
  k.add_inplace(l.resid_out, l.resid_mid, n * c);
  // The global loads are gathered on every forward, a rebuilding one too (its backward reads
  // them; every rank rebuilds the same layers in the same order).
  const AuxTerms aux = m.aux_loss_coeff > 0 ? aux_terms(r, l, /*gather=*/true)
                                            : AuxTerms{l.moe_tokens_per_expert, 0.0f};

  if (r.rebuilding) return;  // counted when the layer first ran
  MoeLayerStats& st = *r.moe;
  st.dropped += dropped;
  st.forwards += 1;
  std::vector<int64_t> load(static_cast<size_t>(e));
  k.copy_to_host(load.data(), l.moe_tokens_per_expert, load.size() * sizeof(int64_t));
  st.tokens_per_expert.resize(load.size(), 0);
  for (size_t x = 0; x < load.size(); ++x) st.tokens_per_expert[x] += load[x];
  if (m.aux_loss_coeff > 0)
    st.aux_loss += k.moe_aux_loss_forward(m.gating, l.moe_probs, aux.counts, n, e, top, aux.coeff);
  if (m.z_loss_coeff > 0) st.z_loss += k.moe_z_loss_forward(logits, n, e, m.z_loss_coeff);
}

void moe_ffn_backward(BlockRun& r, LayerActivations& l) {
  Backend& k = r.k;
  GradScratch& s = r.s;
  const BlockParams& p = r.p;
  const MoeConfig& m = r.cfg.moe;
  const int64_t n = r.ns(), c = r.c(), e = m.experts, top = m.top_k, f = r.cfg.expert_ffn();
  const int64_t sf = r.cfg.shared_ffn();
  const int64_t rows = last_of(k, l.moe_offsets, e);
  // s.dresid holds dL/d(block output); the residual path passes it through unchanged. The
  // expert rows' gradient buffer holds dys, then (dys read) dxs, then the router's dx.
  k.moe_combine_backward(s.moe_drows, s.moe_dweight, s.dresid, l.moe_ys, l.moe_weight,
                         l.moe_token_row, n, top, c);
  // The shared experts' backward, its input gradient into `dx` (overwritten).
  auto shared_backward = [&](float* dx) {
    k.linear_backward(DType::f32, s.moe_shared_dh, r.G(p.shared_down_w), nullptr, s.dresid,
                      l.moe_shared_h, r.P(p.shared_down_w), {n, sf, c}, {});
    act_backward(k, m.activation, s.moe_shared_dgate_up, l.moe_shared_gate_up, s.moe_shared_dh, n,
                 sf);
    k.linear_backward(DType::f32, dx, r.G(p.shared_gate_up_w), nullptr, s.moe_shared_dgate_up,
                      l.mlp_norm, r.P(p.shared_gate_up_w), {n, c, m.input_factor() * sf}, {});
  };
  if (r.ep && r.ep->active()) {
    // The shared experts' input gradient goes straight to dnorm while the rows travel; the routed
    // rows' part is added to it after they are back.
    exchange_backward(r, l, [&] {
      if (sf > 0) shared_backward(s.dnorm);
    });
    float* routed = sf > 0 ? s.moe_recv2 : s.dnorm;  // recv2 holds >= n rows of c
    k.moe_permute_backward(routed, s.moe_drows, l.moe_token_row, n, top, c);
    if (sf > 0) k.add_inplace(s.dnorm, routed, n * c);
  } else {
    k.moe_grouped_linear_backward(s.moe_dh, r.G(p.experts_down_w), s.moe_drows, l.moe_h,
                                  r.P(p.experts_down_w), l.moe_offsets, e, f, c);
    act_backward(k, m.activation, s.moe_dgate_up, l.moe_gate_up, s.moe_dh, rows, f);
    k.moe_grouped_linear_backward(s.moe_drows, r.G(p.experts_gate_up_w), s.moe_dgate_up, l.moe_xs,
                                  r.P(p.experts_gate_up_w), l.moe_offsets, e, c,
                                  m.input_factor() * f);
    k.moe_permute_backward(s.dnorm, s.moe_drows, l.moe_token_row, n, top, c);
    if (sf > 0) {  // the shared experts, into dnorm too
      shared_backward(s.moe_drows);
      k.add_inplace(s.dnorm, s.moe_drows, n * c);
    }
  }
  // The router: the combine weights' gradient through the chosen probabilities, plus the
  // balancing losses at this micro-batch's weight in the objective (see moe_ffn.h).
  k.moe_route_backward(m.gating, s.moe_dlogits, s.moe_dweight, l.moe_probs, l.moe_expert_idx, n, e,
                       top, m.normalize_topk, m.routed_scale);
  const float weight = r.loss_scale * static_cast<float>(n);
  if (m.aux_loss_coeff > 0) {
    const AuxTerms aux = aux_terms(r, l, /*gather=*/false);
    k.moe_aux_loss_backward(m.gating, s.moe_dlogits, l.moe_probs, aux.counts, n, e, top,
                            aux.coeff * weight);
  }
  if (m.z_loss_coeff > 0)
    k.moe_z_loss_backward(s.moe_dlogits, l.moe_logits, n, e, m.z_loss_coeff * weight);
  k.linear_backward(DType::f32, s.moe_drows, r.G(p.router_w), nullptr, s.moe_dlogits, l.mlp_norm,
                    r.P(p.router_w), {n, c, e}, {});
  k.add_inplace(s.dnorm, s.moe_drows, n * c);
  norm_backward(k, r.cfg, NormKind::rmsnorm, s.dresid, r.G(p.mlp_norm_w), nullptr, s.dnorm,
                l.resid_mid, r.P(p.mlp_norm_w), nullptr, l.mlp_rstd, n);
}

}  // namespace strata
