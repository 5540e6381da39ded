#include "model/guarded_backend.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>

#include "core/error.h"

namespace strata::testing {

namespace {
size_t page_size() {
  return static_cast<size_t>(sysconf(_SC_PAGESIZE));
}
size_t round_up(size_t x, size_t to) {
  return (x + to - 1) / to * to;
}
}  // namespace

GuardedMemory::GuardedMemory(size_t reserve) : reserved_(round_up(reserve, page_size())) {
  void* base =
      mmap(nullptr, reserved_, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  STRATA_CHECK(base != MAP_FAILED, "GuardedMemory: cannot reserve ", reserved_, " bytes");
  base_ = static_cast<char*>(base);
}

GuardedMemory::~GuardedMemory() {
  munmap(base_, reserved_);
}

void* GuardedMemory::allocate(size_t bytes, size_t align) {
  const size_t page = page_size();
  const size_t begin = round_up(used_, std::max(align, page));
  const size_t size = round_up(std::max<size_t>(bytes, 1), page);
  STRATA_CHECK(begin + size <= reserved_, "GuardedMemory: out of its ", reserved_,
               "-byte reservation (", bytes, " bytes asked for)");
  used_ = begin + size;
  char* ptr = base_ + begin;
  blocks_[ptr] = size;
  // Fresh anonymous pages read as zero; PROT_NONE until a backend call unlocks them.
  if (!locked()) STRATA_CHECK(mprotect(ptr, size, PROT_READ | PROT_WRITE) == 0, "mprotect failed");
  return ptr;
}

void GuardedMemory::free(void* ptr) {
  auto it = blocks_.find(ptr);
  STRATA_CHECK(it != blocks_.end(), "GuardedMemory: free of an unknown pointer");
  madvise(ptr, it->second, MADV_DONTNEED);  // never handed out again
  blocks_.erase(it);
}

void GuardedMemory::protect(int prot) {
  if (used_ > 0) STRATA_CHECK(mprotect(base_, used_, prot) == 0, "GuardedMemory: mprotect failed");
}

void GuardedMemory::unlock() {
  if (depth_++ == 0) {
    ++unlocks_;
    protect(PROT_READ | PROT_WRITE);
  }
}

void GuardedMemory::lock() {
  if (--depth_ == 0) protect(PROT_NONE);
}

}  // namespace strata::testing
