#include "model/params.h"

#include <algorithm>
#include <cstring>
#include <numeric>

namespace strata {

int ParamStore::add(const std::string& name, std::initializer_list<int64_t> shape, int group) {
  STRATA_CHECK(data_ == nullptr, "ParamStore: '", name, "' registered after allocation");
  STRATA_CHECK(!by_name_.count(name), "ParamStore: parameter '", name, "' registered twice");
  ParamInfo p;
  p.name = name;
  p.ndim = static_cast<int>(shape.size());
  p.numel = 1;
  int i = 0;
  for (int64_t d : shape) {
    p.shape[i++] = d;
    p.numel *= d;
  }
  p.group = group;
  p.weight_decay = p.ndim >= 2;
  by_name_[name] = static_cast<int>(params_.size());
  params_.push_back(p);
  return static_cast<int>(params_.size()) - 1;
}

void ParamStore::allocate(Arena& arena) {
  // Stable sort of indices by descending group: backward-completion order, registration order
  // inside a group.
  std::vector<int> order(params_.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return params_[a].group > params_[b].group; });
  total_ = 0;
  for (int idx : order) {
    params_[idx].offset = total_;
    total_ += params_[idx].numel;
  }
  data_ = arena.alloc<float>(MemCategory::params, total_, "parameters");
  grad_ = arena.alloc<float>(MemCategory::grads, total_, "gradients");
}

int ParamStore::index_of(const std::string& name) const {
  auto it = by_name_.find(name);
  STRATA_CHECK(it != by_name_.end(), "no parameter named '", name, "' in this model");
  return it->second;
}

Tensor ParamStore::param_tensor(int index) const {
  const ParamInfo& p = params_[index];
  Tensor t(param(index), DType::f32, {});
  t.ndim = p.ndim;
  int64_t stride = 1;
  for (int k = p.ndim - 1; k >= 0; --k) {
    t.shape[k] = p.shape[k];
    t.strides[k] = stride;
    stride *= p.shape[k];
  }
  return t;
}

void ParamStore::zero_grads() {
  std::memset(grad_, 0, static_cast<size_t>(total_) * sizeof(float));
}

}  // namespace strata
