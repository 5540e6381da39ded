// OptimConfig: AdamW, learning-rate schedule and clipping settings ([optim] in the config).
#pragma once
#include <cstdint>
#include <string>

#include "core/enum_names.h"

namespace strata {

// optim.decay: the learning rate after warmup, down to min_lr.
enum class LrDecay { cosine, linear, constant };
template <>
struct EnumNames<LrDecay> {
  static constexpr std::string_view names[] = {"cosine", "linear", "constant"};
};

// optim.offload: where the f32 master weights and Adam moments live (below).
enum class OptimizerOffload { none, nvme, cpu };
template <>
struct EnumNames<OptimizerOffload> {
  static constexpr std::string_view names[] = {"none", "nvme", "cpu"};
};

struct OptimConfig {
  float lr = 6e-4f;
  float min_lr = 6e-5f;  // floor of the decay
  int64_t warmup_steps = 20;
  LrDecay decay = LrDecay::cosine;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.1f;  // decoupled; not applied to norms, biases or other 1-D params
  float grad_clip = 1.0f;     // global-norm clip (0: off)
  // ZeRO-Infinity-style offload of the f32 master weights and Adam moments to files ("nvme"),
  // streamed through chunk buffers (optim/offload.h); offload_dir defaults to <run.dir>/offload
  // (one subdirectory per rank). "cpu": ZeRO-Offload, the state in host memory and the update on
  // the host, streamed to and from the device in offload_chunk_mb chunks (optim/host_offload.h).
  OptimizerOffload offload = OptimizerOffload::none;
  std::string offload_dir;
  double offload_chunk_mb = 4;
};

}  // namespace strata

namespace strata {

// [fp16]: dynamic loss scaling for train.precision = "fp16", with DeepSpeed's keys and meaning
// (its "fp16" JSON section): the scale starts at 2^initial_scale_power; a step whose gradients
// overflow is skipped and, once `hysteresis` overflows have been absorbed, halves the scale (not
// below min_loss_scale); every loss_scale_window steps without overflow double it. loss_scale > 0
// fixes the scale instead.
struct LossScalerConfig {
  float loss_scale = 0.0f;  // 0: dynamic
  int64_t initial_scale_power = 16;
  int64_t loss_scale_window = 1000;
  int64_t hysteresis = 2;
  float min_loss_scale = 1.0f;
  bool consecutive_hysteresis = false;  // refill the hysteresis after every clean step
};

}  // namespace strata
