// The Decoder's parameters: registration (names, local shapes, global slices, groups) and their
// layout-independent initial values.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/philox.h"
#include "model/decoder.h"

namespace strata {

// ---- parameters --------------------------------------------------------------------------------

ModelParamIndex register_model_params(const ModelConfig& cfg, const ModelShard& sh, ParamStore& p) {
  const int64_t c = cfg.d_model, hd = cfg.head_dim();
  const int64_t nh = sh.heads(cfg), nkv = sh.kv_heads(cfg), f = sh.ffn(cfg), v = sh.vocab(cfg);
  const bool gpt2 = cfg.family == ModelFamily::gpt2, tp = sh.tp > 1;
  const int final_group = static_cast<int>(cfg.n_layer) + 1;
  // Slices: split along a dimension, or replicated over the tp group (then with sequence
  // parallelism a norm's or position table's gradient is a partial sum over rows).
  auto split = [&](int dim, int64_t begin, int64_t global) {
    TensorSlice s;
    if (!tp) return s;
    s.dim = dim;
    s.begin = begin;
    s.global = global;
    return s;
  };
  auto replicated = [&](bool row_partial) {
    TensorSlice s;
    if (!tp) return s;
    s.holders = sh.tp;
    s.holder_index = sh.tp_rank;
    s.replicated = true;
    s.sum_grads = row_partial && sh.sp;
    return s;
  };
  // k and v: this rank's kv heads, split or (tp > n_kv_head) shared with tp / n_kv_head ranks
  // whose query heads all read the same kv head; their gradients add up.
  auto kv = [&](int64_t per_head) {
    TensorSlice s = split(0, sh.kv_head_begin(cfg) * per_head, cfg.kv_heads() * per_head);
    if (tp && sh.kv_holders(cfg) > 1) {
      s.holders = sh.kv_holders(cfg);
      s.holder_index = sh.tp_rank % sh.kv_holders(cfg);
      s.sum_grads = true;
    }
    return s;
  };
  ModelParamIndex idx;
  idx.blocks.resize(static_cast<size_t>(cfg.n_layer));
  if (sh.has_embedding) {
    idx.embed = p.add("embed.weight", {v, c}, 0, split(0, sh.vocab_begin(cfg), cfg.vocab_size));
    if (cfg.learned_positions())
      idx.pos_embed = p.add("pos_embed.weight", {cfg.max_seq_len, c}, 0, replicated(true));
  }
  for (int64_t l = 0; l < cfg.n_layer; ++l) {
    if (!sh.holds_layer(l)) continue;
    const std::string pre = "layers." + std::to_string(l) + ".";
    const int g = static_cast<int>(l) + 1;
    BlockParams& b = idx.blocks[l];
    const int64_t q0 = sh.tp_rank * nh * hd, qall = cfg.n_head * hd;
    b.attn_norm_w = p.add(pre + "attn_norm.weight", {c}, g, replicated(true));
    if (gpt2) b.attn_norm_b = p.add(pre + "attn_norm.bias", {c}, g, replicated(true));
    b.q_w = p.add(pre + "attn.q.weight", {nh * hd, c}, g, split(0, q0, qall));
    b.k_w = p.add(pre + "attn.k.weight", {nkv * hd, c}, g, kv(hd));
    b.v_w = p.add(pre + "attn.v.weight", {nkv * hd, c}, g, kv(hd));
    if (gpt2) {
      b.q_b = p.add(pre + "attn.q.bias", {nh * hd}, g, split(0, q0, qall));
      b.k_b = p.add(pre + "attn.k.bias", {nkv * hd}, g, kv(hd));
      b.v_b = p.add(pre + "attn.v.bias", {nkv * hd}, g, kv(hd));
    }
    b.o_w = p.add(pre + "attn.o.weight", {c, nh * hd}, g, split(1, q0, qall));
    // A row-parallel bias is added after the reduction, and its gradient comes from the full
    // rows of the output gradient: replicated, never partial.
    if (gpt2) b.o_b = p.add(pre + "attn.o.bias", {c}, g, replicated(false));
    b.mlp_norm_w = p.add(pre + "mlp_norm.weight", {c}, g, replicated(true));
    const int64_t f0 = sh.tp_rank * f;
    if (gpt2) {
      b.mlp_norm_b = p.add(pre + "mlp_norm.bias", {c}, g, replicated(true));
      b.fc_w = p.add(pre + "mlp.fc.weight", {f, c}, g, split(0, f0, cfg.d_ff));
      b.fc_b = p.add(pre + "mlp.fc.bias", {f}, g, split(0, f0, cfg.d_ff));
      b.proj_w = p.add(pre + "mlp.proj.weight", {c, f}, g, split(1, f0, cfg.d_ff));
      b.proj_b = p.add(pre + "mlp.proj.bias", {c}, g, replicated(false));
    } else {
      b.gate_w = p.add(pre + "mlp.gate.weight", {f, c}, g, split(0, f0, cfg.d_ff));
      b.up_w = p.add(pre + "mlp.up.weight", {f, c}, g, split(0, f0, cfg.d_ff));
      b.down_w = p.add(pre + "mlp.down.weight", {c, f}, g, split(1, f0, cfg.d_ff));
    }
  }
  if (sh.has_head) {
    idx.final_norm_w = p.add("final_norm.weight", {c}, final_group, replicated(true));
    if (gpt2) idx.final_norm_b = p.add("final_norm.bias", {c}, final_group, replicated(true));
    const TensorSlice vocab = split(0, sh.vocab_begin(cfg), cfg.vocab_size);
    if (!cfg.tie_embeddings) {
      idx.head = p.add("head.weight", {v, c}, final_group, vocab);
    } else if (!sh.has_embedding) {
      // Megatron's word_embeddings_for_head: the last stage's copy of the tied embedding.
      TensorSlice copy = vocab;
      copy.stage_copy = true;
      idx.head = p.add("embed.weight", {v, c}, final_group, copy);
    }
  }
  return idx;
}

namespace {
bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
}  // namespace

void init_param_elements(const ModelConfig& config, const ParamInfo& info, uint64_t seed,
                         int64_t begin, int64_t count, float* out) {
  // GPT-2's scheme: N(0, std) for matrices, residual projections scaled by 1/sqrt(2L), zero
  // biases, unit norm weights. Each element comes from (seed, name, global index) only.
  if (ends_with(info.name, "norm.weight")) {
    std::fill(out, out + count, 1.0f);
    return;
  }
  if (ends_with(info.name, ".bias")) {
    std::fill(out, out + count, 0.0f);
    return;
  }
  const bool residual = ends_with(info.name, "attn.o.weight") ||
                        ends_with(info.name, "mlp.proj.weight") ||
                        ends_with(info.name, "mlp.down.weight");
  const float std = residual
                        ? config.init_std / std::sqrt(2.0f * static_cast<float>(config.n_layer))
                        : config.init_std;
  const CounterRng rng(seed, hash_name(info.name));
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < count; ++i)
    out[i] =
        static_cast<float>(std * rng.normal(static_cast<uint64_t>(info.global_index(begin + i))));
}

void Decoder::init(uint64_t seed) {
  // Host memory is written in place; a device's parameters are computed into a host staging
  // buffer and copied over, one parameter at a time.
  const bool in_place = backend_.memory() == nullptr;
  std::vector<float> staging;
  for (int i = 0; i < params_.count(); ++i) {
    const ParamInfo& info = params_.info(i);
    if (in_place) {
      init_param_elements(config_, info, seed, 0, info.numel, params_.param(i));
      continue;
    }
    staging.resize(static_cast<size_t>(info.numel));
    init_param_elements(config_, info, seed, 0, info.numel, staging.data());
    backend_.copy_from_host(params_.param(i), staging.data(),
                            static_cast<size_t>(info.numel) * sizeof(float));
  }
}

}  // namespace strata
