// Decoder: the config-driven transformer (gpt2 and llama families) with an explicit forward and
// backward. It owns this rank's parameters (ParamStore) and the activations of the micro-batches
// in flight (ActivationStore slots per model chunk), all allocated once from the arena for a fixed
// (batch, seq_len); a step allocates nothing.
//
// Parallelism is applied to the unchanged model through a ModelShard (model/shard.h): tensor and
// sequence parallelism change the local shapes and insert the tp collectives (TensorParallel);
// pipeline parallelism gives the rank some chunks of layers, run one at a time through the chunk
// API below by a pipeline executor. One process is the shard that holds everything.
//
// The device is a Backend (kernels/backend.h, DecoderOptions::backend; default the CPU): every
// kernel call and every copy, fill or zeroing of the model's buffers goes through it, and its
// arena must take its memory from backend.memory(). Parameters, gradients, activations, logits
// and chunk boundaries are therefore DEVICE pointers (plain host memory on the CPU backend):
// accessors below hand them out as such, and a caller reads them on the host through
// backend().copy_to_host. Token and target arrays are HOST pointers: the Decoder checks them and
// copies them to the device itself.
#pragma once
#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "core/arena.h"
#include "model/activation_offload.h"
#include "model/activations.h"
#include "model/block.h"
#include "model/config.h"
#include "model/context_attention.h"
#include "model/group_hooks.h"
#include "model/lowp_weights.h"
#include "model/moe_ffn.h"
#include "model/parallel_linear.h"
#include "model/params.h"
#include "model/shard.h"
#include "model/tensor_parallel.h"

namespace strata {

// Indices of every parameter a shard holds (-1 when absent). blocks has one entry per global
// layer; layers of other pipeline stages keep all -1.
struct ModelParamIndex {
  int embed = -1, pos_embed = -1, final_norm_w = -1, final_norm_b = -1;
  int head = -1;  // untied head, or a tied head's copy of the embedding on the last stage
  std::vector<BlockParams> blocks;
};

// Registers the parameters of `shard` (local shapes, global names, slices) into `params`.
// Parameter groups (model/block.h): 0 is the embedding, 1..n_layer the blocks, n_layer + 1 the
// final norm and head, and for MoE models n_layer + 2 + L layer L's experts (laid out first).
// Registration order inside a group is the storage order: q|k|v weights (and biases) and
// gate|up are adjacent, so one GEMM computes each fused projection.
ModelParamIndex register_model_params(const ModelConfig& config, const ModelShard& shard,
                                      ParamStore& params);

// Initial values of local elements [begin, begin + count) of one parameter: a function of the
// seed, the parameter's global name and the GLOBAL element index only (DESIGN invariant 1), so a
// rank holding a slice initialises exactly the values one process has there.
void init_param_elements(const ModelConfig& config, const ParamInfo& info, uint64_t seed,
                         int64_t begin, int64_t count, float* out);

struct DecoderOptions {
  int slots = 1;                 // activation slots (micro-batches in flight) per chunk
  std::vector<int> chunk_slots;  // per chunk; overrides `slots` when not empty
  // Sees the registered parameters before anything is allocated: a sharding strategy sets
  // padding and residency there.
  std::function<void(ParamStore&)> plan;
  std::optional<ModelShard> shard;  // default: the whole model
  Comm* tp = nullptr;               // the tensor-parallel group (null: tp = 1)
  Comm* ep = nullptr;               // the expert-parallel group (null: ep = 1)
  RecomputePolicy recompute;        // what backward rebuilds instead of keeping (activations.h)
  // f32, or mixed precision: bf16 / f16 GEMMs with f32 accumulation on 16-bit copies of the
  // weights and of the activations the GEMMs read (which is also what is kept for backward);
  // norms, softmax, attention, the loss and every gradient stay f32, and the ParamStore's f32
  // buffer becomes the master weights.
  DType precision = DType::f32;
  // The device the model runs on (null: cpu_backend()). The arena must be constructed with
  // backend->memory().
  Backend* backend = nullptr;
  // Saved activations to the host after each block's forward, back before its backward
  // (model/activation_offload.h): the device keeps a window of two blocks' worth. The whole depth
  // in one activation slot only (no pipeline chunks), and no full recomputation.
  bool offload_activations = false;
  // The groups of ranks holding other rows of the same micro-batch (dp, and tp under sp): an MoE
  // model with model.moe.aux_loss_scope = "global" adds their loads before the auxiliary loss.
  std::vector<Comm*> batch_groups;
  // Context parallelism and document masking (model/context_attention.h). With cp > 1 the
  // Decoder's seq_len is this rank's rows per sequence (train.seq_len / cp), and the token and
  // target arrays hold those rows (ContextSplit: chunks r and 2cp-1-r).
  ContextOptions context;
};

class Decoder {
 public:
  Decoder(const ModelConfig& config, Arena& arena, int64_t batch, int64_t seq_len,
          DecoderOptions options);
  // The whole model in one process.
  Decoder(const ModelConfig& config, Arena& arena, int64_t batch, int64_t seq_len, int slots = 1,
          const std::function<void(ParamStore&)>& plan = nullptr);

