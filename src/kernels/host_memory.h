// HostMemory: a backend's page-locked host memory (Backend::alloc_host) as the DeviceMemory of an
// Arena, so that the host side of an offload is planned and accounted per category exactly like
// the device side, in an Arena of its own ("host arena"): what moves off the device shows up
// there instead of in the model's arena.
#pragma once
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>

#include "core/arena.h"
#include "core/error.h"
#include "kernels/backend.h"

namespace strata {

class HostMemory final : public DeviceMemory {
 public:
  explicit HostMemory(Backend& backend) : backend_(backend) {}
  ~HostMemory() override {
    for (auto& [ptr, base] : blocks_) backend_.free_host(base);
  }
  HostMemory(const HostMemory&) = delete;
  HostMemory& operator=(const HostMemory&) = delete;

  // Arena asks for up to 2 MiB alignment (large blocks); alloc_host guarantees kHostAlignment, so
  // a larger alignment takes that much more and aligns inside the block.
  void* allocate(size_t bytes, size_t align) override {
    STRATA_CHECK(align > 0 && (align & (align - 1)) == 0, "HostMemory: alignment ", align,
                 " is not a power of two");
    const size_t extra = align > Backend::kHostAlignment ? align : 0;
    void* base = backend_.alloc_host(bytes + extra);
    const uintptr_t a = (reinterpret_cast<uintptr_t>(base) + align - 1) / align * align;
    void* ptr = reinterpret_cast<void*>(a);
    const std::lock_guard<std::mutex> lock(mutex_);
    blocks_[ptr] = base;
    return ptr;
  }
  void free(void* ptr) override {
    if (ptr == nullptr) return;
    const std::lock_guard<std::mutex> lock(mutex_);
    const auto it = blocks_.find(ptr);
    if (it == blocks_.end()) return;  // not ours: Arena never hands such a pointer back
    backend_.free_host(it->second);
    blocks_.erase(it);
  }
  std::string name() const override { return cat("host (", device_name(backend_.kind()), ")"); }

 private:
  Backend& backend_;
  std::mutex mutex_;
  std::unordered_map<void*, void*> blocks_;  // pointer handed out -> alloc_host's pointer
};

}  // namespace strata
