// ModelConfig: the architecture of one decoder. Each family is a block (model/block_*.cc):
//   gpt2:  LayerNorm, GELU(tanh) MLP of width 4C, learned positions, biases, tied embeddings.
//   llama: RMSNorm, SwiGLU MLP, RoPE (plain, or Llama 3's rescaled frequencies), grouped-query
//          attention, no biases, untied head (Llama 2, 3.x).
//   qwen3: llama's layer with RMSNorm of q and k per head before RoPE (Qwen3 dense models).
//   mixtral: llama's attention and a sparse Mixture-of-Experts SwiGLU FFN in every layer
//          (Mixtral 8x7B; model.moe below).
//   qwen3_moe: qwen3's attention (per-head q/k norms, head_dim) and that MoE FFN in every layer
//          (Qwen3-30B-A3B, Qwen3-235B-A22B).
#pragma once
#include <cstdint>
#include <string>

#include "kernels/cpu/moe.h"
#include "kernels/rope_spec.h"

namespace strata {

enum class ModelFamily { gpt2, llama, qwen3, mixtral, qwen3_moe };
template <>
struct EnumNames<ModelFamily> {
  static constexpr std::string_view names[] = {"gpt2", "llama", "qwen3", "mixtral",
                                               "qwen3_moe"};  // model.family
};

// model.moe.gating (kernels/cpu/moe.h)
template <>
struct EnumNames<kernels::MoeGating> {
  static constexpr std::string_view names[] = {"softmax_topk", "sigmoid_bias"};
};

// model.moe.activation: each expert's MLP, SwiGLU (gate|up, Mixtral, Qwen3-MoE, DeepSeek) or GELU
// (tanh approximation; fc then proj, as GPT-2's MLP: Switch Transformer, GShard style experts).
enum class MoeActivation { swiglu, gelu };
template <>
struct EnumNames<MoeActivation> {
  static constexpr std::string_view names[] = {"swiglu", "gelu"};
};

// model.moe.aux_loss_scope: the tokens whose load the auxiliary loss balances. "micro_batch": each
// rank's own rows of its micro-batch (Megatron-Core's default "aux_loss"); "global": the loads of
// all the ranks holding rows of the same micro-batch (data parallelism, and tensor parallelism
// under sp) are added first, as Qwen's global-batch balancing, which makes the loss independent
// of how the batch is cut into ranks (one all-reduce of e counts per layer and micro-batch).
enum class MoeAuxScope { micro_batch, global };
template <>
struct EnumNames<MoeAuxScope> {
  static constexpr std::string_view names[] = {"micro_batch", "global"};
};

// model.moe.*: the sparse FFN of the MoE families, mixtral and qwen3_moe (experts = 0: a dense
// model). Defaults are Mixtral 8x7B's, and Hugging Face's router_aux_loss_coef.
struct MoeConfig {
  int64_t experts = 0;     // routed experts per layer
  int64_t top_k = 2;       // experts per token
  int64_t expert_ffn = 0;  // hidden width of each expert; 0 means d_ff
  kernels::MoeGating gating = kernels::MoeGating::softmax_topk;
  bool normalize_topk = true;    // the chosen weights renormalised to sum to 1 (Mixtral)
  float routed_scale = 1.0f;     // the weights' scale after that (DeepSeek's routed_scaling_factor)
  float aux_loss_coeff = 0.02f;  // Switch/GShard load-balancing loss, per layer
  MoeAuxScope aux_loss_scope = MoeAuxScope::micro_batch;
  float z_loss_coeff = 0.0f;  // ST-MoE router z-loss, per layer
  // 0: dropless; > 0: each expert takes at most ceil(factor * n * k / experts) of a
  // micro-batch's n tokens, the rest of its assignments are dropped.
  double capacity_factor = 0.0;
  // Shared experts (DeepSeek-V2/V3, Qwen2-MoE): a dense SwiGLU every token runs through beside
  // the routed ones, its output added to theirs; shared_experts of width shared_ffn (0: the
  // expert width) fused into one SwiGLU of width shared_experts x shared_ffn.
  int64_t shared_experts = 0;
  int64_t shared_ffn = 0;
  // The experts' (and shared experts') activation; GELU experts have one input projection.
  MoeActivation activation = MoeActivation::swiglu;
  // DeepSeek-V3's auxiliary-loss-free balancing (gating "sigmoid_bias" only): after every step
  // each layer's router bias moves by this rate towards balance, bias[x] += rate *
  // sign(mean load - load[x]) over the step's global batch (DeepSeek-V3 uses 0.001); 0: fixed.
  float bias_update_rate = 0.0f;

