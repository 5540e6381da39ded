#include "model/activations.h"

#include <algorithm>

#include "kernels/cpu/flash_attention.h"
#include "kernels/cpu/kernels.h"

namespace strata {

namespace {
float* act(Arena& arena, int64_t count, const char* what) {
  return arena.alloc<float>(MemCategory::activations, count, what);
}
}  // namespace

Recompute recompute_from_name(const std::string& name) {
  if (name == "none") return Recompute::none;
  if (name == "selective") return Recompute::selective;
  if (name == "full") return Recompute::full;
  fail("train.recompute: unknown mode '", name, "' (expected \"none\", \"selective\" or \"full\")");
}

const char* recompute_name(Recompute r) {
  return r == Recompute::none ? "none" : r == Recompute::selective ? "selective" : "full";
}

LayerActivations allocate_layer(const ModelConfig& cfg, const ModelShard& shard, Recompute mode,
                                Arena& arena, MemCategory category, int64_t batch, int64_t seq_len,
                                DType precision) {
  const bool lowp = precision != DType::f32;
  const int64_t n = batch * seq_len, ns = shard.local_rows(n), c = cfg.d_model;
  const int64_t nh = shard.heads(cfg), f = shard.ffn(cfg);
  const bool layernorm = cfg.family == ModelFamily::gpt2;
  const int64_t pre_width = cfg.family == ModelFamily::gpt2 ? f : 2 * f;
  auto buf = [&](int64_t count, const char* what) {
    return arena.alloc<float>(category, count, what);
  };
  auto half = [&](int64_t count, const char* what) {
    return arena.alloc<uint16_t>(category, count, what);
  };
  // A GEMM input kept for backward: 16 bits under mixed precision (its f32 version is then a
  // transient shared buffer, see layer_view), f32 otherwise.
  auto gemm_input = [&](float*& f32, uint16_t*& kept, int64_t count, const char* what) {
    if (lowp)
      kept = half(count, what);
    else
      f32 = buf(count, what);
  };
  LayerActivations l;
  l.resid_out = buf(ns * c, "block output");
  if (mode == Recompute::full) return l;
  gemm_input(l.attn_norm, l.attn_norm_lp, ns * c, "attention norm");
  if (layernorm) l.attn_mean = buf(ns, "attention norm mean");
  l.attn_rstd = buf(ns, "attention norm rstd");
  gemm_input(l.qkv, l.qkv_lp, n * shard.qkv_width(cfg), "qkv");
  if (cfg.flash_attention())
    l.lse = buf(batch * nh * seq_len, "attention log-sum-exp");
  else if (mode == Recompute::none)
    l.probs = buf(batch * nh * seq_len * seq_len, "attention probabilities");
  if (!lowp || cfg.flash_attention())
    l.attn_out = buf(n * nh * cfg.head_dim(), "attention output");
  else
    l.attn_out_lp = half(n * nh * cfg.head_dim(), "attention output (16-bit)");
  l.resid_mid = buf(ns * c, "residual after attention");
  gemm_input(l.mlp_norm, l.mlp_norm_lp, ns * c, "mlp norm");
  if (layernorm) l.mlp_mean = buf(ns, "mlp norm mean");
  l.mlp_rstd = buf(ns, "mlp norm rstd");
  l.mlp_pre = buf(n * pre_width, "mlp pre-activation");
  gemm_input(l.mlp_act, l.mlp_act_lp, n * f, "mlp activation");
  return l;
}

ActivationStore::ActivationStore(const ModelConfig& cfg, const ModelShard& shard, LayerRange range,
                                 bool embedding, bool head, Arena& arena, int64_t batch,
                                 int64_t seq_len, const RecomputePolicy& recompute, DType precision)
    : b(batch), t(seq_len) {
  const int64_t n = batch * seq_len, ns = shard.local_rows(n), c = cfg.d_model;
  const bool layernorm = cfg.family == ModelFamily::gpt2;
  inputs = arena.alloc<int32_t>(MemCategory::activations, n, "input tokens");
  targets = arena.alloc<int32_t>(MemCategory::activations, n, "target tokens");
  embed_out = act(arena, ns * c, embedding ? "embedding output" : "stage input");
  for (int64_t local = 0; local < range.size(); ++local)
    layers.push_back(allocate_layer(cfg, shard, recompute.for_layer(local), arena,
                                    MemCategory::activations, batch, seq_len, precision));
  if (head) {
    if (precision != DType::f32)
      final_norm_lp =
          arena.alloc<uint16_t>(MemCategory::activations, ns * c, "final norm (16-bit)");
    else
      final_norm = act(arena, ns * c, "final norm");
    if (layernorm) final_mean = act(arena, ns, "final norm mean");
    final_rstd = act(arena, ns, "final norm rstd");
    logits = act(arena, n * shard.vocab(cfg), "logits");
    losses = act(arena, n, "token losses");
    if (shard.tp > 1) ce_stats = act(arena, 3 * n, "cross-entropy statistics");
  }
}

GradScratch::GradScratch(const ModelConfig& cfg, const ModelShard& shard, Arena& arena,
                         int64_t batch, int64_t seq_len, DType precision) {
  const int64_t n = batch * seq_len, ns = shard.local_rows(n), c = cfg.d_model;
  const int64_t nh = shard.heads(cfg), nkv = shard.kv_heads(cfg), f = shard.ffn(cfg);
  const int64_t pre_width = cfg.family == ModelFamily::gpt2 ? f : 2 * f;
  auto ws = [&](int64_t count, const char* what) {
    return arena.alloc<float>(MemCategory::workspace, count, what);
  };
  dresid = ws(ns * c, "residual gradient");
  dnorm = ws(ns * c, "norm gradient");
  dqkv = ws(n * shard.qkv_width(cfg), "qkv gradient");
  dattn = ws(n * nh * cfg.head_dim(), "attention output gradient");
  dmlp_pre = ws(n * pre_width, "mlp pre-activation gradient");
  dmlp_act = ws(n * f, "mlp activation gradient");
  const int64_t scratch =
      cfg.flash_attention()
          ? std::max(
                kernels::flash_attention_backward_scratch(batch, seq_len, nh, nkv, cfg.head_dim()),
                kernels::flash_attention_backward_bf16_scratch(batch, seq_len, nh, nkv,
                                                               cfg.head_dim()))
          : kernels::attention_backward_scratch(batch, seq_len, nh, nkv, cfg.head_dim());
  attn_scratch = ws(std::max<int64_t>(1, scratch), "attention backward scratch");
  if (shard.sp) {
    full_a = ws(n * c, "sequence-parallel gather");
    full_b = ws(n * c, "sequence-parallel partial sums");
  }
  if (precision == DType::f32) return;
  auto half = [&](int64_t count, const char* what) {
    return arena.alloc<uint16_t>(MemCategory::workspace, count, what);
  };
  if (shard.sp) full_lp = half(n * c, "sequence-parallel gather (16-bit)");
  // Output gradients are rounded in row blocks: the widest layer (gate|up, qkv, fc) at all rows,
  // or the head (vocabulary rows) in blocks of at most 512 rows.
  const int64_t widest = std::max({shard.qkv_width(cfg), pre_width, c, nh * cfg.head_dim()});
  dy_capacity = std::max(n * widest, std::min<int64_t>(n, 512) * shard.vocab(cfg));
  dy_lp = half(dy_capacity, "output gradient (16-bit)");
  if (precision == DType::f16) {
    const int64_t largest_in = std::max({c, f, nh * cfg.head_dim()});
    const int64_t largest_w = std::max({shard.qkv_width(cfg) * c, pre_width * c, c * f,
                                        shard.vocab(cfg) * c, c * nh * cfg.head_dim()});
    f16_wide =
        ws(std::max(n * largest_in + largest_w, dy_capacity + std::max(largest_w, n * largest_in)),
           "f16 operands widened to f32");
  }
  // Transient f32 activations (their 16-bit copies are what the layers keep).
  transient.attn_norm = ws(ns * c, "attention norm (f32, transient)");
  transient.qkv = ws(n * shard.qkv_width(cfg), "qkv (f32, transient)");
  transient.mlp_norm = ws(ns * c, "mlp norm (f32, transient)");
  transient.mlp_act = ws(n * f, "mlp activation (f32, transient)");
  transient.attn_out = ws(n * nh * cfg.head_dim(), "attention output (f32, transient)");
  transient.attn_out_lp = half(n * nh * cfg.head_dim(), "attention output (16-bit, transient)");
  final_norm = ws(ns * c, "final norm (f32, transient)");
}

}  // namespace strata
