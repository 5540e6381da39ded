// The sparse Mixture-of-Experts FFN (GitHub issue 21), the second half of a mixtral or qwen3_moe
// layer:
//
//   resid_mid -> RMSNorm -> router logits [n, e] -> route (top-k, weights) -> dispatch plan ->
//     permute to expert-sorted rows -> per expert gate|up -> SwiGLU -> down -> weighted combine
//     + resid_mid = resid_out
//
// in the order of the kernels' whole-FFN test (tests/kernels/test_moe.cc, MoeFiniteDiff.WholeFfn),
// on the kernels of kernels/cpu/moe.h through the Backend. The experts' weights are global
// tensors [e, 2F, c] (gate rows then up rows, as the dense SwiGLU fuses them) and [e, c, F].
//
// The balancing losses (Switch's auxiliary loss, ST-MoE's z-loss) are part of the objective: each
// micro-batch adds its value, as if every one of its n tokens carried it, so their gradients take
// the cross-entropy's per-token scale times n (BlockRun::loss_scale). With the trainer's scale
// 1/tokens the objective is the mean token loss plus each layer's mean balancing losses.
//
// Parallelism: the layer runs on the rows this rank holds (all of the micro-batch, or with
// sequence parallelism its 1/tp), routes them over all experts, and with expert parallelism
// (r.ep active) sends each expert's rows to the rank holding it and gets their outputs back
// (model/expert_parallel.h); the shared experts compute while the rows travel. With tp > 1 the
// router and experts are replicated over the tp group (expert tensor parallelism is 1).
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "model/block.h"

namespace strata {

// What the last forward of one MoE layer saw, on the host: for the trainer's metrics, and for
// backward (the rows of the dispatch plan).
// Everything is summed over the forwards since reset() (the micro-batches of a step; a rebuilding
// forward is not counted): the step's load per expert is what DeepSeek's bias update balances.
struct MoeLayerStats {
  double aux_loss = 0;                     // the auxiliary loss, times model.moe.aux_loss_coeff
  double z_loss = 0;                       // the router z-loss, times model.moe.z_loss_coeff
  int64_t dropped = 0;                     // assignments over an expert's capacity
  int64_t forwards = 0;                    // forwards counted
  std::vector<int64_t> tokens_per_expert;  // assignments per expert before dropping
  void reset() {
    aux_loss = z_loss = 0;
    dropped = forwards = 0;
    std::fill(tokens_per_expert.begin(), tokens_per_expert.end(), 0);
  }
};

// Registers layer `layer`'s MoE FFN: the norm, router and shared experts in the layer's group
// (names layers.L.mlp_norm.weight, layers.L.moe.router.weight, layers.L.moe.shared.*), and this
// rank's experts in the layer's expert group (layers.L.moe.experts.gate_up.weight, ...down.weight:
// global tensors [e, 2F, c] and [e, c, F]).
void register_moe_ffn(ParamStore& params, const ParamSlices& slices, int64_t layer,
                      BlockParams& out);
// l.resid_mid -> l.resid_out; fills *r.moe.
void moe_ffn_forward(BlockRun& r, LayerActivations& l);
// dL/d(output) -> dL/d(resid_mid), both in r.s.dresid, with the balancing losses' gradients.
void moe_ffn_backward(BlockRun& r, LayerActivations& l);

}  // namespace strata
