// Decoder: the config-driven transformer (gpt2 and llama families) with an explicit forward and
// backward. It owns its parameters (ParamStore) and the activations of the micro-batches in flight
// (ActivationStore slots), all allocated once from the arena for a fixed (batch, seq_len); a step
// allocates nothing.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "core/arena.h"
#include "model/activations.h"
#include "model/config.h"
#include "model/group_hooks.h"
#include "model/params.h"

namespace strata {

// Indices into the ParamStore of one block's parameters (-1 when the family has none).
struct BlockParams {
  int attn_norm_w = -1, attn_norm_b = -1;
  int q_w = -1, k_w = -1, v_w = -1, q_b = -1, k_b = -1, v_b = -1;
  int o_w = -1, o_b = -1;
  int mlp_norm_w = -1, mlp_norm_b = -1;
  int fc_w = -1, fc_b = -1, proj_w = -1, proj_b = -1;  // gpt2
  int gate_w = -1, up_w = -1, down_w = -1;             // llama
};

// Initial values of elements [begin, begin + count) of one parameter: a function of the seed, the
// parameter's global name and the element index only (DESIGN invariant 1), so a rank holding a
// slice can initialise just its slice.
void init_param_elements(const ModelConfig& config, const ParamInfo& info, uint64_t seed,
                         int64_t begin, int64_t count, float* out);

class Decoder {
 public:
  // Allocates parameters, gradients and `slots` activation slots for micro-batches of
  // (batch, seq_len) tokens. `plan` (optional) sees the registered parameters before anything
  // is allocated: a sharding strategy sets padding and residency there.
  Decoder(const ModelConfig& config, Arena& arena, int64_t batch, int64_t seq_len, int slots = 1,
          const std::function<void(ParamStore&)>& plan = nullptr);

  // Initialises every parameter from (seed, global name, element index) only.
  void init(uint64_t seed);

  // Forward on inputs[b*t] (b <= batch, t <= seq_len). With targets, computes the per-token
  // losses and returns their mean over valid targets; without, leaves logits for logits().
  double forward(const int32_t* inputs, const int32_t* targets, int64_t b, int64_t t, int slot = 0);
  // Forward and backward of one micro-batch: accumulates into the gradients
  // dL/dθ * grad_scale where L is the SUM of token losses (so grad_scale = 1/tokens averages).
  // Returns the mean loss over valid targets.
  double forward_backward(const int32_t* inputs, const int32_t* targets, float grad_scale,
                          int slot = 0);

  const float* logits(int slot = 0) const { return acts_[slot]->logits; }  // [b*t, vocab]
  const ModelConfig& config() const { return config_; }
  ParamStore& params() { return params_; }
  const ParamStore& params() const { return params_; }
  int64_t batch() const { return batch_; }
  int64_t seq_len() const { return seq_len_; }

  // Parameter groups: 0 is the embedding, 1..n_layer the blocks, n_layer + 1 the final norm and
  // (untied) head. Hooks see every use of a group; the Decoder does not own them.
  void set_hooks(GroupHooks* hooks) { hooks_ = hooks ? hooks : &no_hooks_; }
  int final_group() const { return static_cast<int>(config_.n_layer) + 1; }

  // FLOPs of one training token (6N + 12·L·C·T, N excluding position embeddings), for MFU.
  double train_flops_per_token() const;

 private:
  void register_params();
  void block_forward(int layer, ActivationStore& a, int64_t b, int64_t t);
  void block_backward(int layer, ActivationStore& a, int64_t b, int64_t t);
  void backward(ActivationStore& a, float grad_scale);
  const float* head_weight() const;
  float* head_grad() const;

  ModelConfig config_;
  Arena& arena_;
  int64_t batch_, seq_len_;
  ParamStore params_;
  int embed_ = -1, pos_embed_ = -1, final_norm_w_ = -1, final_norm_b_ = -1, head_ = -1;
  std::vector<BlockParams> blocks_;
  std::vector<std::unique_ptr<ActivationStore>> acts_;
  GradScratch scratch_;
  GroupHooks no_hooks_;
  GroupHooks* hooks_ = &no_hooks_;
  int64_t last_b_ = 0, last_t_ = 0;
};

}  // namespace strata
