// ParamStore: every parameter of a model in one flat buffer, its gradient in a second one of the
// same layout, and a named view of each. Flat buffers are what a gradient-sync strategy buckets
// and shards, what the optimizer walks, and what a checkpoint slices by name.
//
// Layout: parameters are grouped (a group is a layer, or the embedding, or the head), and groups
// are laid out in the order backward finishes them: the head first, then the last layer down to
// the first, then the embedding. Inside a group, parameters keep their registration order, which
// is what makes q|k|v and gate|up adjacent so that one GEMM computes them together.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/arena.h"
#include "kernels/backend.h"
#include "model/shard.h"

namespace strata {

struct ParamInfo {
  std::string name;  // global name, e.g. "layers.3.attn.q.weight"
  int ndim = 0;
  std::array<int64_t, 4> shape{};
  int64_t numel = 0;
  int64_t offset = 0;         // in elements, into the flat buffers
  int group = 0;              // groups are laid out in descending order
  bool weight_decay = false;  // matrices decay; norms, biases and other 1-D params do not
  // Where this rank's block sits in the global tensor (model/shard.h); shape is the local shape.
  TensorSlice slice;
  std::array<int64_t, 4> global_shape{};
  int64_t global_numel() const;
  // Global element index (row-major in global_shape) of local element i.
  int64_t global_index(int64_t i) const;
};

// Copies a parameter's local block out of / into the whole global tensor (row-major).
void copy_local_to_global(const ParamInfo& p, const float* local, float* global);
void copy_global_to_local(const ParamInfo& p, const float* global, float* local);

// Parameters and gradients are reached through per-group base pointers, so that a sharding
// strategy (ZeRO-2/3) can bind a group to a gathered or staging buffer while it is in use; by
// default every group points into the resident flat buffers.
class ParamStore {
 public:
  // Registers a parameter; returns its index. Call before allocate().
  // `shape` is the local shape; `slice` says where it sits in the global tensor (default: it is
  // the whole tensor).
  int add(const std::string& name, std::initializer_list<int64_t> shape, int group,
          const TensorSlice& slice = {});
  // Assigns offsets (the flat buffers are padded to a multiple of `pad_to` elements) and
  // allocates the resident parameter and gradient buffers that are asked for; a strategy that
  // shards them (ZeRO-3 parameters, ZeRO-2/3 gradients) binds groups to its own buffers.
  // `backend`: the device the buffers live on (null: the CPU), which zero_grads goes through;
  // the arena's memory must be that backend's.
  void allocate(Arena& arena, Backend* backend = nullptr);
  // Offsets only, without allocating (for planning and sharding strategies).
  void plan_layout();
  // Zero elements left after group g's parameters in the flat layout (call before planning), so
  // that a sharding strategy's buckets divide evenly among ranks.
  void set_group_padding(int g, int64_t elements);
  // Which resident flat buffers allocate() creates (a ZeRO stage shards the others).
  void set_residency(bool params, bool grads) {
    resident_params_ = params;
    resident_grads_ = grads;
  }
  // Sizes of each group's parameters, known as soon as all are registered.
  std::vector<int64_t> group_sizes() const;

  int64_t size() const { return total_; }  // elements of the flat layout, padding included
  int count() const { return static_cast<int>(params_.size()); }
  const ParamInfo& info(int index) const { return params_[index]; }
  const std::vector<ParamInfo>& all() const { return params_; }
  int index_of(const std::string& name) const;  // throws naming the parameter when missing
  bool has(const std::string& name) const { return by_name_.count(name) != 0; }

  float* param(int index) const {
    const ParamInfo& p = params_[index];
    return group_params_[p.group] + (p.offset - group_offset_[p.group]);
  }
  float* grad(int index) const {
    const ParamInfo& p = params_[index];
    return group_grads_[p.group] + (p.offset - group_offset_[p.group]);
  }
  // The resident flat buffers (null when not allocated). param, grad, data, grads, group_params,
  // group_grads and param_tensor are DEVICE pointers of backend(): read or write them on the host
  // only when backend().memory() is null (host memory), otherwise through the backend.
  float* data() const { return data_; }
  float* grads() const { return grad_; }

  // Groups: contiguous ranges of the flat layout, group g at [group_offset(g), + group_size(g)).
  int num_groups() const { return static_cast<int>(group_offset_.size()); }
  int64_t group_offset(int g) const { return group_offset_[g]; }
  int64_t group_size(int g) const { return group_size_[g]; }
  // Points group g's parameters and/or gradients at other storage (null leaves one unchanged).
  void bind_group(int g, float* params, float* grads);
  float* group_params(int g) const { return group_params_[g]; }
  float* group_grads(int g) const { return group_grads_[g]; }
  Tensor param_tensor(int index) const;

  void zero_grads();  // through the backend
  Backend& backend() const { return *backend_; }

  // The category the resident parameter buffer is accounted in (mixed precision keeps f32
  // master weights here and a 16-bit working copy elsewhere: "master").
  void set_param_category(MemCategory c) { param_category_ = c; }
  // Bumped whenever the parameter values change (optimizer step, load), so that derived copies
  // (the 16-bit working weights) know when to refresh.
  int64_t version() const { return version_; }
  void bump_version() { ++version_; }

 private:
  std::vector<ParamInfo> params_;
  std::unordered_map<std::string, int> by_name_;
  int64_t total_ = 0;
  float* data_ = nullptr;
  float* grad_ = nullptr;
  std::vector<int64_t> group_offset_, group_size_;
  std::vector<float*> group_params_, group_grads_;
  std::vector<int64_t> group_padding_;
  bool planned_ = false;
  bool resident_params_ = true, resident_grads_ = true;
  MemCategory param_category_ = MemCategory::params;
  int64_t version_ = 0;
  Backend* backend_ = &cpu_backend();
};

}  // namespace strata
