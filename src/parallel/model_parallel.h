// ModelParallel: what tensor and pipeline parallelism add around a step's optimizer update, and
// the bridge between this rank's shard and the global tensors.
//
//   finish_gradients  after the data-parallel reduction: adds up the gradients that several
//                     ranks hold as partial sums (sequence-parallel norms and position table over
//                     the tp group, a kv head shared by tp / n_kv_head ranks), and the tied
//                     embedding's two copies on the first and last pipeline stages (Megatron's
//                     embedding group), so that replicas stay identical after the update.
//   grad_norm         the true global norm: every global element counted once (replicas by their
//                     first holder, the tied copy by its owner), reduced over dp, tp and pp.
//   gather / scatter  global tensors (by name, in the single-process layout) from and to the
//                     shards of every rank, for checkpoints and sampling.
// All reductions commute with the data-parallel average, so their order does not matter.
// Gradients are added, copied and summed through the model's Backend; the arena passed to the
// constructor (its packing buffers) must take its memory from that backend.
#pragma once
#include <cstdint>
#include <vector>

#include "comm/process_groups.h"
#include "model/decoder.h"
#include "parallel/data_parallel.h"

namespace strata {

// The arguments make_shard needs for any rank of the job (to know another rank's parameters).
struct ShardSpec {
  int tp = 1, pp = 1, vpp = 1;
  bool sp = false;
  int64_t rows = 0;  // tokens per micro-batch
  std::vector<int64_t> stage_layers;
  int ep = 1;  // expert parallelism (experts split over ep ranks)
  ModelShard for_rank(const ModelConfig& config, int tp_rank, int pp_rank, int ep_rank = 0) const {
    ModelShard s = make_shard(config, tp, tp_rank, sp, pp, pp_rank, vpp, rows, stage_layers);
    STRATA_CHECK(ep == 1 || (config.moe.experts > 0 && config.moe.experts % ep == 0),
                 "parallel.ep = ", ep, " must divide model.moe.experts = ", config.moe.experts);
    s.ep = ep;
    s.ep_rank = ep_rank;
    return s;
  }
};

// The whole model's parameters laid out as in one process (no allocation), for global tensors.
ParamStore whole_model_layout(const ModelConfig& config);

class ModelParallel {
 public:
  ModelParallel(ProcessGroups& groups, const ModelConfig& config, const ShardSpec& spec,
                Decoder& model, DataParallel& dp, Arena& arena);

  void finish_gradients();
  double grad_norm();

  // Collective over the world: on world rank 0, `whole` (whole_model_layout) receives every
  // global tensor from `local`, a host buffer in this rank's full parameter layout (not
  // dp-sharded); other ranks leave it untouched. Only data-parallel rank 0 of each (tp, pp) sends,
  // and with ep > 1 the other ranks of its expert-parallel group their experts.
  void gather(const float* local, float* whole);
  // Every rank takes its blocks of the global tensors `whole` into `local` (host, full layout).
  void scatter(const float* whole, float* local) const;
  const ParamStore& whole_layout() const { return whole_; }

 private:
  ProcessGroups& groups_;
  ModelConfig config_;
  ShardSpec spec_;
  Decoder& model_;
  DataParallel& dp_;
  ParamStore whole_;
  // Parameters whose holders' gradients are partial sums, split by who holds them.
  std::vector<int> tp_summed_;  // replicated over the whole tp group
  std::vector<int> kv_summed_;  // a kv head shared by a subset of the tp group
  float* pack_ = nullptr;       // packed gradients for one collective
  float* gathered_ = nullptr;   // tp * packed kv gradients
  int64_t tp_summed_elems_ = 0, kv_summed_elems_ = 0;
  int tied_copy_ = -1;              // the tied embedding on the first or last stage (pp > 1)
  float* tied_peer_ = nullptr;      // the other stage's gradient
  std::vector<int32_t> norm_bits_;  // every rank's partial norm, as bits (grad_norm)
};

}  // namespace strata
