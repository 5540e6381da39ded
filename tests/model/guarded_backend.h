// GuardedBackend (tests only): the CPU kernels behind a Backend whose "device memory" the host
// cannot touch. Its DeviceMemory hands out page-aligned mmap'ed blocks that stay mprotect'ed
// PROT_NONE whenever control is outside a backend call; each Backend method unlocks every block
// (PROT_READ | PROT_WRITE), runs the CPU backend's version and locks them again. Model code that
// reads or writes a buffer of its device behind the backend's back then crashes (SIGSEGV) instead
// of silently working on the CPU, as it would not on a GPU.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "forwarding_backend.h"
#include "kernels/backend.h"

namespace strata::testing {

// Blocks are carved, page-aligned and never reused, from one mmap'ed reservation, so that locking
// or unlocking all of them is one mprotect of the range in use.
class GuardedMemory final : public DeviceMemory {
 public:
  explicit GuardedMemory(size_t reserve = size_t{1} << 30);
  ~GuardedMemory() override;
  GuardedMemory(const GuardedMemory&) = delete;
  GuardedMemory& operator=(const GuardedMemory&) = delete;

  void* allocate(size_t bytes, size_t align) override;  // zero-filled, locked unless in a call
  void free(void* ptr) override;
  std::string name() const override { return "guarded"; }

  // Unlocks every block on the first (outermost) call, locks them all on the last.
  void unlock();
  void lock();
  bool locked() const { return depth_ == 0; }
  // True for an address inside the blocks handed out (a "device" pointer of this memory).
  bool contains(const void* p) const {
    const char* c = static_cast<const char*>(p);
    return c >= base_ && c < base_ + used_;
  }
  int64_t unlocks() const { return unlocks_; }  // backend calls that reached the memory
  size_t blocks() const { return blocks_.size(); }

 private:
  void protect(int prot);
  char* base_ = nullptr;
  size_t reserved_ = 0, used_ = 0;  // bytes of the reservation, and its prefix handed out
  std::map<void*, size_t> blocks_;  // live blocks and their page-rounded sizes
  int depth_ = 0;
  int64_t unlocks_ = 0;
};

// Scoped unlock of a GuardedMemory (exception-safe).
class Unlocked {
 public:
  explicit Unlocked(GuardedMemory& memory) : memory_(memory) { memory_.unlock(); }
  ~Unlocked() { memory_.lock(); }
  Unlocked(const Unlocked&) = delete;
  Unlocked& operator=(const Unlocked&) = delete;

 private:
  GuardedMemory& memory_;
};

// The CPU kernels, forwarded, with the memory unlocked around each call. Copies go through the
// forwarded copy methods (which unlock too); host buffers are plain host memory (never locked).
class GuardedBackend : public ForwardingBackend {
 public:
  GuardedBackend() : ForwardingBackend(cpu_backend()) {}
  DeviceMemory* memory() override { return &memory_; }
  GuardedMemory& guarded_memory() { return memory_; }
  // The queue's copies are this backend's copy_to_host / copy_from_host, under the guard.
  std::unique_ptr<CopyQueue> make_copy_queue() override {
    return make_synchronous_copy_queue(*this);
  }
  bool supports_naive_attention() const override { return true; }

 protected:
  void enter() override { memory_.unlock(); }
  void leave() override { memory_.lock(); }

 private:
  GuardedMemory memory_;
};

}  // namespace strata::testing
