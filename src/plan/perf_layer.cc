#include "plan/perf_layer.h"

#include <algorithm>

#include "plan/perf_terms.h"

namespace strata::perf {

LayerWork layer_work(const Shapes& s, const Rates& r) {
  LayerWork w;
  const double ffn_rows = s.moe ? s.moe_rows : s.n;  // the rows the MLP or MoE FFN runs on
  w.gemm_fwd =
      2 * s.n * (s.c * s.q + s.a * s.c) + 2 * ffn_rows * (s.c * s.F + s.f * s.c + s.c * s.router);
  // S = Q K^T and O = P V over the causal triangle: T(T+1)/2 keys per head and row pair of the
  // whole sequence, of which each of the cp ranks computes 1/cp (the load-balanced split: its
  // rows' share of the triangle is the same on every rank; cp = 1: T = t).
  w.attn_fwd = 2 * s.b * s.nh * s.hd * s.T * (s.T + 1) / static_cast<double>(s.cp);
  // Backward: dP, dS, dQ, dK, dV (4 products, 2x) for naive attention; flash also recomputes S
  // (FlashAttention-2's 2.5x).
  w.attn_bwd = w.attn_fwd * (s.flash ? 2.5 : 2.0);
  const double rope = s.gpt2 ? 0 : kRope * s.n * (s.nh + s.nkv) * s.hd;
  // The CPU engine's bf16 flash kernel reads 16-bit q, k, v; context attention (and the other
  // kernels) widen them to f32 first.
  const bool bf16_flash = s.bf16 && s.flash && !(s.cpu && s.context);
  const bool gelu_bf16 = s.gpt2 && s.bf16;
  w.mem_fwd = s.ns * s.c * (2 * kNormForward + 2 * kResidualAdd) + rope +
              (s.gelu ? kGeluForward : kSwigluForward) * ffn_rows * s.f;
  w.mem_bwd = s.ns * s.c * 2 * kNormBackward + rope +
              (s.gelu ? kGeluBackward : kSwigluBackward) * ffn_rows * s.f;
  if (s.moe) {
    // Routing, the gather of each token's rows into expert order and the weighted combine, and
    // their backwards (the router's input gradient added to the norm's, and the shared experts');
    // with ep > 1 also the rows permuted for the exchange (sent, sorted and unsorted forward;
    // sorted and unsorted backward).
    const double rows = ffn_rows * s.k;
    w.mem_fwd += (kMoeGather + kMoeCombineForward) * rows * s.c + 4 * ffn_rows * s.c +
                 kMoeRouterForward * ffn_rows * s.router;
    w.mem_bwd += (kMoeCombineBackward + kMoeScatterBackward) * rows * s.c + 4 * ffn_rows * s.c +
                 kResidualAdd * ffn_rows * s.c * (s.shared > 0 ? 2 : 1) +
                 kMoeRouterBackward * ffn_rows * s.router;
    if (s.ep > 1) {
      w.mem_fwd += 3 * kMoeGather * rows * s.c;
      w.mem_bwd += 2 * kMoeGather * rows * s.c;
    }
  }
  if (!s.flash) {
    const double scores = s.b * s.nh * s.t * (s.t + 1) / 2;
    w.probs_fwd = kAttentionProbsForward * scores;
    w.mem_fwd += w.probs_fwd;
    w.mem_bwd += kAttentionProbsBackward * scores;
  }
  if (s.gpt2) {
    w.mem_fwd += kBiasCopy * s.n * (s.q + s.F);
    w.mem_bwd += kBiasGrad * s.n * (s.q + s.F + 2 * s.c);
  }
  if (s.lowp) {
    w.mem_fwd += kToLowp * (2 * s.ns * s.c + s.n * s.q + s.n * s.a +
                            (gelu_bf16 ? 0 : ffn_rows * s.f) + (bf16_flash ? 0 : s.n * s.q));
    w.mem_bwd += kToLowp * (s.n * (2 * s.c + s.q) + ffn_rows * s.F + (bf16_flash ? 0 : s.n * s.q) +
                            (s.flash ? s.n * s.a : 0));
  }
  if (s.context) {
    // ContextAttention's own passes (model/context_attention.cc). Ring (also cp = 1 under
    // document masking): k|v packed into the travelling block, each later block's partial output
    // merged by its log-sum-exp; backward zeroes dq|dk|dv and each step's accumulator, packs the
    // block again, adds each arriving accumulator and unpacks the gradient. Ulysses: each
    // exchange's relayout before and after it (q|k|v and the output forward; q|k|v, output and
    // its gradient, and the q|k|v gradient backward).
    const double cp = static_cast<double>(s.cp), kv = s.n * 2 * s.nkv * s.hd;
    if (s.ulysses && s.cp > 1) {
      w.mem_fwd += 2 * kContextCopy * (s.n * s.q + s.n * s.a);
      w.mem_bwd += 2 * kContextCopy * (2 * s.n * s.q + 2 * s.n * s.a);
    } else {
      w.mem_fwd += kContextCopy * kv + (cp - 1) * kRingMerge * s.n * s.a;
      w.mem_bwd += kContextZero * (s.n * s.q + cp * kv) + 2 * kContextCopy * kv +
                   (cp - 1) * kRingGradAdd * kv;
    }
  }
  w.fwd_s = w.gemm_fwd / r.gemm + w.attn_fwd / r.attn + w.mem_fwd / r.mem;
  w.bwd_s = 2 * w.gemm_fwd / r.gemm + w.attn_bwd / r.attn + w.mem_bwd / r.mem;
  return w;
}

// Parameters of one rank's share of a layer: all of them, and the experts among them (an MoE
// layer's group of its own, reduced over the expert-data-parallel group).
double layer_params(const Shapes& s) {
  double p = s.c * s.q + s.a * s.c;
  if (s.moe)  // router, shared experts (gate|up, down) and this rank's experts
    p += s.c * s.router + (s.in_mats + 1) * s.c * s.shared + s.expert_params;
  else
    p += s.c * s.F + s.f * s.c;
  p += s.gpt2 ? s.q + s.c + s.f + s.c + 4 * s.c : 2 * s.c;
  return p;
}

// The parameters of a layer every tp rank holds whole and, under sp, sums the gradients of over
// the tp group once per step (ModelParallel::finish_gradients): the norms (and gpt2's biases of
// the row-parallel outputs), and an MoE layer's router, shared and routed experts.
double layer_tp_summed_params(const Shapes& s) {
  if (s.moe) return 2 * s.c + s.c * s.router + (s.in_mats + 1) * s.c * s.shared + s.expert_params;
  return s.gpt2 ? 6 * s.c : 2 * s.c;
}

ContextExchange context_exchange(const Shapes& s, const LayerWork& w, const Rates& r,
                                 const ClusterProfile& cluster) {
  ContextExchange x;
  if (s.cp <= 1) return x;
  const double cp = static_cast<double>(s.cp);
  if (s.ulysses) {
    x.block_bytes = s.n * s.q * 4;
    x.block = collective_cost(CollectiveOp::all_to_all, x.block_bytes, s.cp, s.tp, cluster);
    x.out = collective_cost(CollectiveOp::all_to_all, s.n * s.a * 4, s.cp, s.tp, cluster);
    x.fwd_s = x.block.seconds + x.out.seconds;
    x.bwd_s = 2 * x.fwd_s;
    x.fwd_exposed_s = x.fwd_s;
    x.bwd_exposed_s = x.bwd_s;
    return x;
  }
  x.block_bytes = s.n * 2 * s.nkv * s.hd * 4;
  x.block = ring_exchange_cost(x.block_bytes, s.cp, s.tp, cluster);
  const double overlap = x.block.inter_node ? cluster.inter.overlap : cluster.intra.overlap;
  x.step_fwd_s = w.attn_fwd / cp / r.attn;
  x.step_bwd_s = w.attn_bwd / cp / r.attn;
  const double b = x.block.seconds;
  const double hide_fwd = overlap * x.step_fwd_s, hide_bwd = overlap * x.step_bwd_s;
  auto beyond = [](double comm, double hidden) { return std::max(0.0, comm - hidden); };
  x.fwd_s = (cp - 1) * b;
  x.fwd_exposed_s = (cp - 1) * beyond(b, hide_fwd);
  // Backward, step by step: the first step sends the next block, the middle ones a block and the
  // previous step's accumulator (the same link, one after the other), the last one the previous
  // accumulator; the last accumulator goes home after the loop, exposed.
  x.bwd_s = (2 * cp - 1) * b;
  x.bwd_exposed_s = 2 * beyond(b, hide_bwd) + (cp - 2) * beyond(2 * b, hide_bwd) + b;
  return x;
}

}  // namespace strata::perf
