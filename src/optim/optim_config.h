// OptimConfig: AdamW, learning-rate schedule and clipping settings ([optim] in the config).
#pragma once
#include <cstdint>
#include <string>

namespace strata {

struct OptimConfig {
  float lr = 6e-4f;
  float min_lr = 6e-5f;  // floor of the decay
  int64_t warmup_steps = 20;
  std::string decay = "cosine";  // "cosine", "linear" or "constant"
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.1f;  // decoupled; not applied to norms, biases or other 1-D params
  float grad_clip = 1.0f;     // global-norm clip (0: off)
};

}  // namespace strata
