// What forward saves for backward, per model chunk and micro-batch slot (ActivationStore), and the
// gradient buffers that backward reuses layer after layer (GradScratch). Both are planned from the
// config, this rank's shard and the micro-batch shape at start-up and allocated once; sizes are in
// elements. With tensor parallelism, per-head and per-column tensors hold this rank's heads and
// columns (nh, f, v below are local); with sequence parallelism, the residual stream, norms and
// their statistics hold this rank's rows only (ns = n / tp), which is where sp saves memory.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/arena.h"
#include "core/dtype.h"
#include "kernels/backend.h"
#include "model/config.h"
#include "model/recompute_mode.h"
#include "model/shard.h"

namespace strata {

struct LayerActivations {
  float* attn_norm = nullptr;  // [ns, c] normalised input of attention
  float* attn_mean = nullptr;  // [ns] (LayerNorm only)
  float* attn_rstd = nullptr;  // [ns]
  float* qkv = nullptr;        // [n, qkv_width] (q and k after RoPE for llama)
  float* qk_pre = nullptr;     // [n, (nh + nkv) * hd] q and k before their head norms (qwen3)
  float* qk_rstd = nullptr;    // [n * (nh + nkv)] their head norms' rstd (qwen3)
  float* probs = nullptr;      // [b, nh, t, t] (naive attention)
  float* lse = nullptr;        // [b, nh, t] log-sum-exp of each query row (flash attention)
  float* attn_out = nullptr;   // [n, nh*hd] heads concatenated
  float* resid_mid = nullptr;  // [ns, c] residual after attention
  float* mlp_norm = nullptr;   // [ns, c]
  float* mlp_mean = nullptr;   // [ns]
  float* mlp_rstd = nullptr;   // [ns]
  float* mlp_pre = nullptr;    // [n, f] (gpt2 fc output) or [n, 2f] (llama gate|up)
  float* mlp_act = nullptr;    // [n, f] activation output, input of proj/down
  float* resid_out = nullptr;  // [ns, c] block output
  // The MoE FFN (mixtral; model/moe_ffn.h), which also keeps mlp_norm and mlp_rstd above. Rows
  // are the n*k (token, expert) assignments in expert-sorted order, at most n*k (dropless);
  // layouts in kernels/cpu/moe.h. e experts, k per token, F = each expert's hidden width.
  float* moe_logits = nullptr;               // [n, e] router logits (z-loss only)
  float* moe_probs = nullptr;                // [n, e]
  float* moe_weight = nullptr;               // [n, k] combine weights
  int32_t* moe_expert_idx = nullptr;         // [n, k]
  int64_t* moe_tokens_per_expert = nullptr;  // [e]
  int64_t* moe_offsets = nullptr;            // [e + 1]
  int64_t* moe_balance_counts = nullptr;     // [e] the loads over the batch (aux_loss_scope global)
  int32_t* moe_token_row = nullptr;          // [n, k]
  int32_t* moe_row_token = nullptr;          // [n * k]
  float* moe_xs = nullptr;                   // [rows, c] permuted normalised input (ep = 1)
  float* moe_gate_up = nullptr;              // [R, 2F] (R: the rows this rank's experts run)
  float* moe_h = nullptr;                    // [R, F] SwiGLU output
  float* moe_ys = nullptr;                   // [rows, c] experts' outputs, in row order
  // Expert parallelism (ep > 1, model/expert_parallel.h): the rows this rank's experts received
  // in expert-major order, R at most moe_expert_rows; the exchange's table and permutations.
  float* moe_xe = nullptr;              // [R, c] the experts' input
  int32_t* moe_ep_counts = nullptr;     // [ep * e] rows per (source rank, expert)
  int64_t* moe_ep_offsets = nullptr;    // [e / ep + 1] this rank's experts' rows in moe_xe
  int32_t* moe_ep_sort = nullptr;       // [R] expert-major row <- source-major row
  int32_t* moe_ep_unsort = nullptr;     // [R] its inverse
  float* moe_shared_gate_up = nullptr;  // [n, 2S] shared experts' gate|up (S: shared_ffn)
  float* moe_shared_h = nullptr;        // [n, S] their SwiGLU output
  // Mixed precision (bf16 / f16): the inputs of the layer's GEMMs are kept in 16 bits instead;
  // their f32 versions above are then transient buffers shared by every layer (null here).
  // attn_out stays f32 under flash attention, whose backward reads it.
  uint16_t* attn_norm_lp = nullptr;  // [ns, c]
  uint16_t* qkv_lp = nullptr;        // [n, qkv_width] (after RoPE): attention reads these values
  uint16_t* attn_out_lp = nullptr;   // [n, nh*hd] (naive attention)
  uint16_t* mlp_norm_lp = nullptr;   // [ns, c]
  uint16_t* mlp_act_lp = nullptr;    // [n, f]
};

// Which layers of a chunk recompute: the first `layers` of it (0: all), as Megatron's "block"
// method does per pipeline stage.
struct RecomputePolicy {
  Recompute mode = Recompute::none;
  int64_t layers = 0;
  Recompute for_layer(int64_t local_layer) const {
    return layers == 0 || local_layer < layers ? mode : Recompute::none;
  }
};

// Allocates one layer's activations: those `mode` keeps (full keeps resid_out only; selective
// leaves probs null). `category` is where the bytes are accounted.
LayerActivations allocate_layer(const ModelConfig& cfg, const ModelShard& shard, Recompute mode,
                                Arena& arena, MemCategory category, int64_t batch, int64_t seq_len,
                                DType precision = DType::f32);

// allocate_layer, listing every buffer it makes (its name, as the arena accounts it, and size):
// what the activation offload (model/activation_offload.h) copies between device and host. The
// names are unique within a layer.
struct LayerBlock {
  const char* what = "";
  void* ptr = nullptr;
  size_t bytes = 0;
};
LayerActivations allocate_layer_blocks(const ModelConfig& cfg, const ModelShard& shard,
                                       Recompute mode, Arena& arena, MemCategory category,
                                       int64_t batch, int64_t seq_len, DType precision,
                                       std::vector<LayerBlock>& blocks);

// The Decoder's buffers shared by every recomputed layer (workspace): a whole layer's worth
// under full recomputation, the attention probabilities and output under selective (naive
// attention); nothing otherwise.
LayerActivations allocate_recompute_buffers(const ModelConfig& cfg, const ModelShard& shard,
                                            Recompute mode, Arena& arena, int64_t batch,
                                            int64_t seq_len, DType precision = DType::f32);

struct ActivationStore {
  ActivationStore() = default;  // holds nothing (planning)
  // The activations of one micro-batch through `layers` of the model; `embedding` and `head` say
  // whether this chunk also runs the embedding (first) and the final norm, head and loss (last).
  ActivationStore(const ModelConfig& cfg, const ModelShard& shard, LayerRange layers,
                  bool embedding, bool head, Arena& arena, int64_t batch, int64_t seq_len,
                  const RecomputePolicy& recompute = {}, DType precision = DType::f32);
  ActivationStore(const ModelConfig& cfg, Arena& arena, int64_t batch, int64_t seq_len)
      : ActivationStore(cfg, ModelShard::whole(cfg), {0, cfg.n_layer}, true, true, arena, batch,
                        seq_len) {}
  int32_t* inputs = nullptr;   // [n] copy of the micro-batch's tokens (embedding backward)
  int32_t* targets = nullptr;  // [n]
  // [ns, c] the chunk's input: the embedding output, or the activation received from the
  // previous pipeline stage.
  float* embed_out = nullptr;
  std::vector<LayerActivations> layers;  // the chunk's layers, in order
  float* final_norm = nullptr;           // [ns, c] (null under mixed precision: transient)
  uint16_t* final_norm_lp = nullptr;     // [ns, c] mixed precision: the head GEMM's input
  float* final_mean = nullptr;           // [ns]
  float* final_rstd = nullptr;           // [ns]
  float* logits = nullptr;               // [n, v]; holds dlogits after backward's loss step
  // bf16 runs: the dlogits are bf16, over the logits' storage (reinterpret as uint16_t [n, v]).
  bool dlogits_bf16 = false;
  float* losses = nullptr;    // [n]
  float* ce_stats = nullptr;  // [3n] vocab-parallel cross-entropy: max, sum, target
  bool has_targets = false;
  int64_t b = 0, t = 0;  // shape of the micro-batch it holds
  int context_slot = 0;  // its masks in the Decoder's ContextAttention
};

struct GradScratch {
  GradScratch() = default;
  // `backend`: the device backward runs on, whose *_scratch functions size the attention
  // backward scratch (null: the CPU kernels' sizes, as grad_scratch_bytes counts them).
  GradScratch(const ModelConfig& cfg, const ModelShard& shard, Arena& arena, int64_t batch,
              int64_t seq_len, DType precision = DType::f32, const Backend* backend = nullptr);
  float* dresid = nullptr;    // [ns, c] gradient of the residual stream
  float* dnorm = nullptr;     // [ns, c] gradient of a norm's output
  float* dqkv = nullptr;      // [n, qkv_width]
  float* dattn = nullptr;     // [n, nh*hd]
  float* dmlp_pre = nullptr;  // [n, f or 2f]
  float* dmlp_act = nullptr;  // [n, f]
  float* attn_scratch = nullptr;
  // The MoE FFN's backward (mixtral): router logits' and combine weights' gradients, then the
  // expert rows': dys (reused for dxs), dh, dgate_up.
  float* moe_dlogits = nullptr;          // [n, e]
  float* moe_dweight = nullptr;          // [n, k]
  float* moe_drows = nullptr;            // [n * k, c]
  float* moe_dh = nullptr;               // [R, F] (R: moe_expert_rows)
  float* moe_dgate_up = nullptr;         // [R, 2F]
  float* moe_recv = nullptr;             // [R, c] ep > 1: rows received, and their permutation
  float* moe_recv2 = nullptr;            // [R, c]
  float* moe_shared_dh = nullptr;        // [n, S] shared experts' activation gradient
  float* moe_shared_dgate_up = nullptr;  // [n, 2S]
  float* moe_logits = nullptr;           // [n, e] router logits when the layer does not keep them
  // Sequence parallelism only: two [n, c] buffers for all-gathered inputs and the full-row
  // partial sums that are reduce-scattered (forward and backward use them in turn).
  float* full_a = nullptr;
  float* full_b = nullptr;
  // Mixed precision: all-gathered 16-bit GEMM inputs (sp), the output gradient rounded to 16
  // bits in row blocks (dy_capacity elements), f32 room for widening f16 operands, and the
  // transient f32 activations whose 16-bit copies the layers keep.
  uint16_t* full_lp = nullptr;
  uint16_t* dy_lp = nullptr;
  int64_t dy_capacity = 0;
  float* lowp_wide = nullptr;  // 16-bit GEMM operands widened to f32 (kernels::lowp_widens)
  LayerActivations transient;
  float* final_norm = nullptr;
};

// Bytes per arena category that the allocations above make, counted without allocating (the
// planner, plan/memory_model.cc): the allocation code itself runs against a MemCounter.
// The rows an MoE layer's experts on this rank run for a micro-batch of n rows held: n * top_k,
// or with expert parallelism the most the exchange can bring (ExpertParallel::max_rows: every
// rank's tokens to this rank's experts, a stated worst case that the buffers are sized for).
int64_t moe_expert_rows(const ModelConfig& cfg, const ModelShard& shard, int64_t n);

MemBytes layer_bytes(const ModelConfig& cfg, const ModelShard& shard, Recompute mode,
                     MemCategory category, int64_t batch, int64_t seq_len,
                     DType precision = DType::f32);
MemBytes activation_store_bytes(const ModelConfig& cfg, const ModelShard& shard, LayerRange range,
                                bool embedding, bool head, int64_t batch, int64_t seq_len,
                                const RecomputePolicy& recompute = {},
                                DType precision = DType::f32);
// `threads`: the OpenMP threads backward will run on (0: omp_get_max_threads()), which sizes the
// CPU attention kernels' per-thread scratch. `backend`: count the scratch that backend asks for
// instead (null: the CPU kernels', with `threads`). `device`, with a null backend: the device the
// ranks will run on (the planner's target): on cuda no 16-bit operand is widened to f32, on the
// CPU this machine's kernel level decides (kernels::lowp_widens).
MemBytes grad_scratch_bytes(const ModelConfig& cfg, const ModelShard& shard, int64_t batch,
                            int64_t seq_len, DType precision = DType::f32, int threads = 0,
                            const Backend* backend = nullptr, Device device = Device::cpu);
MemBytes recompute_buffer_bytes(const ModelConfig& cfg, const ModelShard& shard, Recompute mode,
                                int64_t batch, int64_t seq_len, DType precision = DType::f32);

}  // namespace strata
