#include "model/config.h"

#include <cmath>

#include "core/error.h"
#include "model/block.h"

namespace strata {

int64_t MoeConfig::capacity(int64_t n) const {
  if (capacity_factor <= 0) return 0;
  return static_cast<int64_t>(
      std::ceil(capacity_factor * double(n) * double(top_k) / double(experts)));
}

namespace {
// model.moe.*: only a family whose layout has the MoE FFN takes experts.
void check_moe(const MoeConfig& m, ModelFamily family, const BlockLayout& layout) {
  if (!layout.moe) {
    STRATA_CHECK(m.experts == 0, "model.moe.experts: the ", family_name(family),
                 " family has a dense MLP; leave model.moe.experts at 0 or use an MoE family "
                 "(\"mixtral\", \"qwen3_moe\")");
    return;
  }
  STRATA_CHECK(m.experts >= 2, "model.moe.experts: the ", family_name(family),
               " family needs at least 2 experts, got ", m.experts);
  STRATA_CHECK(m.top_k >= 1 && m.top_k <= m.experts, "model.moe.top_k: must be in [1, ", m.experts,
               "] (model.moe.experts), got ", m.top_k);
  STRATA_CHECK(m.shared_experts >= 0 && m.shared_ffn >= 0,
               "model.moe.shared_experts and model.moe.shared_ffn: must be 0 or more, got ",
               m.shared_experts, " and ", m.shared_ffn);
  STRATA_CHECK(m.expert_ffn >= 0, "model.moe.expert_ffn: must be positive (or 0: d_ff), got ",
               m.expert_ffn);
  STRATA_CHECK(m.routed_scale > 0, "model.moe.routed_scale: must be positive, got ",
               m.routed_scale);
  STRATA_CHECK(m.aux_loss_coeff >= 0, "model.moe.aux_loss_coeff: must be 0 or more, got ",
               m.aux_loss_coeff);
  STRATA_CHECK(m.z_loss_coeff >= 0, "model.moe.z_loss_coeff: must be 0 or more, got ",
               m.z_loss_coeff);
  STRATA_CHECK(m.bias_update_rate >= 0, "model.moe.bias_update_rate: must be 0 or more, got ",
               m.bias_update_rate);
  STRATA_CHECK(m.bias_update_rate == 0 || m.router_bias(),
               "model.moe.bias_update_rate = ", m.bias_update_rate,
               " moves the router bias of gating \"sigmoid_bias\" (DeepSeek-V3), but "
               "model.moe.gating = \"",
               enum_name(m.gating), "\" has none; set gating = \"sigmoid_bias\" or the rate to 0");
  STRATA_CHECK(m.capacity_factor >= 0,
               "model.moe.capacity_factor: must be 0 (dropless) or positive, got ",
               m.capacity_factor);
}
}  // namespace

RopeSpec ModelConfig::rope() const {
  return RopeSpec{.theta = double(rope_theta),
                  .scaling = rope_scaling,
                  .factor = rope_factor,
                  .low_freq_factor = rope_low_freq_factor,
                  .high_freq_factor = rope_high_freq_factor,
                  .original_max_positions = double(rope_original_max_seq_len)};
}

void ModelConfig::finalize() {
  STRATA_CHECK(n_layer >= 1, "model.n_layer: must be at least 1, got ", n_layer);
  STRATA_CHECK(n_head >= 1, "model.n_head: must be at least 1, got ", n_head);
  STRATA_CHECK(d_model >= 1, "model.d_model: must be at least 1, got ", d_model);
  STRATA_CHECK(attn_head_dim >= 0,
               "model.head_dim: must be positive (or 0: d_model / n_head), got ", attn_head_dim);
  STRATA_CHECK(attn_head_dim > 0 || d_model % n_head == 0, "model.n_head: ", n_head,
               " heads do not divide d_model = ", d_model,
               "; choose n_head so that d_model / n_head is a whole head size, or set "
               "model.head_dim");
  if (n_kv_head == 0) n_kv_head = n_head;
  STRATA_CHECK(n_kv_head >= 1 && n_head % n_kv_head == 0, "model.n_kv_head: ", n_kv_head,
               " must divide n_head = ", n_head,
               " (grouped-query attention shares each kv head "
               "among n_head / n_kv_head query heads)");
  const BlockLayout layout = block_for(family).layout();
  STRATA_CHECK(layout.grouped_query || n_kv_head == n_head, "model.n_kv_head: the ",
               family_name(family), " family has multi-head attention; set n_kv_head = ", n_head,
               " or use family = \"llama\"");
  STRATA_CHECK(layout.rope || attn_head_dim == 0 || attn_head_dim * n_head == d_model,
               "model.head_dim: the ", family_name(family),
               " family's heads are d_model / n_head wide; leave head_dim unset");
  if (layout.rope) {
    STRATA_CHECK(head_dim() % 2 == 0, "model.head_dim: RoPE needs an even head size, got ",
                 head_dim());
    STRATA_CHECK(rope_theta > 0, "model.rope_theta: must be positive, got ", rope_theta);
  }
  STRATA_CHECK(rope_scaling == RopeScaling::none || layout.rope, "model.rope_scaling: the ",
               family_name(family), " family has no RoPE (learned positions)");
  if (rope_scaling == RopeScaling::llama3) {
    STRATA_CHECK(rope_factor >= 1, "model.rope_factor: must be at least 1, got ", rope_factor);
    STRATA_CHECK(rope_low_freq_factor > 0 && rope_high_freq_factor > rope_low_freq_factor,
                 "model.rope_high_freq_factor: must exceed rope_low_freq_factor (> 0), got ",
                 rope_high_freq_factor, " and ", rope_low_freq_factor);
    STRATA_CHECK(rope_original_max_seq_len >= 1,
                 "model.rope_original_max_seq_len: must be at least 1, got ",
                 rope_original_max_seq_len);
  }
  // A gated MLP (gate|up, mlp_pre_factor 2) defaults to LLaMA's 2/3 of 4C; GELU's to 4C.
  if (d_ff == 0) d_ff = layout.mlp_pre_factor == 2 ? swiglu_hidden(d_model) : 4 * d_model;
  STRATA_CHECK(d_ff >= 1, "model.d_ff: must be positive, got ", d_ff);
  check_moe(moe, family, layout);
  STRATA_CHECK(vocab_size >= 2, "model.vocab_size: must be at least 2, got ", vocab_size);
  STRATA_CHECK(max_seq_len >= 1, "model.max_seq_len: must be at least 1, got ", max_seq_len);
  STRATA_CHECK(norm_eps > 0, "model.norm_eps: must be positive, got ", norm_eps);
}

int64_t ModelConfig::num_params(bool include_positions) const {
  // From the family's block layout (a formula: the planner calls this in its search loops);
  // DecoderFamilies.ParameterCountMatchesConfig holds it equal to the registered parameters.
  const BlockLayout layout = block_for(family).layout();
  const int64_t c = d_model, hd = head_dim(), kv = kv_heads(), qkv = (n_head + 2 * kv) * hd;
  const bool layernorm = layout.norm == NormKind::layernorm;
  const int64_t norm = layernorm ? 2 * c : c;
  const int64_t attn =
      c * qkv + n_head * hd * c + (layout.biases ? qkv + c : 0) + (layout.head_norm ? 2 * hd : 0);
  // An MoE layer: the router [experts, c] (and its bias under sigmoid_bias gating), each
  // expert's input projection (gate|up or fc) and down, the shared experts'.
  const int64_t expert_mats = moe.input_factor() + 1;
  const int64_t mlp = layout.moe ? moe.experts * c + (moe.router_bias() ? moe.experts : 0) +
                                       moe.experts * expert_mats * c * expert_ffn() +
                                       expert_mats * c * shared_ffn()
                                 : (layout.mlp_pre_factor + 1) * c * d_ff +
                                       (layout.biases ? layout.mlp_pre_factor * d_ff + c : 0);
  int64_t total = n_layer * (2 * norm + attn + mlp) + norm + vocab_size * c;
  if (!tie_embeddings) total += vocab_size * c;
  if (include_positions && layout.learned_positions) total += max_seq_len * c;
  return total;
}

int64_t ModelConfig::num_active_params(bool include_positions) const {
  const int64_t idle = moe.enabled() ? moe.experts - moe.top_k : 0;
  return num_params(include_positions) -
         n_layer * idle * (moe.input_factor() + 1) * d_model * expert_ffn();
}

}  // namespace strata