  // Initialises every local parameter from (seed, global name, global element index) only.
  void init(uint64_t seed);

  // Forward on host inputs[b*t] (b <= batch, t <= seq_len) through all chunks (a rank holding the
  // whole depth: pp = 1). With targets, computes the per-token losses and returns their mean over
  // valid targets; without, leaves logits for logits().
  // doc_start (host [b, whole sequence]; null: one document per sequence): where each row's
  // document begins, for document masking and positions (ContextAttention::prepare); read only
  // when context attention is active. Likewise below.
  double forward(const int32_t* inputs, const int32_t* targets, int64_t b, int64_t t, int slot = 0,
                 const int32_t* doc_start = nullptr);
  // Forward and backward of one micro-batch (pp = 1): accumulates into the gradients
  // dL/dθ * grad_scale where L is the SUM of token losses (so grad_scale = 1/tokens averages).
  // Returns the mean loss over valid targets.
  double forward_backward(const int32_t* inputs, const int32_t* targets, float grad_scale,
                          int slot = 0, const int32_t* doc_start = nullptr);

  // ---- chunk API (pipeline executor) ---------------------------------------------------------
  // Forward of chunk `chunk` for the micro-batch in `slot` (full batch and seq_len). The chunk
  // with the embedding reads `tokens`; any other reads chunk_input(chunk, slot), which the
  // caller has filled (the activation received from the previous stage). `tokens`: host memory.
  void chunk_forward(int chunk, int slot, const int32_t* tokens,
                     const int32_t* doc_start = nullptr);
  // Device pointers [boundary_elements()].
  float* chunk_input(int chunk, int slot) { return acts_[chunk][slot]->embed_out; }
  const float* chunk_output(int chunk, int slot) const;  // the last layer's output
  // On the chunk with the head, after chunk_forward: the mean loss over valid targets; with
  // `backward`, also leaves dlogits (scaled by grad_scale) for chunk_backward.
  double chunk_loss(int chunk, int slot, const int32_t* targets, bool backward, float grad_scale);
  // Backward of chunk `chunk`: starts from dlogits on the head chunk, otherwise from
  // doutput = dL/d(chunk output); leaves dL/d(chunk input) in dinput unless the chunk has the
  // embedding. Both are device pointers [boundary_elements()].
  void chunk_backward(int chunk, int slot, const float* doutput, float* dinput);
  int64_t boundary_elements() const;  // rows this rank holds * d_model
  int num_chunks() const { return shard_.num_chunks(); }

  // [b*t, v], a device pointer: read it on the host through backend().copy_to_host.
  const float* logits(int slot = 0) const { return acts_.back()[slot]->logits; }
  Backend& backend() const { return backend_; }
  const ModelConfig& config() const { return config_; }
  const ModelShard& shard() const { return shard_; }
  const TensorParallel& tensor_parallel() const { return tp_; }
  // Parameter and gradient pointers of the store are device pointers (see the top of this file).
  ParamStore& params() { return params_; }
  const ParamStore& params() const { return params_; }
  // bf16 training keeps a bf16 working copy of the weights that the optimizer can write as it
  // updates the f32 masters (one pass over the parameters instead of two). bf16_copy_of: where
  // the copy of the value at `param` (inside the resident flat parameters) lives; null when there
  // is no such copy (f32 or f16 training, ZeRO-3's transient slot). bf16_copy_written: after an
  // update that wrote every parameter's copy and bumped the version, the copy is current.
  uint16_t* bf16_copy_of(const float* param) { return lowp_weights_.bf16_copy_of(param); }
  void bf16_copy_written() { lowp_weights_.written(); }
  const ModelParamIndex& index() const { return index_; }
  int64_t batch() const { return batch_; }
  int64_t seq_len() const { return seq_len_; }

