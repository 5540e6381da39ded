#include "model/config.h"

#include "core/error.h"
#include "model/block.h"

namespace strata {

const char* family_name(ModelFamily f) {
  return f == ModelFamily::gpt2 ? "gpt2" : "llama";
}

ModelFamily family_from_name(const std::string& name) {
  if (name == "gpt2") return ModelFamily::gpt2;
  if (name == "llama") return ModelFamily::llama;
  fail("model.family: unknown family '", name, "' (expected \"gpt2\" or \"llama\")");
}

void ModelConfig::finalize() {
  STRATA_CHECK(n_layer >= 1, "model.n_layer: must be at least 1, got ", n_layer);
  STRATA_CHECK(n_head >= 1, "model.n_head: must be at least 1, got ", n_head);
  STRATA_CHECK(d_model >= 1, "model.d_model: must be at least 1, got ", d_model);
  STRATA_CHECK(d_model % n_head == 0, "model.n_head: ", n_head,
               " heads do not divide d_model = ", d_model,
               "; choose n_head so that d_model / n_head is a whole head size");
  if (n_kv_head == 0) n_kv_head = n_head;
  STRATA_CHECK(n_kv_head >= 1 && n_head % n_kv_head == 0, "model.n_kv_head: ", n_kv_head,
               " must divide n_head = ", n_head,
               " (grouped-query attention shares each kv head "
               "among n_head / n_kv_head query heads)");
  STRATA_CHECK(family == ModelFamily::llama || n_kv_head == n_head,
               "model.n_kv_head: the gpt2 family has multi-head attention; set n_kv_head = ",
               n_head, " or use family = \"llama\"");
  if (family == ModelFamily::llama) {
    STRATA_CHECK(head_dim() % 2 == 0, "model.d_model: RoPE needs an even head size, got ",
                 head_dim());
  }
  if (d_ff == 0) d_ff = family == ModelFamily::gpt2 ? 4 * d_model : swiglu_hidden(d_model);
  STRATA_CHECK(d_ff >= 1, "model.d_ff: must be positive, got ", d_ff);
  STRATA_CHECK(vocab_size >= 2, "model.vocab_size: must be at least 2, got ", vocab_size);
  STRATA_CHECK(max_seq_len >= 1, "model.max_seq_len: must be at least 1, got ", max_seq_len);
  STRATA_CHECK(norm_eps > 0, "model.norm_eps: must be positive, got ", norm_eps);
  STRATA_CHECK(attention == "naive" || attention == "flash", "model.attention: unknown kernel '",
               attention, "' (expected \"naive\" or \"flash\")");
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
  const int64_t mlp = (layout.mlp_pre_factor + 1) * c * d_ff +
                      (layout.biases ? layout.mlp_pre_factor * d_ff + c : 0);
  int64_t total = n_layer * (2 * norm + attn + mlp) + norm + vocab_size * c;
  if (!tie_embeddings) total += vocab_size * c;
  if (include_positions && layout.learned_positions) total += max_seq_len * c;
  return total;
}

}  // namespace strata
