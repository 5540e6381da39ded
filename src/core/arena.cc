#include "core/arena.h"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>

namespace strata {

namespace {
constexpr size_t kHugePage = size_t{2} << 20;
}

Arena::~Arena() {
  for (auto& [ptr, block] : blocks_) memory_ ? memory_->free(ptr) : std::free(ptr);
}

void* Arena::allocate(MemCategory category, size_t bytes, std::string_view what) {
  std::lock_guard<std::mutex> lock(mutex_);
  const int c = static_cast<int>(category);
  if (limit_ > 0 && stats_.total_current + static_cast<int64_t>(bytes) > limit_) {
    fail("out of memory: allocating ", bytes, " bytes for ", what, " in category '",
         mem_category_name(category), "' would bring the total to ",
         stats_.total_current + static_cast<int64_t>(bytes), " bytes, over the limit of ", limit_,
         " bytes (", mem_category_name(category), " holds ", stats_.current[c],
         " bytes now). Reduce the model, batch or sequence length, or raise the memory limit.");
  }
  if (frozen_) ++allocs_after_freeze_;
  const size_t align = bytes >= kHugePage ? kHugePage : 64;
  const size_t rounded = (std::max<size_t>(bytes, 1) + align - 1) / align * align;
  void* ptr = nullptr;
  if (memory_) {
    ptr = memory_->allocate(rounded, align);
  } else {
    ptr = std::aligned_alloc(align, rounded);
    STRATA_CHECK(ptr != nullptr, "out of memory: the system refused ", rounded, " bytes for ", what,
                 " (category ", mem_category_name(category), ")");
    if (align == kHugePage) madvise(ptr, rounded, MADV_HUGEPAGE);
    std::memset(ptr, 0, rounded);  // first touch now, at start-up, not inside the step loop
  }
  blocks_[ptr] = Block{bytes, category};
  stats_.current[c] += static_cast<int64_t>(bytes);
  stats_.total_current += static_cast<int64_t>(bytes);
  stats_.peak[c] = std::max(stats_.peak[c], stats_.current[c]);
  stats_.total_peak = std::max(stats_.total_peak, stats_.total_current);
  return ptr;
}

void Arena::release(void* ptr) {
  if (ptr == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = blocks_.find(ptr);
  STRATA_CHECK(it != blocks_.end(), "Arena::release: pointer not owned by this arena");
  const int c = static_cast<int>(it->second.category);
  stats_.current[c] -= static_cast<int64_t>(it->second.bytes);
  stats_.total_current -= static_cast<int64_t>(it->second.bytes);
  blocks_.erase(it);
  memory_ ? memory_->free(ptr) : std::free(ptr);
}

Tensor Arena::tensor(MemCategory category, DType dtype, std::initializer_list<int64_t> dims,
                     std::string_view what) {
  Tensor t(nullptr, dtype, dims);
  t.data = allocate(category, t.bytes(), what);
  return t;
}

MemStats Arena::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

}  // namespace strata
