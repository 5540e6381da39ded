// One transformer layer of the step-time model (perf_model.h): the shapes one rank works on, the
// FLOPs and bytes of its forward and backward, its parameters, and the context-parallel attention
// exchanges (ring or Ulysses) with what of them hides behind the attention. Internal to the
// planner: perf_model.cc assembles layers into stages, pipelines and the step.
#pragma once
#include <cstdint>

#include "plan/cluster_profile.h"
#include "plan/collectives.h"

namespace strata::perf {

// The shapes one tp rank works on for one micro-batch.
struct Shapes {
  // t: this rank's rows per sequence (train.seq_len / cp), n = b t the rows it holds.
  double b = 0, t = 0, n = 0, ns = 0, c = 0, hd = 0, nh = 0, nkv = 0, q = 0, a = 0, f = 0, F = 0,
         V = 0, max_seq = 0;
  // MoE (mixtral, qwen3_moe): f is the width a token runs through (its top_k experts and the
  // shared experts), router the router's columns (experts). The MoE FFN is replicated over tp: it
  // runs on moe_rows rows of this rank (all n without sp, redundantly on every tp rank; this
  // rank's n / tp under sp), k rows per token; with ep > 1 its rows travel to the experts' ranks
  // and back. expert_params: this rank's experts of one layer (experts / ep of them).
  double router = 0, moe_rows = 0, k = 0, shared = 0, expert_params = 0;
  // gelu: the MLP (gpt2) or the experts (model.moe.activation) are GELU, with one input
  // projection of width f; otherwise SwiGLU's gate|up of 2f. in_mats: that projection's factor.
  bool gelu = true;
  double in_mats = 1;
  bool moe = false, gpt2 = true, flash = false, lowp = false, bf16 = false, cpu = false,
       tied = true, sp = false;
  int64_t tp = 1, ep = 1;
  // Context parallelism (model/context_attention.h): a sequence of T rows split over the cp ranks
  // of a group at world-rank stride tp, t = T / cp of them here. `context`: attention runs through
  // ContextAttention (cp > 1 or data.document_mask), by ring or (ulysses) all-to-all.
  double T = 0;
  int64_t cp = 1;
  bool context = false, ulysses = false;
};

struct Rates {
  double gemm = 0, attn = 0, mem = 0, ce = 0;  // ce: bytes/s of the cross-entropy kernels
};

// One layer, one micro-batch, this tp rank.
struct LayerWork {
  double gemm_fwd = 0, attn_fwd = 0, attn_bwd = 0, mem_fwd = 0, mem_bwd = 0;
  double probs_fwd = 0;  // bytes of naive attention's probabilities, forward
  double fwd_s = 0, bwd_s = 0;
  double tp_fwd_s = 0, tp_bwd_s = 0;
};

LayerWork layer_work(const Shapes& s, const Rates& r);

// Parameters of one rank's share of a layer: all of them, and the experts among them (an MoE
// layer's group of its own, reduced over the expert-data-parallel group).
double layer_params(const Shapes& s);

// The parameters of a layer every tp rank holds whole and, under sp, sums the gradients of over
// the tp group once per step (ModelParallel::finish_gradients): the norms (and gpt2's biases of
// the row-parallel outputs), and an MoE layer's router, shared and routed experts.
double layer_tp_summed_params(const Shapes& s);

// The context-parallel exchanges of one layer and micro-batch (zero with cp = 1), in f32 as
// ContextAttention sends them, over the cp group (cp adjacent dp ranks: world-rank stride tp).
//  - ring: forward sends cp - 1 key/value blocks [n, 2 nkv hd], each while the block before it is
//    computed; backward sends the same cp - 1 blocks and cp gradient accumulators, the first
//    and last step one transfer beside the block, the steps between two, and the last
//    accumulator's trip home after the compute. Each rank's attention is 1/cp of the sequence's
//    and every step does the same share of it (the load-balanced split), so a step hides up to
//    attention / cp of the transfers beside it, times the link's overlap.
//  - ulysses: forward all-to-alls q|k|v [n, q] and the output [n, a]; backward q|k|v, output,
//    output gradient and q|k|v gradient: none hidden.
struct ContextExchange {
  CollectiveCost block;  // ring: one block's send; ulysses: the q|k|v all-to-all
  CollectiveCost out;    // ulysses: the output's all-to-all
  double block_bytes = 0;
  double fwd_s = 0, bwd_s = 0;                  // all of it, per direction
  double fwd_exposed_s = 0, bwd_exposed_s = 0;  // what the attention does not hide
  double step_fwd_s = 0, step_bwd_s = 0;        // ring: the attention of one step
};
ContextExchange context_exchange(const Shapes& s, const LayerWork& w, const Rates& r,
                                 const ClusterProfile& cluster);

}  // namespace strata::perf
