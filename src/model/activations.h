// What forward saves for backward, per micro-batch slot (ActivationStore), and the gradient
// buffers that backward reuses layer after layer (GradScratch). Both are planned from the config
// and the micro-batch shape at start-up and allocated once; sizes are in elements.
#pragma once
#include <cstdint>
#include <vector>

#include "core/arena.h"
#include "model/config.h"

namespace strata {

struct LayerActivations {
  float* attn_norm = nullptr;  // [n, c] normalised input of attention
  float* attn_mean = nullptr;  // [n] (LayerNorm only)
  float* attn_rstd = nullptr;  // [n]
  float* qkv = nullptr;        // [n, qkv_width] (q and k after RoPE for llama)
  float* probs = nullptr;      // [b, nh, t, t] (naive attention)
  float* lse = nullptr;        // [b, nh, t] log-sum-exp of each query row (flash attention)
  float* attn_out = nullptr;   // [n, nh*hd] heads concatenated
  float* resid_mid = nullptr;  // [n, c] residual after attention
  float* mlp_norm = nullptr;   // [n, c]
  float* mlp_mean = nullptr;   // [n]
  float* mlp_rstd = nullptr;   // [n]
  float* mlp_pre = nullptr;    // [n, f] (gpt2 fc output) or [n, 2f] (llama gate|up)
  float* mlp_act = nullptr;    // [n, f] activation output, input of proj/down
  float* resid_out = nullptr;  // [n, c] block output
};

struct ActivationStore {
  ActivationStore(const ModelConfig& cfg, Arena& arena, int64_t batch, int64_t seq_len);
  int32_t* inputs = nullptr;   // [n] copy of the micro-batch's tokens (embedding backward)
  int32_t* targets = nullptr;  // [n]
  float* embed_out = nullptr;  // [n, c] block 0 input
  std::vector<LayerActivations> layers;
  float* final_norm = nullptr;  // [n, c]
  float* final_mean = nullptr;  // [n]
  float* final_rstd = nullptr;  // [n]
  float* logits = nullptr;      // [n, v]; holds dlogits after backward's loss step
  float* losses = nullptr;      // [n]
  bool has_targets = false;
};

struct GradScratch {
  GradScratch() = default;
  GradScratch(const ModelConfig& cfg, Arena& arena, int64_t batch, int64_t seq_len);
  float* dresid = nullptr;    // [n, c] gradient of the residual stream
  float* dnorm = nullptr;     // [n, c] gradient of a norm's output
  float* dqkv = nullptr;      // [n, qkv_width]
  float* dattn = nullptr;     // [n, nh*hd]
  float* dmlp_pre = nullptr;  // [n, f or 2f]
  float* dmlp_act = nullptr;  // [n, f]
  float* attn_scratch = nullptr;
};

}  // namespace strata