  bool enabled() const { return experts > 0; }
  // Rows of an expert's first projection per unit of its width: gate|up 2, GELU's fc 1.
  int64_t input_factor() const { return activation == MoeActivation::swiglu ? 2 : 1; }
  // The router has a bias (used for the choice only): sigmoid_bias gating.
  bool router_bias() const { return gating == kernels::MoeGating::sigmoid_bias; }
  // Rows of one expert at most for n tokens (0: no limit).
  int64_t capacity(int64_t n) const;
};

// model.attention: "naive" keeps the T×T probabilities for backward; "flash" keeps only the
// log-sum-exp per query row and recomputes scores per tile (memory linear in T).
enum class AttentionKernel { naive, flash };
template <>
struct EnumNames<AttentionKernel> {
  static constexpr std::string_view names[] = {"naive", "flash"};
};

struct ModelConfig {
  ModelFamily family = ModelFamily::gpt2;
  int64_t n_layer = 4;
  int64_t n_head = 4;
  int64_t n_kv_head = 0;  // 0 means n_head (multi-head attention)
  int64_t d_model = 256;
  int64_t d_ff = 0;  // 0 means the family default: 4*d_model (gpt2), swiglu_hidden(d_model) (llama)
  int64_t vocab_size = 8192;
  int64_t max_seq_len = 256;
  float norm_eps = 1e-5f;
  float rope_theta = 10000.0f;
  // RoPE frequency rescaling (rope-based families): "llama3" is Llama 3.1+'s (rope_scaling
  // {"rope_type": "llama3", factor, low_freq_factor, high_freq_factor,
  // original_max_position_embeddings} in Hugging Face's config.json).
  RopeScaling rope_scaling = RopeScaling::none;
  double rope_factor = 8.0;
  double rope_low_freq_factor = 1.0;
  double rope_high_freq_factor = 4.0;
  int64_t rope_original_max_seq_len = 8192;
  // Width of one attention head; 0 means d_model / n_head. Qwen3 sets it apart from d_model
  // (Qwen3-0.6B: d_model 1024, 16 heads of 128).
  int64_t attn_head_dim = 0;
  bool tie_embeddings = true;  // gpt2 default true, llama default false
  float init_std = 0.02f;
  AttentionKernel attention = AttentionKernel::naive;
  MoeConfig moe;

  // Derived values, valid after finalize().
  int64_t head_dim() const { return attn_head_dim > 0 ? attn_head_dim : d_model / n_head; }
  int64_t kv_heads() const { return n_kv_head > 0 ? n_kv_head : n_head; }
  int64_t qkv_width() const { return (n_head + 2 * kv_heads()) * head_dim(); }
  bool flash_attention() const { return attention == AttentionKernel::flash; }
  int64_t expert_ffn() const { return moe.expert_ffn > 0 ? moe.expert_ffn : d_ff; }
  // The shared experts' fused SwiGLU width (0: none).
  int64_t shared_ffn() const {
    return moe.shared_experts * (moe.shared_ffn > 0 ? moe.shared_ffn : expert_ffn());
  }
  RopeSpec rope() const;

  // Fills defaults that depend on the family and checks consistency; throws strata::Error
  // naming the key ("model.n_head") and the problem.
  void finalize();

  // Parameter count; `include_positions` counts the learned position table.
  int64_t num_params(bool include_positions = true) const;
  // What one token runs through: num_params less the experts a token does not use (MoE: top_k of
  // experts per layer), for FLOPs and MFU.
  int64_t num_active_params(bool include_positions = true) const;
};

// LLaMA's hidden width for SwiGLU: 2/3 of 4C, rounded up to a multiple of 64.
inline int64_t swiglu_hidden(int64_t d_model) {
  return ((8 * d_model / 3) + 63) / 64 * 64;
}

inline const char* family_name(ModelFamily f) {
  return enum_name(f).data();
}
inline ModelFamily family_from_name(const std::string& name) {  // throws naming model.family
  return parse_enum<ModelFamily>("model.family", name);
}

}  // namespace strata
