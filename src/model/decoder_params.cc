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
  const Block& block = block_for(cfg.family);
  const BlockLayout layout = block.layout();
  const ParamSlices slices{cfg, sh};
  const int64_t c = cfg.d_model, v = sh.vocab(cfg);
  const bool layernorm = layout.norm == NormKind::layernorm;
  const int final_group = static_cast<int>(cfg.n_layer) + 1;
  ModelParamIndex idx;
  idx.blocks.resize(static_cast<size_t>(cfg.n_layer));
  const TensorSlice vocab = slices.split(0, sh.vocab_begin(cfg), cfg.vocab_size);
  if (sh.has_embedding) {
    idx.embed = p.add("embed.weight", {v, c}, 0, vocab);
    if (layout.learned_positions)
      idx.pos_embed = p.add("pos_embed.weight", {cfg.max_seq_len, c}, 0, slices.replicated(true));
  }
  for (int64_t l = 0; l < cfg.n_layer; ++l)
    if (sh.holds_layer(l)) idx.blocks[l] = block.register_params(p, slices, l);
  if (sh.has_head) {
    idx.final_norm_w = p.add("final_norm.weight", {c}, final_group, slices.replicated(true));
    if (layernorm)
      idx.final_norm_b = p.add("final_norm.bias", {c}, final_group, slices.replicated(true));
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
  const bool residual =
      ends_with(info.name, "attn.o.weight") || ends_with(info.name, "mlp.proj.weight") ||
      ends_with(info.name, "mlp.down.weight") || ends_with(info.name, "moe.experts.down.weight");
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
