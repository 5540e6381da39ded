// What the offloaded AdamWs share (optim/offload.h: state in files; optim/host_offload.h: state in
// host memory beside a GPU): the walk of the optimizer segments in state-layout chunks that both
// stream the state by. The interface the trainer steps them through is optim/optimizer.h.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "optim/adamw.h"
#include "optim/optimizer.h"

namespace strata {

// AdamW whose f32 master weights and Adam moments live away from the model's memory. The state
// layout is AdamW's (OptimSegment::state_offset); every update is bitwise AdamW's on the same
// inputs, and the segments' params are refreshed from the master values after it.
class OffloadedOptimizer : public Optimizer {
 public:
  bool state_in_model_memory() const final { return false; }
};

// Sorts the segments by state_offset and checks that they fit in the state and do not overlap;
// `who` names the optimizer in the error.
void sort_and_check_segments(std::vector<OptimSegment>& segments, int64_t state_size,
                             const char* who);

// Calls fn(segment, lo, hi) for every segment overlapping state elements [begin, end), with
// [lo, hi) the overlap. `cursor` walks the sorted segments forward: passes over increasing ranges
// share one (start it at 0).
template <typename Fn>
void for_each_overlap(const std::vector<OptimSegment>& segments, int64_t begin, int64_t end,
                      size_t& cursor, Fn fn) {
  while (cursor < segments.size() &&
         segments[cursor].state_offset + segments[cursor].count <= begin)
    ++cursor;
  for (size_t j = cursor; j < segments.size() && segments[j].state_offset < end; ++j) {
    const OptimSegment& s = segments[j];
    const int64_t lo = std::max(begin, s.state_offset);
    const int64_t hi = std::min(end, s.state_offset + s.count);
    if (lo < hi) fn(s, lo, hi);
  }
}

}  // namespace strata
