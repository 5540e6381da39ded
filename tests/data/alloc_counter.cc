// Replaces the global operator new/delete with counting versions. Kept in its own file so the
// compiler never inlines them into callers (GCC then misreports new/free mismatches). Every
// plain and nothrow form is replaced, so sanitizers never pair our malloc with their delete.
#include "alloc_counter.h"

#include <atomic>
#include <cstdlib>
#include <new>

// ThreadSanitizer's runtime defines every operator new and delete itself (its allocator tracks
// them), so the TSan build (scripts/test_tsan.sh) keeps its own and counts nothing.
#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define STRATA_NO_ALLOC_COUNTER 1
#endif
#endif

#ifdef STRATA_NO_ALLOC_COUNTER
namespace strata::data::testing {
int64_t allocation_count() {
  return -1;
}
}  // namespace strata::data::testing
#else

namespace {
std::atomic<int64_t> g_allocations{0};

void* counted_malloc(size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  return std::malloc(n ? n : 1);
}
}  // namespace

void* operator new(size_t n) {
  if (void* p = counted_malloc(n)) return p;
  throw std::bad_alloc();
}
void* operator new[](size_t n) {
  return operator new(n);
}
void* operator new(size_t n, const std::nothrow_t&) noexcept {
  return counted_malloc(n);
}
void* operator new[](size_t n, const std::nothrow_t&) noexcept {
  return counted_malloc(n);
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete[](void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, size_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, size_t) noexcept {
  std::free(p);
}
void operator delete(void* p, const std::nothrow_t&) noexcept {
  std::free(p);
}
void operator delete[](void* p, const std::nothrow_t&) noexcept {
  std::free(p);
}

namespace strata::data::testing {
int64_t allocation_count() {
  return g_allocations.load();
}
}  // namespace strata::data::testing
#endif  // STRATA_NO_ALLOC_COUNTER
