// Tensor: a non-owning, typed view into storage that an Arena owns. Up to 4 dimensions, row-major
// (contiguous) unless strides say otherwise. Copying a Tensor copies the view, never the data.
#pragma once
#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "core/dtype.h"
#include "core/enum_names.h"
#include "core/error.h"

namespace strata {

// Where memory lives and kernels run: the one device enum (tensors, backends, the trainer).
enum class Device : uint8_t { cpu, cuda };
template <>
struct EnumNames<Device> {
  static constexpr std::string_view names[] = {"cpu", "cuda"};  // system.device
};
inline const char* device_name(Device d) {  // "cpu", "cuda"
  return enum_name(d).data();
}

struct Tensor {
  static constexpr int kMaxDims = 4;

  void* data = nullptr;
  DType dtype = DType::f32;
  Device device = Device::cpu;
  int ndim = 0;
  std::array<int64_t, kMaxDims> shape{};
  std::array<int64_t, kMaxDims> strides{};  // in elements

  Tensor() = default;
  Tensor(void* ptr, DType t, std::initializer_list<int64_t> dims, Device dev = Device::cpu)
      : data(ptr), dtype(t), device(dev) {
    STRATA_CHECK(dims.size() <= kMaxDims, "Tensor: at most ", kMaxDims, " dimensions");
    ndim = static_cast<int>(dims.size());
    int i = 0;
    for (int64_t d : dims) shape[i++] = d;
    int64_t s = 1;
    for (int k = ndim - 1; k >= 0; --k) {
      strides[k] = s;
      s *= shape[k];
    }
  }

  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < ndim; ++i) n *= shape[i];
    return n;
  }
  size_t bytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
  bool contiguous() const {
    int64_t s = 1;
    for (int k = ndim - 1; k >= 0; --k) {
      if (strides[k] != s) return false;
      s *= shape[k];
    }
    return true;
  }

  float* f32() const {
    STRATA_CHECK(dtype == DType::f32, "Tensor: expected f32, found ", dtype_name(dtype));
    return static_cast<float*>(data);
  }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data);
  }

  std::string shape_str() const {
    std::string s = "[";
    for (int i = 0; i < ndim; ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + "]";
  }
};

}  // namespace strata
