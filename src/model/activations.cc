#include "model/activations.h"

#include "kernels/cpu/flash_attention.h"
#include "kernels/cpu/kernels.h"

namespace strata {

namespace {
float* act(Arena& arena, int64_t count, const char* what) {
  return arena.alloc<float>(MemCategory::activations, count, what);
}
}  // namespace

ActivationStore::ActivationStore(const ModelConfig& cfg, Arena& arena, int64_t batch,
                                 int64_t seq_len) {
  const int64_t n = batch * seq_len, c = cfg.d_model, f = cfg.d_ff;
  const bool layernorm = cfg.family == ModelFamily::gpt2;
  const int64_t pre_width = cfg.family == ModelFamily::gpt2 ? f : 2 * f;
  inputs = arena.alloc<int32_t>(MemCategory::activations, n, "input tokens");
  targets = arena.alloc<int32_t>(MemCategory::activations, n, "target tokens");
  embed_out = act(arena, n * c, "embedding output");
  layers.resize(static_cast<size_t>(cfg.n_layer));
  for (LayerActivations& l : layers) {
    l.attn_norm = act(arena, n * c, "attention norm");
    if (layernorm) l.attn_mean = act(arena, n, "attention norm mean");
    l.attn_rstd = act(arena, n, "attention norm rstd");
    l.qkv = act(arena, n * cfg.qkv_width(), "qkv");
    if (cfg.flash_attention())
      l.lse = act(arena, batch * cfg.n_head * seq_len, "attention log-sum-exp");
    else
      l.probs = act(arena, batch * cfg.n_head * seq_len * seq_len, "attention probabilities");
    l.attn_out = act(arena, n * cfg.n_head * cfg.head_dim(), "attention output");
    l.resid_mid = act(arena, n * c, "residual after attention");
    l.mlp_norm = act(arena, n * c, "mlp norm");
    if (layernorm) l.mlp_mean = act(arena, n, "mlp norm mean");
    l.mlp_rstd = act(arena, n, "mlp norm rstd");
    l.mlp_pre = act(arena, n * pre_width, "mlp pre-activation");
    l.mlp_act = act(arena, n * f, "mlp activation");
    l.resid_out = act(arena, n * c, "block output");
  }
  final_norm = act(arena, n * c, "final norm");
  if (layernorm) final_mean = act(arena, n, "final norm mean");
  final_rstd = act(arena, n, "final norm rstd");
  logits = act(arena, n * cfg.vocab_size, "logits");
  losses = act(arena, n, "token losses");
}

GradScratch::GradScratch(const ModelConfig& cfg, Arena& arena, int64_t batch, int64_t seq_len) {
  const int64_t n = batch * seq_len, c = cfg.d_model, f = cfg.d_ff;
  const int64_t pre_width = cfg.family == ModelFamily::gpt2 ? f : 2 * f;
  auto ws = [&](int64_t count, const char* what) {
    return arena.alloc<float>(MemCategory::workspace, count, what);
  };
  dresid = ws(n * c, "residual gradient");
  dnorm = ws(n * c, "norm gradient");
  dqkv = ws(n * cfg.qkv_width(), "qkv gradient");
  dattn = ws(n * cfg.n_head * cfg.head_dim(), "attention output gradient");
  dmlp_pre = ws(n * pre_width, "mlp pre-activation gradient");
  dmlp_act = ws(n * f, "mlp activation gradient");
  const int64_t scratch = cfg.flash_attention()
                              ? kernels::flash_attention_backward_scratch(
                                    batch, seq_len, cfg.n_head, cfg.kv_heads(), cfg.head_dim())
                              : kernels::attention_backward_scratch(batch, seq_len, cfg.n_head,
                                                                    cfg.kv_heads(), cfg.head_dim());
  attn_scratch = ws(std::max<int64_t>(1, scratch), "attention backward scratch");
}

}  // namespace strata
