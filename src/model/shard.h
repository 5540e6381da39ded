// ModelShard: which part of the global model one rank holds, in Megatron-LM's terms.
//
//   tensor parallelism (tp ranks): attention heads, MLP columns and vocabulary rows are split
//     along the tp group; norms, row-parallel biases and position embeddings are replicated.
//     Grouped-query attention splits the kv heads when n_kv_head % tp == 0 and replicates each kv
//     head over tp / n_kv_head ranks when tp % n_kv_head == 0; anything else is an error.
//   sequence parallelism (sp, with tp > 1): the residual stream, norms and residual adds run on
//     this rank's 1/tp of the rows of the micro-batch (rows = batch * seq_len, contiguous blocks
//     in rank order); the collectives around each block become all-gather / reduce-scatter.
//   expert parallelism (ep ranks, carved out of dp): each Mixture-of-Experts layer's experts are
//     split in ep equal blocks of whole experts; everything else is replicated over ep.
//   pipeline parallelism (pp ranks, vpp virtual stages per rank): layers are cut into pp * vpp
//     global virtual stages; this rank holds chunks c = 0..vpp-1, the global stages
//     pp_rank + c * pp (Megatron's interleaved assignment). The embedding lives on global stage 0,
//     the final norm and head on the last; a tied head on another rank than the embedding keeps a
//     copy whose gradients are summed with the embedding's before every update.
//
// Every parameter keeps its global name; its TensorSlice says where the local block sits in the
// global tensor, so initialisation (by global element index), checkpoints (global tensors) and
// gradient norms (each element counted once) are layout-independent.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"

namespace strata {

struct LayerRange {
  int64_t begin = 0, end = 0;  // layers [begin, end)
  int64_t size() const { return end - begin; }
  bool operator==(const LayerRange&) const = default;
};

// Where a rank's block of a parameter sits in the global tensor (see ParamInfo::slice).
struct TensorSlice {
  int dim = -1;          // the sharded dimension; -1: the whole tensor
  int64_t begin = 0;     // first index along dim
  int64_t global = 0;    // global extent along dim
  int holders = 1;       // tp ranks that hold these same elements (replicas)
  int holder_index = 0;  // this rank's index among them; index 0 counts and saves them
  // The holders' gradients are partial sums (sequence-parallel norms and biases, a kv head shared
  // by several ranks' query heads): they are added up over the holders before the update.
  bool sum_grads = false;
  // The holders are the whole tp group (replicated), not a subset (a shared kv head).
  bool replicated = false;
  // A tied embedding's copy on the last pipeline stage; the first stage's embedding is the owner.
  bool stage_copy = false;
  // A Mixture-of-Experts layer's experts (dim 0 = the expert): split over the expert-parallel
  // group (ep ranks hold different experts), replicated over the expert-data-parallel group,
  // which reduces their gradients, shards them under ZeRO and whose first rank saves them.
  bool expert = false;
};

struct ModelShard {
  int tp = 1, tp_rank = 0;
  bool sp = false;
  int pp = 1, pp_rank = 0, vpp = 1;
  // Expert parallelism: this rank holds experts [expert_begin, + experts) of each MoE layer.
  int ep = 1, ep_rank = 0;
  std::vector<LayerRange> chunks{{0, 0}};  // this rank's layers per model chunk, in chunk order
  bool has_embedding = true;               // global stage 0 is one of this rank's chunks
  bool has_head = true;                    // the last global stage is one of this rank's chunks

  // The whole model in one process.
  static ModelShard whole(const ModelConfig& config);

  int global_stage(int chunk) const { return pp_rank + chunk * pp; }
  int num_chunks() const { return static_cast<int>(chunks.size()); }
  bool chunk_has_embedding(int chunk) const { return global_stage(chunk) == 0; }
  bool chunk_has_head(int chunk) const { return global_stage(chunk) == pp * vpp - 1; }
  bool holds_layer(int64_t layer) const;

  // Local sizes (config must be finalized).
  int64_t heads(const ModelConfig& c) const { return c.n_head / tp; }
  int64_t kv_heads(const ModelConfig& c) const {
    return c.kv_heads() % tp == 0 ? c.kv_heads() / tp : 1;
  }
  // Ranks sharing one kv head (1 when the kv heads are split).
  int kv_holders(const ModelConfig& c) const {
    return c.kv_heads() % tp == 0 ? 1 : static_cast<int>(tp / c.kv_heads());
  }
  int64_t kv_head_begin(const ModelConfig& c) const {
    return c.kv_heads() % tp == 0 ? tp_rank * kv_heads(c) : tp_rank / kv_holders(c);
  }
  int64_t qkv_width(const ModelConfig& c) const {
    return (heads(c) + 2 * kv_heads(c)) * c.head_dim();
  }
  int64_t ffn(const ModelConfig& c) const { return c.d_ff / tp; }
  int64_t experts(const ModelConfig& c) const { return c.moe.experts / ep; }
  int64_t expert_begin(const ModelConfig& c) const { return ep_rank * experts(c); }
  int64_t vocab(const ModelConfig& c) const { return c.vocab_size / tp; }
  int64_t vocab_begin(const ModelConfig& c) const { return tp_rank * vocab(c); }
  // Rows of the residual stream this rank holds for a micro-batch of `rows` tokens.
  int64_t local_rows(int64_t rows) const { return sp ? rows / tp : rows; }
  int64_t first_row(int64_t rows) const { return sp ? tp_rank * (rows / tp) : 0; }
};

// Layers per global virtual stage: `explicit_counts` when given (their sum must be n_layer),
// otherwise balanced: n_layer / stages each, the remainder going to the middle stages first (the
// first stage also runs the embedding and the last the head).
std::vector<int64_t> stage_layer_counts(int64_t n_layer, int stages,
                                        const std::vector<int64_t>& explicit_counts = {});

// Checks that the model splits over (tp, sp, pp, vpp) for micro-batches of `rows` tokens and
// builds this rank's shard. Errors name the keys and say which values would work.
ModelShard make_shard(const ModelConfig& config, int tp, int tp_rank, bool sp, int pp, int pp_rank,
                      int vpp, int64_t rows, const std::vector<int64_t>& stage_layers = {});

}  // namespace strata
