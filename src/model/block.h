// Block: one transformer layer of a model family, behind one interface. Each family's block lives
// in its own unit (block_gpt2.cc, block_llama.cc, ...): its parameters, and its forward and
// backward written out in order, llm.c style, from the shared pieces below (norms, the
// tensor-parallel linear layers of ParallelLinear, the attention sub-layer). The Decoder only
// orchestrates: chunks, activation slots, recomputation, offload and group hooks.
//
// Why an interface and not one spec table read by a generic block: families differ in the ORDER
// and the kernels of their steps (GPT-2's GELU on fc with biases; Llama's RoPE after the qkv
// projection and SwiGLU on gate|up; Qwen3's per-head norms of q and k before RoPE), which a table
// would turn back into branches in one shared function. What the sizing code needs (which buffers
// a layer keeps) is data, BlockLayout: that code runs against three arena types (the Arena, the
// planner's MemCounter, the activation offload's recording arena) as templates, which a virtual
// allocator could not serve.
//
// Blocks are stateless (one shared instance per family); everything a layer touches comes in a
// BlockRun.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "model/activations.h"
#include "model/config.h"
#include "model/context_attention.h"
#include "model/expert_parallel.h"
#include "model/parallel_linear.h"
#include "model/params.h"
#include "model/shard.h"
#include "model/tensor_parallel.h"

namespace strata {

struct MoeLayerStats;  // model/moe_ffn.h

// Indices into the ParamStore of one block's parameters (-1 when the family has none).
struct BlockParams {
  int attn_norm_w = -1, attn_norm_b = -1;
  int q_w = -1, k_w = -1, v_w = -1, q_b = -1, k_b = -1, v_b = -1;
  int q_norm_w = -1, k_norm_w = -1;  // per-head norms of q and k (Qwen3)
  int o_w = -1, o_b = -1;
  int mlp_norm_w = -1, mlp_norm_b = -1;
  int fc_w = -1, fc_b = -1, proj_w = -1, proj_b = -1;  // GELU MLP (gpt2)
  int gate_w = -1, up_w = -1, down_w = -1;             // SwiGLU MLP (llama, qwen3)
  // MoE FFN (mixtral, ...): experts_gate_up_w is GELU experts' fc, router_b sigmoid_bias's bias.
  int router_w = -1, router_b = -1, experts_gate_up_w = -1, experts_down_w = -1;
  int shared_gate_up_w = -1, shared_down_w = -1;  // its shared experts
};

enum class NormKind { layernorm, rmsnorm };

// Parameter groups (ParamStore): the embedding is group 0, layer L's parameters group L + 1, the
// final norm and head n_layer + 1, and an MoE layer's experts a group of their own,
// n_layer + 2 + L, because data parallelism reduces and shards them over another group
// (parallel/data_parallel.h). The Decoder announces both groups of a layer around its use.
inline int layer_group(int64_t layer) {
  return static_cast<int>(layer) + 1;
}
inline int expert_group(const ModelConfig& cfg, int64_t layer) {
  return static_cast<int>(cfg.n_layer + 2 + layer);
}

// What a family's layers (and final norm) keep, as data for the sizing code.
struct BlockLayout {
  NormKind norm = NormKind::rmsnorm;  // LayerNorm also keeps a mean per row, and has a bias
  int64_t mlp_pre_factor = 1;         // the MLP's first GEMM is [n, factor * f]: fc 1, gate|up 2
  bool biases = false;                // every linear layer has a bias
  bool head_norm = false;             // q and k RMS-normalised per head (their inputs are kept)
  bool learned_positions = false;     // a position table beside the token embedding
  bool rope = false;                  // q and k rotated by RoPE (rope_theta, rope_scaling)
  bool grouped_query = false;         // n_kv_head may be below n_head
  bool moe = false;  // a sparse Mixture-of-Experts FFN (model.moe) instead of the dense MLP
};

// Slices of the global tensors for a rank's shard: split along a dimension, replicated over the
// tp group (with sp, a norm's gradient is then a partial sum over rows), or a kv head's.
struct ParamSlices {
  const ModelConfig& cfg;
  const ModelShard& sh;
  TensorSlice split(int dim, int64_t begin, int64_t global) const;
  TensorSlice replicated(bool row_partial) const;
  // A per-head weight (Qwen3's q and k norms) every tp rank holds whole, whose gradient is a
  // partial sum over this rank's heads: summed over the group.
  TensorSlice head_partial() const;
  // An MoE layer's experts [e, ...]: this rank's e / ep of them (dim 0), replicated over tp (with
  // sp their gradients are partial sums over rows), marked `expert`.
  TensorSlice experts() const;
  // k and v: this rank's kv heads, split or (tp > n_kv_head) shared with tp / n_kv_head ranks
  // whose query heads all read the same kv head; their gradients add up.
  TensorSlice kv(int64_t per_head) const;
  // The query heads' rows / columns of this rank: split(dim, q0, n_head * head_dim).
  TensorSlice query(int dim) const;
};

// What one layer's forward or backward on one micro-batch sees.
struct BlockRun {
  Backend& k;
  const ModelConfig& cfg;
  const ModelShard& shard;
  const TensorParallel& tp;
  ParamStore& params;
  GradScratch& s;
  ParallelLinear& linear;
  const BlockParams& p;
  int64_t b, t;
  // An MoE layer's host-side record of its last forward (model/moe_ffn.h; null for dense
  // families), and the micro-batch's per-token loss scale (grad_scale), which weights the MoE
  // balancing losses' gradients in backward.
  MoeLayerStats* moe = nullptr;
  float loss_scale = 0.0f;
  // The expert-parallel exchange (MoE layers; inactive with ep = 1), and whether this forward
  // rebuilds a layer for backward (full recomputation: its statistics are not counted again).
  const ExpertParallel* ep = nullptr;
  bool rebuilding = false;
  // The groups of ranks holding other rows of the same micro-batch (dp, and tp under sp), whose
  // loads the auxiliary loss adds with model.moe.aux_loss_scope = "global" (empty: none).
  const std::vector<Comm*>* batch_groups = nullptr;
  // Context parallelism or document masking (null: plain causal attention over the micro-batch),
  // and the micro-batch's masks there.
  ContextAttention* context = nullptr;
  int context_slot = 0;