  // MoE families: each global layer's record of its last forward (aux and z losses, tokens per
  // expert, drops); empty for dense families and for layers this rank does not hold.
  const std::vector<MoeLayerStats>& moe_stats() const { return moe_stats_; }
  // Starts the count of the statistics (a step's micro-batches).
  void reset_moe_stats();
  // The per-token gradient scale of the coming backward passes (what the loss's backward also
  // takes), for the stages of a pipeline that do not compute the loss: the MoE balancing losses'
  // gradients are weighted by it on every stage.
  void set_grad_scale(float grad_scale) { loss_scale_ = grad_scale; }
  // The balancing losses of the forwards since reset_moe_stats, summed over layers (each already
  // times its coefficient): what the objective adds to the mean token loss, per micro-batch.
  double moe_loss() const;

  // Host memory of the activation offload (null without it).
  const ActivationOffload* activation_offload() const { return offload_.get(); }

  // Hooks see every use of a parameter group; the Decoder does not own them.
  void set_hooks(GroupHooks* hooks) { hooks_ = hooks ? hooks : &no_hooks_; }
  int final_group() const { return static_cast<int>(config_.n_layer) + 1; }

  // FLOPs of one training token of the whole model (6N + 12·L·C·T, N the parameters a token runs
  // through: without position embeddings, and of an MoE layer only top_k experts), for MFU.
  double train_flops_per_token() const;

 private:
  void embedding_forward(ActivationStore& a, const int32_t* tokens);
  void embedding_backward(ActivationStore& a);
  void head_forward(ActivationStore& a);
  void head_backward(ActivationStore& a);
  double loss(ActivationStore& a, const int32_t* targets, bool backward, float grad_scale);
  // The block's view of one layer of the micro-batch in `a`.
  BlockRun block_run(int layer, const ActivationStore& a);
  bool lowp() const { return precision_ != DType::f32; }
  void check_moe_supported();
  bool moe() const { return !moe_stats_.empty(); }
  // A layer's parameter groups (its own, and an MoE layer's experts') are used / done with.
  void acquire_layer_params(int layer);
  void release_layer_params(int layer);
  bool bf16_flash() const {
    return bf16_flash_attention(precision_, config_) && !context_.active();
  }
  // Positions and masks of the micro-batch in `a` (context attention only).
  void prepare_context(ActivationStore& a, const int32_t* doc_start);
  NormKind norm() const { return block_->layout().norm; }
  // `saving`: backward follows and reads the saved activations (the offload copies them then).
  void run_forward(int chunk, ActivationStore& a, const int32_t* tokens, bool saving);
  void run_backward(int chunk, ActivationStore& a);
  const float* layer_input(const ActivationStore& a, int64_t local_layer) const;
  // A layer's activations as forward and backward see them: the slot's own buffers, with what
  // recomputation drops pointing into the shared recompute buffers. `rebuilding`: the backward
  // rerun of a full-recompute block, whose output goes to scratch (the slot's copy may be in
  // flight to the next pipeline stage).
  LayerActivations layer_view(const ActivationStore& a, int64_t local_layer, bool rebuilding) const;
  const float* head_weight() const;
  float* head_grad() const;
  // A tied head that reads the embedding itself (the rank holds both): its weight gradient is
  // computed at the end of backward, into the embedding group.
  bool tied_in_place() const {
    return config_.tie_embeddings && index_.head < 0 && shard_.has_head;
  }

  ModelConfig config_;
  ModelShard shard_;
  TensorParallel tp_;
  ExpertParallel ep_;
  ContextAttention context_;         // DecoderOptions::context (inactive: the causal kernels)
  std::vector<Comm*> batch_groups_;  // DecoderOptions::batch_groups
  Arena& arena_;
  Backend& backend_;
  int64_t batch_, seq_len_;
  ParamStore params_;
  ModelParamIndex index_;
  std::vector<std::vector<std::unique_ptr<ActivationStore>>> acts_;  // [chunk][slot]
  GradScratch scratch_;
  RecomputePolicy recompute_;
  DType precision_ = DType::f32;
  const Block* block_ = nullptr;        // the family's layer (model/block.h)
  LowpWeights lowp_weights_;            // the 16-bit working weights (mixed precision)
  ParallelLinear linear_;               // the layers' tp linear pieces, over the members above
  LayerActivations recompute_buffers_;  // one layer's worth, shared by every recomputed layer
  std::unique_ptr<ActivationOffload> offload_;  // DecoderOptions::offload_activations
  GroupHooks no_hooks_;
  GroupHooks* hooks_ = &no_hooks_;
  std::vector<MoeLayerStats> moe_stats_;  // [n_layer] for MoE families
  float loss_scale_ = 0.0f;               // grad_scale of the last loss with backward
};

}  // namespace strata
