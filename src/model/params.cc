#include "model/params.h"

#include <algorithm>
#include <cstring>
#include <numeric>

namespace strata {

int64_t ParamInfo::global_numel() const {
  int64_t n = 1;
  for (int k = 0; k < ndim; ++k) n *= global_shape[k];
  return n;
}

int64_t ParamInfo::global_index(int64_t i) const {
  if (slice.dim < 0) return i;
  // Elements per index of the sliced dimension (the product of the dimensions after it).
  int64_t inner = 1;
  for (int k = slice.dim + 1; k < ndim; ++k) inner *= shape[k];
  const int64_t local_extent = shape[slice.dim] * inner;
  const int64_t outer = i / local_extent, rest = i % local_extent;
  return outer * slice.global * inner + slice.begin * inner + rest;
}

namespace {
// Calls fn(local_offset, global_offset, count) for each contiguous run of a local block.
template <typename Fn>
void for_each_run(const ParamInfo& p, Fn fn) {
  if (p.slice.dim < 0) {
    fn(int64_t{0}, int64_t{0}, p.numel);
    return;
  }
  int64_t inner = 1;
  for (int k = p.slice.dim + 1; k < p.ndim; ++k) inner *= p.shape[k];
  const int64_t run = p.shape[p.slice.dim] * inner;
  for (int64_t local = 0; local < p.numel; local += run) fn(local, p.global_index(local), run);
}
}  // namespace

void copy_local_to_global(const ParamInfo& p, const float* local, float* global) {
  for_each_run(
      p, [&](int64_t l, int64_t g, int64_t n) { std::copy(local + l, local + l + n, global + g); });
}

void copy_global_to_local(const ParamInfo& p, const float* global, float* local) {
  for_each_run(p, [&](int64_t l, int64_t g, int64_t n) {
    std::copy(global + g, global + g + n, local + l);
  });
}

int ParamStore::add(const std::string& name, std::initializer_list<int64_t> shape, int group,
                    const TensorSlice& slice) {
  STRATA_CHECK(!planned_, "ParamStore: '", name, "' registered after allocation");
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
  p.slice = slice;
  p.global_shape = p.shape;
  if (slice.dim >= 0) {
    STRATA_CHECK(
        slice.dim < p.ndim && slice.begin >= 0 && slice.begin + p.shape[slice.dim] <= slice.global,
        "ParamStore: slice of '", name, "' lies outside its global tensor");
    p.global_shape[slice.dim] = slice.global;
  }
  by_name_[name] = static_cast<int>(params_.size());
  params_.push_back(p);
  return static_cast<int>(params_.size()) - 1;
}

void ParamStore::plan_layout() {
  if (planned_) return;
  // Stable sort of indices by descending group: backward-completion order, registration order
  // inside a group.
  std::vector<int> order(params_.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return params_[a].group > params_[b].group; });
  int groups = 0;
  for (const ParamInfo& p : params_) groups = std::max(groups, p.group + 1);
  group_offset_.assign(static_cast<size_t>(groups), 0);
  group_size_.assign(static_cast<size_t>(groups), 0);
  total_ = 0;
  int previous = -1;
  for (int idx : order) {
    ParamInfo& p = params_[idx];
    if (p.group != previous) {
      if (previous >= 0 && previous < static_cast<int>(group_padding_.size()))
        total_ += group_padding_[previous];
      group_offset_[p.group] = total_;
      previous = p.group;
    }
    p.offset = total_;
    group_size_[p.group] += p.numel;
    total_ += p.numel;
  }
  if (previous >= 0 && previous < static_cast<int>(group_padding_.size()))
    total_ += group_padding_[previous];
  group_params_.assign(static_cast<size_t>(groups), nullptr);
  group_grads_.assign(static_cast<size_t>(groups), nullptr);
  planned_ = true;
}

void ParamStore::set_group_padding(int g, int64_t elements) {
  STRATA_CHECK(!planned_, "ParamStore: padding set after the layout was planned");
  if (g >= static_cast<int>(group_padding_.size()))
    group_padding_.resize(static_cast<size_t>(g) + 1, 0);
  group_padding_[g] = elements;
}

std::vector<int64_t> ParamStore::group_sizes() const {
  int groups = 0;
  for (const ParamInfo& p : params_) groups = std::max(groups, p.group + 1);
  std::vector<int64_t> sizes(static_cast<size_t>(groups), 0);
  for (const ParamInfo& p : params_) sizes[p.group] += p.numel;
  return sizes;
}

void ParamStore::allocate(Arena& arena, Backend* backend) {
  backend_ = backend ? backend : &cpu_backend();
  STRATA_CHECK(arena.memory() == backend_->memory(), "ParamStore: the arena's memory is not the ",
               device_name(backend_->kind()), " backend's");
  plan_layout();
  if (resident_params_) data_ = arena.alloc<float>(param_category_, total_, "parameters");
  if (resident_grads_) grad_ = arena.alloc<float>(MemCategory::grads, total_, "gradients");
  for (int g = 0; g < num_groups(); ++g) {
    group_params_[g] = data_ ? data_ + group_offset_[g] : nullptr;
    group_grads_[g] = grad_ ? grad_ + group_offset_[g] : nullptr;
  }
}

void ParamStore::bind_group(int g, float* params, float* grads) {
  if (params) group_params_[g] = params;
  if (grads) group_grads_[g] = grads;
}

int ParamStore::index_of(const std::string& name) const {
  auto it = by_name_.find(name);
  STRATA_CHECK(it != by_name_.end(), "no parameter named '", name, "' in this model");
  return it->second;
}

Tensor ParamStore::param_tensor(int index) const {
  const ParamInfo& p = params_[index];
  Tensor t(param(index), DType::f32, {}, backend_->kind());
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
  if (!grad_) return;
  if (backend_->memory() != nullptr) {  // device memory
    backend_->zero(grad_, static_cast<size_t>(total_) * sizeof(float));
    return;
  }
  // Host memory, written in place. Parallel: a large buffer cleared by one thread costs tens of
  // milliseconds per step.
#pragma omp parallel for schedule(static)
  for (int64_t chunk = 0; chunk < (total_ + 65535) / 65536; ++chunk) {
    const int64_t begin = chunk * 65536, n = std::min<int64_t>(65536, total_ - begin);
    std::memset(grad_ + begin, 0, static_cast<size_t>(n) * sizeof(float));
  }
}

}  // namespace strata
