// DataParallel: gradient synchronisation and ZeRO sharding over the data-parallel group.
//
// The flat parameter layout (ParamStore: groups in the order backward finishes them) is cut into
// buckets of whole groups, each padded to a multiple of the dp size. Rank r owns the r-th equal
// slice of every bucket; its "shard" is the concatenation of its slices (Ψ/N_d elements, plus
// padding). Per ZeRO stage:
//   0 (DDP)  resident params and grads; each bucket is all-reduced (average) as soon as backward
//            finishes its last group on the last micro-batch, while backward continues.
//   1        as 0, but AdamW state exists only for the shard; after the update each bucket's
//            parameters are all-gathered.
//   2        gradients are not resident: backward accumulates a bucket into a zeroed staging
//            buffer, which is reduce-scattered (every micro-batch) into the shard's gradients.
//   3        parameters are not resident either: a bucket is all-gathered into a staging buffer
//            just before a group of it is used and the next bucket is prefetched while it
//            computes; the shard alone is updated.
// Staging buffers are accounted as "comm"; params/grads/optimizer then follow the ZeRO paper's
// arithmetic exactly (up to padding).
//
// Expert parallelism (Megatron-Core's placement): the groups of a Mixture-of-Experts layer's
// experts (ParamInfo slices marked `expert`) differ between the ranks of an expert-parallel group,
// so they are reduced and sharded over the expert-data-parallel group instead (the dp ranks that
// hold the same experts, dp / ep of them): they form buckets of their own, padded to a multiple of
// that group's size, and every rule above applies to them over that group.
#pragma once
#include <cstdint>
#include <deque>
#include <vector>

#include "comm/comm.h"
#include "core/arena.h"
#include "model/config.h"
#include "model/group_hooks.h"
#include "model/params.h"
#include "optim/adamw.h"

namespace strata {

// A run of one parameter's gradient that this rank holds after finish_gradients: `count`
// elements at `grad`, starting at element `begin` of the parameter (local numbering).
struct GradSpan {
  float* grad = nullptr;
  int64_t begin = 0, count = 0;
};

struct DataParallelOptions {
  int zero = 0;
  int64_t bucket_elements = int64_t{25} << 18;  // 25 MB of f32
  bool overlap = true;
  // The type gradients travel in: f32 (default), or bf16 (half the bytes; each bucket is rounded
  // to bf16 before the reduction and widened back after it, as Megatron's bf16 grad reduce).
  DType reduce_dtype = DType::f32;
};

class DataParallel : public GroupHooks {
 public:
  // `expert_dp`: the expert-data-parallel group (null: the experts, if any, reduce over dp).
  DataParallel(Comm& dp, const DataParallelOptions& options, Comm* expert_dp = nullptr);

  // The buckets plan() cuts: whole groups of `group_sizes` (ParamStore::group_sizes(), laid out
  // in descending group order; empty groups skipped), each closed once it holds bucket_elements
  // or before a group of the other kind (expert_groups[g]: group g holds experts; empty: none
  // does), padded to a multiple of its group's size (dp, or edp for experts). A bucket is the
  // non-empty groups first_group down to last_group.
  struct BucketShape {
    int first_group = 0, last_group = 0;
    int64_t unpadded = 0, padded = 0;
    bool expert = false;
    int ranks = 1;  // the size of the group it is reduced over
  };
  static std::vector<BucketShape> plan_buckets(const std::vector<int64_t>& group_sizes,
                                               int64_t bucket_elements, int dp,
                                               const std::vector<char>& expert_groups = {},
                                               int edp = 1);
  // What plan() and setup() make of that, without a communicator or an allocation (the planner):
  // the flat layout with padding (ParamStore::size()), this rank's shard, the largest bucket and
  // the largest slice of one.
  struct Sizes {
    int64_t flat = 0, shard = 0, max_padded = 0, max_slice = 0;
    int buckets = 0;
  };
  static Sizes sizes(const std::vector<int64_t>& group_sizes, int64_t bucket_elements, int dp,
                     const std::vector<char>& expert_groups = {}, int edp = 1);
  // Which groups of `params` hold experts (ParamInfo::slice.expert), by group index.
  static std::vector<char> expert_groups(const ParamStore& params);
  // Bytes per arena category setup() allocates for that layout (shards, staging buffers).
  static MemBytes setup_bytes(const DataParallelOptions& options, int dp, const Sizes& sizes);

  // From the Decoder's plan callback, before allocation: buckets, padding, residency.
  void plan(ParamStore& params);
  // After allocation: shards, staging buffers, bindings.
  void setup(ParamStore& params, Arena& arena);

  // Initial parameters: every element from (seed, name, index), so the result is the same model
  // whatever the stage (stage 3 initialises only its shard).
  void init_params(const ModelConfig& config, uint64_t seed);

