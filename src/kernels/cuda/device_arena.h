// DeviceArena: the GPU twin of core/arena.h's Arena. Same per-category accounting (what the
// memory report and the planner read), same limit and freeze semantics, but on cudaMalloc, with a
// cache in front of it: cudaMalloc and cudaFree synchronise the device and cost milliseconds, so a
// released block is kept and handed out again to a later request of about its size.
//
// Accounting counts the bytes asked for (as Arena does), so MemStats agree with the planner;
// reserved_bytes() is what the arena holds from CUDA (rounded sizes, cached blocks included), the
// number to compare with nvidia-smi.
//
// allocate() synchronises the device: it zero-fills the block (like Arena), and a reused block may
// still be read by kernels queued on any stream before its release. That is fine for start-up
// allocation (DESIGN invariant 5: none in the step loop) and keeps release() free of stream
// bookkeeping.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string_view>
#include <unordered_map>

#include "core/arena.h"

namespace strata::cuda {

class DeviceArena {
 public:
  DeviceArena() = default;  // touches no CUDA state until the first allocation
  ~DeviceArena();           // frees every block, in use or cached
  DeviceArena(const DeviceArena&) = delete;
  DeviceArena& operator=(const DeviceArena&) = delete;

  // Zero-filled device memory (never managed memory), 256-byte aligned (cudaMalloc's guarantee).
  void* allocate(MemCategory category, size_t bytes, std::string_view what);
  // Returns the block to the cache (the memory stays reserved until empty_cache()).
  void release(void* ptr);

  template <typename T = float>
  T* alloc(MemCategory category, int64_t count, std::string_view what) {
    return static_cast<T*>(allocate(category, static_cast<size_t>(count) * sizeof(T), what));
  }

  // A limit on the total bytes in use (as Arena counts them); exceeding it is an out-of-memory
  // error that names the category. 0: no limit.
  void set_limit(int64_t bytes);
  int64_t limit() const;

  // After freeze(), allocations are still served but counted: the step loop must make none.
  void freeze();
  void unfreeze();
  int64_t allocations_after_freeze() const;

  MemStats stats() const;
  int64_t current(MemCategory c) const { return stats().current[static_cast<int>(c)]; }
  int64_t peak(MemCategory c) const { return stats().peak[static_cast<int>(c)]; }

  // Bytes held from CUDA: blocks in use and cached, at their rounded sizes.
  int64_t reserved_bytes() const;
  // Bytes of the cached (released, not yet reused) blocks.
  int64_t cached_bytes() const;
  // Gives every cached block back to CUDA.
  void empty_cache();

  // The size a request is served with: a multiple of 512 bytes below 1 MiB, of 2 MiB above, so
  // that released blocks fit later requests of nearby sizes.
  static size_t round_size(size_t bytes);

 private:
  struct Block {
    size_t bytes;  // asked for
    size_t size;   // held (rounded, or the larger cached block that served the request)
    MemCategory category;
  };
  void* take_cached(size_t size, size_t* got);  // mutex_ held
  void* device_malloc(size_t size, MemCategory category, size_t bytes, std::string_view what);
  void free_cached();  // mutex_ held

  mutable std::mutex mutex_;
  std::unordered_map<void*, Block> blocks_;  // in use
  std::multimap<size_t, void*> cache_;       // released, by size
  MemStats stats_;
  int64_t reserved_ = 0;
  int64_t cached_ = 0;
  int64_t limit_ = 0;
  bool frozen_ = false;
  int64_t allocs_after_freeze_ = 0;
};

}  // namespace strata::cuda
