// Arena: owns every large buffer of a run and accounts bytes per category, so that the memory
// report (and, later, the planner) can say where memory goes. Buffers are planned at start-up;
// once `freeze()` is called, any further allocation is counted as a steady-state allocation,
// which tests assert to be zero (DESIGN invariant 5).
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

#include "core/tensor.h"

namespace strata {

enum class MemCategory : uint8_t { params, grads, master, optimizer, activations, comm, workspace };
constexpr int kNumMemCategories = 7;

constexpr std::string_view mem_category_name(MemCategory c) {
  constexpr std::array<std::string_view, kNumMemCategories> names = {
      "params", "grads", "master", "optimizer", "activations", "comm", "workspace"};
  return names[static_cast<int>(c)];
}

struct MemStats {
  std::array<int64_t, kNumMemCategories> current{};
  std::array<int64_t, kNumMemCategories> peak{};
  int64_t total_current = 0;
  int64_t total_peak = 0;
};

// Where an Arena's memory comes from when it is not host memory: a GPU backend's device memory
// (kernels/cuda). allocate returns zero-filled memory aligned to `align`, or throws.
class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  virtual void* allocate(size_t bytes, size_t align) = 0;
  virtual void free(void* ptr) = 0;
  virtual std::string name() const = 0;  // "cuda:0", for messages
};

class Arena {
 public:
  // memory: null for host memory; otherwise every buffer comes from it (a model on a GPU), with
  // the same accounting, limit and freeze rules.
  explicit Arena(DeviceMemory* memory = nullptr) : memory_(memory) {}
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  // Returns zero-filled, 64-byte aligned memory (2 MiB aligned and huge-page advised when large).
  void* allocate(MemCategory category, size_t bytes, std::string_view what);
  void release(void* ptr);

  template <typename T = float>
  T* alloc(MemCategory category, int64_t count, std::string_view what) {
    return static_cast<T*>(allocate(category, static_cast<size_t>(count) * sizeof(T), what));
  }
  Tensor tensor(MemCategory category, DType dtype, std::initializer_list<int64_t> dims,
                std::string_view what);

  // A limit on the total bytes; exceeding it is an out-of-memory error that names the category.
  void set_limit(int64_t bytes) { limit_ = bytes; }
  int64_t limit() const { return limit_; }

  // After freeze(), allocations are still served but counted: the step loop must make none.
  void freeze() { frozen_ = true; }
  void unfreeze() { frozen_ = false; }
  int64_t allocations_after_freeze() const { return allocs_after_freeze_; }
  DeviceMemory* memory() const { return memory_; }  // null: host memory

  MemStats stats() const;
  int64_t current(MemCategory c) const { return stats().current[static_cast<int>(c)]; }
  int64_t peak(MemCategory c) const { return stats().peak[static_cast<int>(c)]; }

 private:
  struct Block {
    size_t bytes;
    MemCategory category;
  };
  DeviceMemory* memory_ = nullptr;
  mutable std::mutex mutex_;
  std::unordered_map<void*, Block> blocks_;
  MemStats stats_;
  int64_t limit_ = 0;
  bool frozen_ = false;
  int64_t allocs_after_freeze_ = 0;
};

// Bytes per category (MemCategory order).
using MemBytes = std::array<int64_t, kNumMemCategories>;

// Counts what an Arena would hold without allocating anything: code that plans buffers is written
// once against "an arena" (a template parameter, Arena or MemCounter), so that the planner
// (plan/memory_model.cc) sizes them exactly as the allocation does. alloc returns null.
class MemCounter {
 public:
  template <typename T = float>
  T* alloc(MemCategory category, int64_t count, std::string_view /*what*/) {
    bytes_[static_cast<int>(category)] += count * static_cast<int64_t>(sizeof(T));
    return nullptr;
  }
  const MemBytes& bytes() const { return bytes_; }

 private:
  MemBytes bytes_{};
};

}  // namespace strata
