#include "model/activations.h"

#include <algorithm>

#include "kernels/cpu/flash_attention.h"
#include "kernels/cpu/kernels.h"
#include "model/block.h"
#include "model/expert_parallel.h"

namespace strata {

namespace {

// The buffers below are planned once, against "an arena" A: the Arena (allocation) or a
// MemCounter (the planner's byte counts), so that both see the same sizes.

// The MoE FFN's kept tensors for the n rows held (dropless: n*k rows at most; with ep > 1 the
// experts' side holds up to moe_expert_rows).
template <class A>
void moe_buffers(LayerActivations& l, const ModelConfig& cfg, const ModelShard& shard, A& arena,
                 MemCategory category, int64_t n) {
  const int64_t e = cfg.moe.experts, k = cfg.moe.top_k, f = cfg.expert_ffn(), c = cfg.d_model;
  const int64_t rows = n * k, r = moe_expert_rows(cfg, shard, n);
  auto buf = [&](int64_t count, const char* what) {
    return arena.template alloc<float>(category, count, what);
  };
  if (cfg.moe.z_loss_coeff > 0) l.moe_logits = buf(n * e, "moe router logits");
  l.moe_probs = buf(n * e, "moe router probabilities");
  l.moe_weight = buf(n * k, "moe combine weights");
  l.moe_expert_idx = arena.template alloc<int32_t>(category, n * k, "moe expert indices");
  l.moe_tokens_per_expert = arena.template alloc<int64_t>(category, e, "moe tokens per expert");
  l.moe_offsets = arena.template alloc<int64_t>(category, e + 1, "moe expert offsets");
  if (cfg.moe.aux_loss_scope == MoeAuxScope::global && cfg.moe.aux_loss_coeff > 0)
    l.moe_balance_counts =
        arena.template alloc<int64_t>(category, e, "moe loads over the batch's ranks");
  l.moe_token_row = arena.template alloc<int32_t>(category, n * k, "moe token rows");
  l.moe_row_token = arena.template alloc<int32_t>(category, rows, "moe row tokens");
  if (shard.ep == 1) {
    l.moe_xs = buf(rows * c, "moe permuted input");
  } else {
    l.moe_xe = buf(r * c, "moe experts' received input");
    l.moe_ep_counts = arena.template alloc<int32_t>(category, shard.ep * e, "moe exchange counts");
    l.moe_ep_offsets =
        arena.template alloc<int64_t>(category, e / shard.ep + 1, "moe local expert offsets");
    l.moe_ep_sort = arena.template alloc<int32_t>(category, r, "moe exchange sort");
    l.moe_ep_unsort = arena.template alloc<int32_t>(category, r, "moe exchange unsort");
  }
  l.moe_gate_up = buf(r * cfg.moe.input_factor() * f, "moe expert gate|up (or fc)");
  l.moe_h = buf(r * f, "moe expert activation");
  l.moe_ys = buf(rows * c, "moe expert output");
  if (const int64_t s = cfg.shared_ffn(); s > 0) {
    l.moe_shared_gate_up = buf(n * cfg.moe.input_factor() * s, "moe shared experts gate|up");
    l.moe_shared_h = buf(n * s, "moe shared experts activation");
  }
}

template <class A>
LayerActivations layer_buffers(const ModelConfig& cfg, const ModelShard& shard, Recompute mode,
                               A& arena, MemCategory category, int64_t batch, int64_t seq_len,
                               DType precision) {
  const bool lowp = precision != DType::f32;
  const int64_t n = batch * seq_len, ns = shard.local_rows(n), c = cfg.d_model;
  const int64_t nh = shard.heads(cfg), f = shard.ffn(cfg);
  const BlockLayout layout = block_for(cfg.family).layout();
  const bool layernorm = layout.norm == NormKind::layernorm;
  const int64_t pre_width = layout.mlp_pre_factor * f;
  auto buf = [&](int64_t count, const char* what) {
    return arena.template alloc<float>(category, count, what);
  };
  auto half = [&](int64_t count, const char* what) {
    return arena.template alloc<uint16_t>(category, count, what);
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
  if (layout.head_norm) {
    const int64_t qk_heads = nh + shard.kv_heads(cfg);
    l.qk_pre = buf(n * qk_heads * cfg.head_dim(), "q and k before their head norms");
    l.qk_rstd = buf(n * qk_heads, "q and k head norm rstd");
  }
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
  if (layout.moe) {
    moe_buffers(l, cfg, shard, arena, category, ns);  // the rows held (sp: this rank's)
    return l;
  }
  l.mlp_pre = buf(n * pre_width, "mlp pre-activation");
  gemm_input(l.mlp_act, l.mlp_act_lp, n * f, "mlp activation");
  return l;
}

// An ActivationStore's buffers before its layers: the micro-batch's tokens and the chunk input.
template <class A>
void store_input_buffers(ActivationStore& s, const ModelConfig& cfg, const ModelShard& shard,
                         bool embedding, A& arena, int64_t batch, int64_t seq_len) {
  const int64_t n = batch * seq_len, ns = shard.local_rows(n);
  s.inputs = arena.template alloc<int32_t>(MemCategory::activations, n, "input tokens");
  s.targets = arena.template alloc<int32_t>(MemCategory::activations, n, "target tokens");
  s.embed_out = arena.template alloc<float>(MemCategory::activations, ns * cfg.d_model,
                                            embedding ? "embedding output" : "stage input");
}

// After its layers, on the chunk with the head: the final norm, logits and losses.
template <class A>
void store_head_buffers(ActivationStore& s, const ModelConfig& cfg, const ModelShard& shard,
                        A& arena, int64_t batch, int64_t seq_len, DType precision) {
  const int64_t n = batch * seq_len, ns = shard.local_rows(n), c = cfg.d_model;
  const bool layernorm = block_for(cfg.family).layout().norm == NormKind::layernorm;
  auto act = [&](int64_t count, const char* what) {
    return arena.template alloc<float>(MemCategory::activations, count, what);
  };
  if (precision != DType::f32)
    s.final_norm_lp =
        arena.template alloc<uint16_t>(MemCategory::activations, ns * c, "final norm (16-bit)");
  else
    s.final_norm = act(ns * c, "final norm");
  if (layernorm) s.final_mean = act(ns, "final norm mean");
  s.final_rstd = act(ns, "final norm rstd");
  s.logits = act(n * shard.vocab(cfg), "logits");
  s.losses = act(n, "token losses");
  if (shard.tp > 1) s.ce_stats = act(3 * n, "cross-entropy statistics");
}

// Floats of the attention backward's scratch: the backend's sizes, or (null) the CPU kernels' on
// `threads` threads (0: omp_get_max_threads()), which is what the planner counts.
int64_t attention_scratch(const ModelConfig& cfg, const Backend* backend, int64_t batch,
                          int64_t seq_len, int64_t nh, int64_t nkv, int threads) {
  const int64_t hd = cfg.head_dim();
  if (backend) {
    const AttentionShape shape{batch, seq_len, nh, nkv, hd};
    return cfg.flash_attention()
               ? std::max(backend->flash_attention_backward_scratch(DType::f32, shape),
                          backend->flash_attention_backward_scratch(DType::bf16, shape))
               : backend->attention_backward_scratch(shape);
  }
  return cfg.flash_attention()
             ? std::max(
                   kernels::flash_attention_backward_scratch(batch, seq_len, nh, nkv, hd, threads),
                   kernels::flash_attention_backward_bf16_scratch(batch, seq_len, nh, nkv, hd,
                                                                  threads))
             : kernels::attention_backward_scratch(batch, seq_len, nh, nkv, hd, threads);
}

template <class A>
void scratch_buffers(GradScratch& g, const ModelConfig& cfg, const ModelShard& shard, A& arena,
                     int64_t batch, int64_t seq_len, DType precision, int threads,
                     const Backend* backend, Device device) {
  const int64_t n = batch * seq_len, ns = shard.local_rows(n), c = cfg.d_model;
  const int64_t nh = shard.heads(cfg), nkv = shard.kv_heads(cfg), f = shard.ffn(cfg);
  const BlockLayout layout = block_for(cfg.family).layout();
  const int64_t pre_width = layout.mlp_pre_factor * f;
  auto ws = [&](int64_t count, const char* what) {
    return arena.template alloc<float>(MemCategory::workspace, count, what);
  };
  g.dresid = ws(ns * c, "residual gradient");
  g.dnorm = ws(ns * c, "norm gradient");
  g.dqkv = ws(n * shard.qkv_width(cfg), "qkv gradient");
  g.dattn = ws(n * nh * cfg.head_dim(), "attention output gradient");
  if (layout.moe) {
    // The MoE FFN runs on the rows held (sp: this rank's).
    const int64_t e = cfg.moe.experts, k = cfg.moe.top_k, fe = cfg.expert_ffn();
    const int64_t r = moe_expert_rows(cfg, shard, ns);
    g.moe_dlogits = ws(ns * e, "moe router logits gradient");
    g.moe_dweight = ws(ns * k, "moe combine weights gradient");
    g.moe_drows = ws(ns * k * c, "moe expert rows gradient");
    g.moe_dh = ws(r * fe, "moe expert activation gradient");
    g.moe_dgate_up = ws(r * cfg.moe.input_factor() * fe, "moe expert gate|up gradient");
    if (shard.ep > 1) {
      g.moe_recv = ws(r * c, "moe exchanged rows");
      g.moe_recv2 = ws(r * c, "moe exchanged rows, permuted");
    }
    if (const int64_t s = cfg.shared_ffn(); s > 0) {
      g.moe_shared_dh = ws(ns * s, "moe shared experts activation gradient");
      g.moe_shared_dgate_up =
          ws(ns * cfg.moe.input_factor() * s, "moe shared experts gate|up gradient");
    }
    if (cfg.moe.z_loss_coeff <= 0) g.moe_logits = ws(ns * e, "moe router logits");
  } else {
    g.dmlp_pre = ws(n * pre_width, "mlp pre-activation gradient");
    g.dmlp_act = ws(n * f, "mlp activation gradient");
  }
  const int64_t scratch = attention_scratch(cfg, backend, batch, seq_len, nh, nkv, threads);
  g.attn_scratch = ws(std::max<int64_t>(1, scratch), "attention backward scratch");
  if (shard.sp) {
    g.full_a = ws(n * c, "sequence-parallel gather");
    g.full_b = ws(n * c, "sequence-parallel partial sums");
  }
  if (precision == DType::f32) return;
  auto half = [&](int64_t count, const char* what) {
    return arena.template alloc<uint16_t>(MemCategory::workspace, count, what);
  };
  if (shard.sp) g.full_lp = half(n * c, "sequence-parallel gather (16-bit)");
  // Output gradients are rounded in row blocks: the widest layer (gate|up, qkv, fc) at all rows,
  // or the head (vocabulary rows) in blocks of at most 512 rows.
  const int64_t widest = std::max({shard.qkv_width(cfg), pre_width, c, nh * cfg.head_dim()});
  g.dy_capacity = std::max(n * widest, std::min<int64_t>(n, 512) * shard.vocab(cfg));
  g.dy_lp = half(g.dy_capacity, "output gradient (16-bit)");
  // Operands widened to f32 for the GEMM: f16 always; bf16 where the CPU kernels have no native
  // bf16 product (below the avx512bf16 level). A CUDA backend multiplies both natively.
  const bool on_cuda = (backend ? backend->kind() : device) == Device::cuda;
  if (precision == DType::f16 || (!on_cuda && kernels::lowp_widens(precision))) {
    const int64_t largest_in = std::max({c, f, nh * cfg.head_dim()});
    const int64_t largest_w = std::max({shard.qkv_width(cfg) * c, pre_width * c, c * f,
                                        shard.vocab(cfg) * c, c * nh * cfg.head_dim()});
    g.lowp_wide = ws(
        std::max(n * largest_in + largest_w, g.dy_capacity + std::max(largest_w, n * largest_in)),
        "16-bit operands widened to f32");
  }
  // Transient f32 activations (their 16-bit copies are what the layers keep).
  g.transient.attn_norm = ws(ns * c, "attention norm (f32, transient)");
  g.transient.qkv = ws(n * shard.qkv_width(cfg), "qkv (f32, transient)");
  g.transient.mlp_norm = ws(ns * c, "mlp norm (f32, transient)");
  g.transient.mlp_act = ws(n * f, "mlp activation (f32, transient)");
  g.transient.attn_out = ws(n * nh * cfg.head_dim(), "attention output (f32, transient)");
  g.transient.attn_out_lp = half(n * nh * cfg.head_dim(), "attention output (16-bit, transient)");
  g.final_norm = ws(ns * c, "final norm (f32, transient)");
}

template <class A>
LayerActivations recompute_buffers(const ModelConfig& cfg, const ModelShard& shard, Recompute mode,
                                   A& arena, int64_t batch, int64_t seq_len, DType precision) {
  LayerActivations l;
  if (mode == Recompute::full)
    return layer_buffers(cfg, shard, Recompute::none, arena, MemCategory::workspace, batch, seq_len,
                         precision);
  if (mode == Recompute::selective && !cfg.flash_attention()) {
    const int64_t rows = batch * seq_len, heads = shard.heads(cfg);
    l.probs = arena.template alloc<float>(MemCategory::workspace, batch * heads * seq_len * seq_len,
                                          "recomputed attention probabilities");
    l.attn_out = arena.template alloc<float>(MemCategory::workspace, rows * heads * cfg.head_dim(),
                                             "recomputed attention output");
  }
  return l;
}

// An Arena that also lists what it hands out (allocate_layer_blocks).
struct RecordingArena {
  Arena& arena;
  std::vector<LayerBlock>& blocks;
  template <typename T = float>
  T* alloc(MemCategory category, int64_t count, const char* what) {
    T* ptr = arena.alloc<T>(category, count, what);
    blocks.push_back({what, ptr, static_cast<size_t>(count) * sizeof(T)});
    return ptr;
  }
};

}  // namespace

LayerActivations allocate_layer_blocks(const ModelConfig& cfg, const ModelShard& shard,
                                       Recompute mode, Arena& arena, MemCategory category,
                                       int64_t batch, int64_t seq_len, DType precision,
                                       std::vector<LayerBlock>& blocks) {
  RecordingArena recording{arena, blocks};
  return layer_buffers(cfg, shard, mode, recording, category, batch, seq_len, precision);
}

LayerActivations allocate_layer(const ModelConfig& cfg, const ModelShard& shard, Recompute mode,
                                Arena& arena, MemCategory category, int64_t batch, int64_t seq_len,
                                DType precision) {
  return layer_buffers(cfg, shard, mode, arena, category, batch, seq_len, precision);
}

LayerActivations allocate_recompute_buffers(const ModelConfig& cfg, const ModelShard& shard,
                                            Recompute mode, Arena& arena, int64_t batch,
                                            int64_t seq_len, DType precision) {
  return recompute_buffers(cfg, shard, mode, arena, batch, seq_len, precision);
}

ActivationStore::ActivationStore(const ModelConfig& cfg, const ModelShard& shard, LayerRange range,
                                 bool embedding, bool head, Arena& arena, int64_t batch,
                                 int64_t seq_len, const RecomputePolicy& recompute, DType precision)
    : b(batch), t(seq_len) {
  store_input_buffers(*this, cfg, shard, embedding, arena, batch, seq_len);
  for (int64_t local = 0; local < range.size(); ++local)
    layers.push_back(layer_buffers(cfg, shard, recompute.for_layer(local), arena,
                                   MemCategory::activations, batch, seq_len, precision));
  if (head) store_head_buffers(*this, cfg, shard, arena, batch, seq_len, precision);
}

GradScratch::GradScratch(const ModelConfig& cfg, const ModelShard& shard, Arena& arena,
                         int64_t batch, int64_t seq_len, DType precision, const Backend* backend) {
  scratch_buffers(*this, cfg, shard, arena, batch, seq_len, precision, 0, backend, Device::cpu);
}

// ---- the same buffers, counted --------------------------------------------------------------

int64_t moe_expert_rows(const ModelConfig& cfg, const ModelShard& shard, int64_t n) {
  const MoeConfig& m = cfg.moe;
  return ExpertParallel::max_rows(n, m.top_k, m.experts, shard.ep, m.capacity(n));
}

MemBytes layer_bytes(const ModelConfig& cfg, const ModelShard& shard, Recompute mode,
                     MemCategory category, int64_t batch, int64_t seq_len, DType precision) {
  MemCounter counter;
  layer_buffers(cfg, shard, mode, counter, category, batch, seq_len, precision);
  return counter.bytes();
}

MemBytes activation_store_bytes(const ModelConfig& cfg, const ModelShard& shard, LayerRange range,
                                bool embedding, bool head, int64_t batch, int64_t seq_len,
                                const RecomputePolicy& recompute, DType precision) {
  MemCounter counter;
  ActivationStore store;
  store_input_buffers(store, cfg, shard, embedding, counter, batch, seq_len);
  if (head) store_head_buffers(store, cfg, shard, counter, batch, seq_len, precision);
  MemBytes out = counter.bytes();
  // Layers in the same mode take the same bytes: count each mode once (O(1) in the layers).
  std::array<int64_t, 3> layers_in_mode{};
  for (int64_t local = 0; local < range.size(); ++local)
    ++layers_in_mode[static_cast<int>(recompute.for_layer(local))];
  for (Recompute mode : {Recompute::none, Recompute::selective, Recompute::full}) {
    const int64_t count = layers_in_mode[static_cast<int>(mode)];
    if (count == 0) continue;
    const MemBytes one =
        layer_bytes(cfg, shard, mode, MemCategory::activations, batch, seq_len, precision);
    for (int c = 0; c < kNumMemCategories; ++c) out[c] += count * one[c];
  }
  return out;
}

MemBytes grad_scratch_bytes(const ModelConfig& cfg, const ModelShard& shard, int64_t batch,
                            int64_t seq_len, DType precision, int threads, const Backend* backend,
                            Device device) {
  MemCounter counter;
  GradScratch g;
  scratch_buffers(g, cfg, shard, counter, batch, seq_len, precision, threads, backend, device);
  return counter.bytes();
}

MemBytes recompute_buffer_bytes(const ModelConfig& cfg, const ModelShard& shard, Recompute mode,
                                int64_t batch, int64_t seq_len, DType precision) {
  MemCounter counter;
  recompute_buffers(cfg, shard, mode, counter, batch, seq_len, precision);
  return counter.bytes();
}

}  // namespace strata
