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

namespace strata {

struct ParamInfo {
  std::string name;           // global name, e.g. "layers.3.attn.q.weight"
  int ndim = 0;
  std::array<int64_t, 4> shape{};
  int64_t numel = 0;
  int64_t offset = 0;         // in elements, into the flat buffers
  int group = 0;              // groups are laid out in descending order
  bool weight_decay = false;  // matrices decay; norms, biases and other 1-D params do not
};

class ParamStore {
 public:
  // Registers a parameter; returns its index. Call before allocate().
  int add(const std::string& name, std::initializer_list<int64_t> shape, int group);
  // Assigns offsets and allocates the parameter and gradient buffers.
  void allocate(Arena& arena);

  int64_t size() const { return total_; }
  int count() const { return static_cast<int>(params_.size()); }
  const ParamInfo& info(int index) const { return params_[index]; }
  const std::vector<ParamInfo>& all() const { return params_; }
  int index_of(const std::string& name) const;  // throws naming the parameter when missing
  bool has(const std::string& name) const { return by_name_.count(name) != 0; }

  float* param(int index) const { return data_ + params_[index].offset; }
  float* grad(int index) const { return grad_ + params_[index].offset; }
  float* data() const { return data_; }
  float* grads() const { return grad_; }
  Tensor param_tensor(int index) const;

  void zero_grads();

 private:
  std::vector<ParamInfo> params_;
  std::unordered_map<std::string, int> by_name_;
  int64_t total_ = 0;
  float* data_ = nullptr;
  float* grad_ = nullptr;
};

}  // namespace strata
