#include "kernels/cuda/device_arena.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "kernels/cuda/cuda_check.h"

namespace strata::cuda {

namespace {

constexpr size_t kSmallGranularity = 512;
constexpr size_t kLargeGranularity = size_t{2} << 20;
constexpr size_t kSmallLimit = size_t{1} << 20;

std::string held_by_category(const MemStats& stats) {
  std::string out;
  for (int c = 0; c < kNumMemCategories; ++c) {
    if (!out.empty()) out += ", ";
    out += cat(mem_category_name(static_cast<MemCategory>(c)), " ", stats.current[c]);
  }
  return out;
}

}  // namespace

DeviceArena::~DeviceArena() {
  // No throwing from a destructor: a failing cudaFree here (driver shutting down) changes nothing.
  for (auto& [ptr, block] : blocks_) cudaFree(ptr);
  for (auto& [size, ptr] : cache_) cudaFree(ptr);
}

size_t DeviceArena::round_size(size_t bytes) {
  const size_t g = bytes < kSmallLimit ? kSmallGranularity : kLargeGranularity;
  return (std::max<size_t>(bytes, 1) + g - 1) / g * g;
}

void* DeviceArena::allocate(MemCategory category, size_t bytes, std::string_view what) {
  std::lock_guard<std::mutex> lock(mutex_);
  const int c = static_cast<int>(category);
  if (limit_ > 0 && stats_.total_current + static_cast<int64_t>(bytes) > limit_) {
    fail("out of memory: allocating ", bytes, " bytes of GPU memory for ", what, " in category '",
         mem_category_name(category), "' would bring the total to ",
         stats_.total_current + static_cast<int64_t>(bytes), " bytes, over the limit of ", limit_,
         " bytes (", mem_category_name(category), " holds ", stats_.current[c],
         " bytes now). Reduce the model, batch or sequence length, or raise the memory limit.");
  }
  if (frozen_) ++allocs_after_freeze_;
  const size_t size = round_size(bytes);
  size_t got = 0;
  void* ptr = take_cached(size, &got);
  if (ptr == nullptr) {
    ptr = device_malloc(size, category, bytes, what);
    got = size;
  }
  // A cached block may still be in use by kernels queued before its release, on any stream: let
  // them finish before zeroing it, and finish the zeroing (on the legacy stream, which
  // non-blocking streams do not wait for) before the caller's streams can touch the block.
  STRATA_CUDA_CHECK(cudaDeviceSynchronize());
  STRATA_CUDA_CHECK(cudaMemset(ptr, 0, got));
  STRATA_CUDA_CHECK(cudaDeviceSynchronize());
  blocks_[ptr] = Block{bytes, got, category};
  stats_.current[c] += static_cast<int64_t>(bytes);
  stats_.total_current += static_cast<int64_t>(bytes);
  stats_.peak[c] = std::max(stats_.peak[c], stats_.current[c]);
  stats_.total_peak = std::max(stats_.total_peak, stats_.total_current);
  return ptr;
}

void* DeviceArena::take_cached(size_t size, size_t* got) {
  // The smallest cached block that fits, unless it would waste more than a quarter of the request
  // (a 1 GiB block must not serve a 512-byte bias).
  auto it = cache_.lower_bound(size);
  if (it == cache_.end() || it->first > size + size / 4) return nullptr;
  void* ptr = it->second;
  *got = it->first;
  cached_ -= static_cast<int64_t>(it->first);
  cache_.erase(it);
  return ptr;
}

void* DeviceArena::device_malloc(size_t size, MemCategory category, size_t bytes,
                                 std::string_view what) {
  void* ptr = nullptr;
  cudaError_t err = cudaMalloc(&ptr, size);
  if (err == cudaErrorMemoryAllocation && !cache_.empty()) {
    cudaGetLastError();  // an allocation failure is not sticky, but it is the "last error"
    free_cached();
    err = cudaMalloc(&ptr, size);
  }
  if (err == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    size_t free_bytes = 0, total_bytes = 0;
    const bool have_info = cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess;
    cudaGetLastError();
    fail("out of GPU memory: cudaMalloc of ", size, " bytes (", bytes, " asked) for ", what,
         " in category '", mem_category_name(category),
         "' failed (the arena's cache was emptied first). The arena holds, in bytes by category: ",
         held_by_category(stats_), " (", reserved_, " reserved from CUDA). ",
         have_info ? cat("The device has ", free_bytes, " bytes free of ", total_bytes, ".")
                   : std::string("cudaMemGetInfo failed too."),
         " Reduce the model, batch or sequence length, or shard more (ZeRO, tensor parallel).");
  }
  if (err != cudaSuccess) fail_cuda(err, "cudaMalloc(&ptr, size)", __FILE__, __LINE__);
  reserved_ += static_cast<int64_t>(size);
  return ptr;
}

void DeviceArena::release(void* ptr) {
  if (ptr == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = blocks_.find(ptr);
  STRATA_CHECK(it != blocks_.end(), "DeviceArena::release: pointer not owned by this arena");
  const Block block = it->second;
  const int c = static_cast<int>(block.category);
  stats_.current[c] -= static_cast<int64_t>(block.bytes);
  stats_.total_current -= static_cast<int64_t>(block.bytes);
  blocks_.erase(it);
  cache_.emplace(block.size, ptr);
  cached_ += static_cast<int64_t>(block.size);
}

void DeviceArena::free_cached() {
  for (auto& [size, ptr] : cache_) {
    STRATA_CUDA_CHECK(cudaFree(ptr));
    reserved_ -= static_cast<int64_t>(size);
  }
  cache_.clear();
  cached_ = 0;
}

void DeviceArena::empty_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  free_cached();
}

void DeviceArena::set_limit(int64_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  limit_ = bytes;
}

int64_t DeviceArena::limit() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return limit_;
}

void DeviceArena::freeze() {
  std::lock_guard<std::mutex> lock(mutex_);
  frozen_ = true;
}

void DeviceArena::unfreeze() {
  std::lock_guard<std::mutex> lock(mutex_);
  frozen_ = false;
}

int64_t DeviceArena::allocations_after_freeze() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return allocs_after_freeze_;
}

MemStats DeviceArena::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

int64_t DeviceArena::reserved_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return reserved_;
}

int64_t DeviceArena::cached_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return cached_;
}

}  // namespace strata::cuda
