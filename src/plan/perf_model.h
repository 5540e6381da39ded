// Performance model: the step time of a config on a cluster, from per-operation FLOPs and bytes
// against the device's roofline, collectives through an alpha-beta model of ring and tree
// algorithms over the cluster's tiers (layout mapped onto ranks tp fastest, so tp stays inside a
// node when it fits), the pipeline bubble of the schedule, the overlap strata implements
// (bucketed gradient reduction during backward, ZeRO-3 prefetch) and recomputation; for
// Mixture-of-Experts models the experts' FLOPs of the top_k a token runs through, and with
// expert parallelism the all-to-all token exchanges (balanced routing assumed); with context
// parallelism each rank's 1/cp of the attention and the ring's or Ulysses' exchanges.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "plan/cluster_profile.h"
#include "run/config.h"

namespace strata {

struct StepEstimate {
  double step_s = 0;       // one optimizer step
  double compute_s = 0;    // forward + backward (+ recompute) of the busiest stage
  double recompute_s = 0;  // the part of compute_s that recomputation adds
  double optimizer_s = 0;
  double comm_exposed_s = 0;                           // communication not hidden behind compute
  double bubble_s = 0;                                 // pipeline idle time
  double tp_comm_s = 0, dp_comm_s = 0, pp_comm_s = 0;  // totals before overlap
  double ep_comm_s = 0;  // expert parallelism's exchanges (MoE), all exposed but what shared
                         // experts hide
  // Context parallelism's exchanges (ring blocks or Ulysses all-to-alls), all of them, and the
  // part the ring hides behind the attention of its steps (cp_comm_s - cp_hidden_s is exposed).
  double cp_comm_s = 0, cp_hidden_s = 0;
  double tokens_per_s = 0;
  double mfu = 0;          // model FLOPs (no recomputation) / (step_s * ranks * peak matrix rate)
  double model_flops = 0;  // per step, all ranks: (6 N + 12 L C T) * tokens (PaLM / Megatron)
  double hardware_flops = 0;    // per step, all ranks: what the kernels execute (causal attention
                                // counted as computed, recomputation included)
  double flops_per_rank_s = 0;  // hardware_flops / (step_s * world): Megatron's "TFLOP/s per GPU"
  std::vector<std::string> explain;  // the arithmetic, one line per term
};

// `explain` = false skips the explanation lines (the layout search evaluates thousands of
// layouts; without them a call takes about a microsecond).
StepEstimate estimate_step(const RunConfig& config, int64_t world, const ClusterProfile& cluster,
                           bool explain = true);

// Model FLOPs of one token for training (forward + backward, no recomputation) as Megatron-LM and
// PaLM count them and as the trainer reports MFU: 6 N + 12 L C T, N without the position table
// and, of an MoE layer, with only the top_k experts a token runs through.
double model_flops_per_token(const ModelConfig& model, int64_t seq_len);

// Pipeline time of one step: m micro-batches through stages whose per-micro-batch times (forward
// + backward of all their chunks) are `stage_s`, v chunks per stage:
//   m * max(t) + (sum(t) - max(t)) / v,
// which for equal stages is the ideal m * t plus the bubble (p - 1) / (v m) of it (1F1B,
// interleaved; GPipe's is the same as 1F1B's).
double pipeline_time(const std::vector<double>& stage_s, int64_t micro_batches, int64_t vpp);

}  // namespace strata