  int64_t n() const { return b * t; }
  int64_t ns() const { return shard.local_rows(b * t); }  // rows of the residual stream held
  int64_t c() const { return cfg.d_model; }
  int64_t heads() const { return shard.heads(cfg); }
  int64_t kv_heads() const { return shard.kv_heads(cfg); }
  int64_t head_dim() const { return cfg.head_dim(); }
  int64_t ffn() const { return shard.ffn(cfg); }
  int64_t qkv_width() const { return shard.qkv_width(cfg); }
  AttentionShape attention_shape() const { return {b, t, heads(), kv_heads(), head_dim()}; }
  bool lowp() const { return linear.lowp(); }
  // Each row's position (null: row % t), for RoPE.
  const int32_t* positions() const { return context ? context->positions(context_slot) : nullptr; }
  // (Parameter pointers are looked up at each use: a hook may have bound the group to a buffer.)
  float* P(int idx) const { return idx < 0 ? nullptr : params.param(idx); }
  float* G(int idx) const { return idx < 0 ? nullptr : params.grad(idx); }
  // A kept GEMM input: f32, or its 16-bit copy under mixed precision.
  LinearInput kept(const float* f32, const uint16_t* lowp_copy) const {
    return lowp() ? LinearInput{nullptr, lowp_copy} : LinearInput{f32, nullptr};
  }
};

class Block {
 public:
  virtual ~Block() = default;
  virtual BlockLayout layout() const = 0;
  // Registers global layer `layer`'s parameters (local shapes, global names "layers.L.*",
  // slices) into group layer + 1. Registration order is storage order: q|k|v weights (and
  // biases) and gate|up must be adjacent, so that one GEMM computes each fused projection.
  virtual BlockParams register_params(ParamStore& params, const ParamSlices& slices,
                                      int64_t layer) const = 0;
  // x [ns, c] -> l.resid_out, keeping in l what backward reads.
  virtual void forward(BlockRun& r, LayerActivations& l, const float* x) const = 0;
  // dL/d(output) in r.s.dresid -> dL/d(x) in r.s.dresid; parameter gradients accumulate.
  virtual void backward(BlockRun& r, LayerActivations& l, const float* x) const = 0;
};

// The family's block: the one place a family is chosen.
const Block& block_for(ModelFamily family);

// ---- shared pieces ---------------------------------------------------------------------------

// bf16 flash attention reads the kept bf16 q, k, v itself (no f32 copy to widen them into).
inline bool bf16_flash_attention(DType precision, const ModelConfig& cfg) {
  return precision == DType::bf16 && cfg.flash_attention();
}

// The family's norm over rows of c: LayerNorm (mean, rstd, bias) or RMSNorm (rstd).
void norm_forward(Backend& k, const ModelConfig& cfg, NormKind norm, float* y, float* mean,
                  float* rstd, const float* x, const float* w, const float* bias, int64_t rows);
void norm_backward(Backend& k, const ModelConfig& cfg, NormKind norm, float* dx, float* dw,
                   float* dbias, const float* dy, const float* x, const float* w, const float* mean,
                   const float* rstd, int64_t rows);

// The attention sub-layer from the final q, k, v in l.qkv (after any positional transform) to
// the residual after attention: mixed precision keeps q, k, v in 16 bits (attention reads the
// rounded values in forward as backward will), the kernel (naive, flash, or bf16 flash reading
// the kept bf16 q, k, v), then the row-parallel output projection plus the residual x.
void attention_forward(BlockRun& r, LayerActivations& l, const float* x);
// Its backward: from dL/d(residual after attention) in r.s.dresid to dL/d(q, k, v) in r.s.dqkv
// (before any positional transform's backward). The residual's own gradient stays in s.dresid.
void attention_backward(BlockRun& r, LayerActivations& l);
// The pre-norm input of the attention of the RMSNorm families without biases (llama, qwen3):
// x -> RMSNorm -> q|k|v in l.qkv. Its backward takes dL/d(q, k, v) in r.s.dqkv and adds
// dL/d(x) to r.s.dresid (the residual's own gradient, already there).
void rms_qkv_forward(BlockRun& r, LayerActivations& l, const float* x);
void rms_qkv_backward(BlockRun& r, LayerActivations& l, const float* x);
// The MLP half of those families: l.resid_mid -> RMSNorm -> gate|up -> SwiGLU -> down + resid_mid
// = l.resid_out; and its backward from dL/d(output) to dL/d(resid_mid), both in r.s.dresid.
void swiglu_mlp_forward(BlockRun& r, LayerActivations& l);
void swiglu_mlp_backward(BlockRun& r, LayerActivations& l);
// Registers the RMSNorm weight and gate, up, down of swiglu_mlp_forward.
void register_swiglu_mlp(ParamStore& params, const ParamSlices& slices, const std::string& prefix,
                         int group, BlockParams& out);

// Llama's attention sub-layer (llama, mixtral): x -> RMSNorm -> q|k|v -> RoPE(q, k) -> attention
// -> o + x = l.resid_mid; its backward from dL/d(resid_mid) in r.s.dresid to dL/d(x) there. The
// registration holds attn_norm, q|k|v, o in that order.
void register_rope_attention(ParamStore& params, const ParamSlices& slices,
                             const std::string& prefix, int group, BlockParams& out);
void rope_attention_forward(BlockRun& r, LayerActivations& l, const float* x);
void rope_attention_backward(BlockRun& r, LayerActivations& l, const float* x);

// Qwen3's attention sub-layer (qwen3, qwen3_moe): x -> RMSNorm -> q|k|v -> RMSNorm of each q and
// k head (weights q_norm, k_norm of head_dim, shared by the heads) -> RoPE(q, k) -> attention ->
// o + x = l.resid_mid. Its backward goes from dL/d(resid_mid) in r.s.dresid to dL/d(x) there.
// The registration holds attn_norm, q|k|v, o, q_norm, k_norm in that order.
void register_qk_norm_attention(ParamStore& params, const ParamSlices& slices,
                                const std::string& prefix, int group, BlockParams& out);
void qk_norm_attention_forward(BlockRun& r, LayerActivations& l, const float* x);
void qk_norm_attention_backward(BlockRun& r, LayerActivations& l, const float* x);

// Registers the attention projections q|k|v (weights, then biases when `bias`) and o.
void register_attention(ParamStore& params, const ParamSlices& slices, const std::string& prefix,
                        int group, bool bias, BlockParams& out);

}  // namespace strata
