// Autoregressive sampling from a Decoder planned for batch 1: temperature, top-k, seeded.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "model/decoder.h"

namespace strata {

struct SampleOptions {
  int64_t max_new_tokens = 64;
  float temperature = 0.8f;  // 0 means greedy
  int64_t top_k = 40;        // 0 means the whole vocabulary
  uint64_t seed = 1;
  int32_t stop_token = -1;  // stop after emitting this token (-1: never)
  // Sample only ids below this (0: the whole vocabulary). A model's vocabulary is often padded
  // past its tokenizer's (Qwen3: 151936 rows for 151669 tokens): ids the tokenizer cannot decode
  // are never drawn.
  int64_t vocab_limit = 0;
};

// Extends `prompt` (non-empty) by up to max_new_tokens tokens; the context is the last
// model.seq_len() tokens. on_token (optional) sees each new token as it is produced.
std::vector<int32_t> generate(Decoder& model, const std::vector<int32_t>& prompt,
                              const SampleOptions& options,
                              const std::function<void(int32_t)>& on_token = nullptr);

}  // namespace strata
