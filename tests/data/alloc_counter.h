// Heap allocations made so far by this test binary (alloc_counter.cc replaces operator new), so
// a test can assert that a hot path allocates nothing.
#pragma once
#include <cstdint>

namespace strata::data::testing {
// -1 where the count is not kept (the ThreadSanitizer build, whose runtime owns operator new).
int64_t allocation_count();
}  // namespace strata::data::testing
