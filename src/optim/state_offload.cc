#include "optim/state_offload.h"

#include "core/error.h"

namespace strata {

void sort_and_check_segments(std::vector<OptimSegment>& segments, int64_t state_size,
                             const char* who) {
  // Sorted once, so that each chunk finds its segments by walking forward from a cursor.
  std::sort(segments.begin(), segments.end(), [](const OptimSegment& a, const OptimSegment& b) {
    return a.state_offset < b.state_offset;
  });
  int64_t previous_end = 0;
  for (const OptimSegment& s : segments) {
    STRATA_CHECK(s.count >= 0 && s.state_offset >= 0 && s.state_offset + s.count <= state_size, who,
                 ": segment at state offset ", s.state_offset, " with ", s.count,
                 " elements does not fit in the state of ", state_size, " elements");
    STRATA_CHECK(s.count == 0 || s.state_offset >= previous_end, who,
                 ": segments overlap at state offset ", s.state_offset,
                 "; each state element belongs to at most one segment");
    STRATA_CHECK(s.count == 0 || (s.param != nullptr && s.grad != nullptr), who,
                 ": segment at state offset ", s.state_offset, " has no param or grad buffer");
    previous_end = std::max(previous_end, s.state_offset + s.count);
  }
}

}  // namespace strata