  // The step protocol around the micro-batches of one optimizer step.
  void begin_step();
  void begin_micro_batch(bool last);
  void finish_gradients();  // every reduction done: averaged gradients (full or shard)
  double grad_norm();       // global L2 norm over the dp group
  std::vector<OptimSegment> optimizer_segments() const;
  int64_t optimizer_state_size() const;
  // The parts of parameter `index`'s gradient this rank holds: all of it below stage 2, the
  // owned slices from stage 2 (identical on ranks with identical layouts, e.g. a tp group).
  std::vector<GradSpan> grad_spans(int index) const;
  // The parts of parameter `index` this rank's shard holds (stage >= 1): `count` elements from
  // element `begin` of the parameter, at `shard_offset` in the shard (and in the optimizer's
  // state). What a checkpoint saves of a sharded buffer and loads back into it.
  struct ShardRun {
    int64_t shard_offset = 0, begin = 0, count = 0;
  };
  std::vector<ShardRun> shard_runs(int index) const;
  void after_optimizer_step();  // all-gather updated parameters (stages 1, 2)

  // Checkpoints hold global tensors: full-layout copies of sharded buffers and back.
  // (`local` is the shard for sharded buffers; the full-layout buffer has params.size() elements.)
  // scatter_from_full reads `full` on the host and writes the shard through the model's backend.
  void gather_to_full(const float* local_shard, float* full);
  void scatter_from_full(const float* full, float* local_shard) const;
  bool params_sharded() const { return opt_.zero >= 3; }
  bool optimizer_sharded() const { return opt_.zero >= 1; }
  float* shard_params() const { return shard_params_; }
  // Stages 2, 3: this rank's reduced gradients (the shard's layout), as finish_gradients left them.
  bool grads_sharded() const { return opt_.zero >= 2; }
  float* shard_grads() const { return shard_grads_; }
  int64_t shard_size() const { return shard_size_; }
  int zero_stage() const { return opt_.zero; }
  int num_buckets() const { return static_cast<int>(buckets_.size()); }

  // GroupHooks
  void begin_forward() override;
  void begin_backward() override;
  void acquire_params(int group) override;
  void release_params(int group) override;
  void begin_grads(int group) override;
  void end_grads(int group) override;

 private:
  struct Bucket {
    std::vector<int> groups;  // in layout order (descending group index)
    Comm* comm = nullptr;     // dp, or edp for experts
    int rank = 0, size = 1;   // in that group
    int64_t start = 0;        // flat offset of the first element
    int64_t padded = 0;       // elements including padding (a multiple of the dp size)
    int64_t slice = 0;        // padded / dp: each rank's share
    int64_t local = 0;        // offset of this rank's slice in the shard
    int remaining = 0;        // groups whose gradients are not yet final this micro-batch
    int grad_slot = -1;       // staging slot holding its gradients (stages 2, 3)
    int param_slot = -1;      // staging slot holding its gathered parameters (stage 3)
  };
  struct GradSlot {
    float* data = nullptr;        // padded bucket of full gradients
    float* reduced = nullptr;     // this rank's reduced slice
    uint16_t* data_lp = nullptr;  // bf16 reduction: the bucket and its reduced slice in bf16
    uint16_t* reduced_lp = nullptr;
    int bucket = -1;
    WorkHandle work;
  };
  struct ParamSlot {
    float* data = nullptr;
    int bucket = -1;
    int users = 0;
    WorkHandle work;
    int64_t last_use = 0;
  };

  // The part of parameter p that bucket b's owned slice holds: `count` elements starting at
  // element `begin` of p, at `shard_offset` in this rank's shard (count 0: none).
  struct OwnedRun {
    int64_t shard_offset = 0, begin = 0, count = 0;
  };
  OwnedRun owned_run(const Bucket& b, const ParamInfo& p) const;
  void launch_bucket(int k);
  int free_grad_slot();
  void retire_grad_slot(int slot);
  int param_slot_for(int k, bool prefetch);
  void bind_bucket_params(int k, float* base);
  int64_t owned_begin(const Bucket& b) const { return b.start + b.rank * b.slice; }
  // The device of the parameters, gradients and staging buffers (the ParamStore's; after setup).
  Backend& backend() const { return params_->backend(); }

  Comm& comm_;
  Comm* expert_comm_;  // edp (or dp)
  DataParallelOptions opt_;
  ParamStore* params_ = nullptr;
  int size_ = 1;  // of the dp group (each bucket keeps its own group's rank and size)
  std::vector<Bucket> buckets_;
  std::vector<int> bucket_of_group_;
  int64_t shard_size_ = 0, max_padded_ = 0, max_slice_ = 0;
  float* shard_params_ = nullptr;  // stage 3
  float* shard_grads_ = nullptr;   // stages 2, 3
  std::vector<GradSlot> grad_slots_;
  std::deque<int> grads_in_flight_;  // slots, oldest first
  std::vector<ParamSlot> param_slots_;
  std::vector<WorkHandle> pending_;   // all-reduces of stages 0 and 1
  std::vector<int> pending_buckets_;  // their buckets (bf16 reduction widens them afterwards)
  uint16_t* reduce_lp_ = nullptr;     // stages 0/1, bf16 reduction: the gradients in bf16
  bool last_micro_batch_ = true;
  bool backward_ = false;
  int64_t clock_ = 0;
};

}  // namespace strata
