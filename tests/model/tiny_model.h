// The small decoders the model tests build on: 2 layers, 4 query heads (2 kv heads but for gpt2;
// qwen3's and qwen3_moe's heads are 12 wide instead of d_model / n_head = 16; mixtral and
// qwen3_moe route each token to 2 of 4 experts 32 wide),
// d_model 64, a vocabulary of 101, up to 16 positions; and reproducible token ids for them.
#pragma once
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "model/block.h"
#include "model/config.h"

namespace strata::testing {

inline ModelConfig tiny_model(ModelFamily family, AttentionKernel attention, bool tied) {
  ModelConfig c;
  c.family = family;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_kv_head = family == ModelFamily::gpt2 ? 0 : 2;
  if (family == ModelFamily::qwen3 || family == ModelFamily::qwen3_moe) c.attn_head_dim = 12;
  c.d_model = 64;
  c.vocab_size = 101;
  c.max_seq_len = 16;
  c.tie_embeddings = tied;
  c.attention = attention;
  if (block_for(family).layout().moe) {  // top-2 of 4 experts, each 32 wide
    c.moe.experts = 4;
    c.moe.expert_ffn = 32;
  }
  return c;
}

// gpt2 ties its head to the embedding, llama does not.
inline ModelConfig tiny_model(ModelFamily family,
                              AttentionKernel attention = AttentionKernel::naive) {
  return tiny_model(family, attention, family == ModelFamily::gpt2);
}

// n token ids in the tiny vocabulary, a function of the seed only.
inline std::vector<int32_t> tiny_tokens(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = static_cast<int32_t>(rng() % 101u);
  return t;
}

}  // namespace strata::testing
