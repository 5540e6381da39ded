#include "model/expert_parallel.h"

#include <algorithm>

#include "core/error.h"

namespace strata {

ExpertParallel::ExpertParallel(Comm* comm)
    : comm_(comm), size_(comm ? comm->size() : 1), rank_(comm ? comm->rank() : 0) {}

int64_t ExpertParallel::max_rows(int64_t n, int64_t k, int64_t e, int ep, int64_t capacity) {
  if (ep <= 1) return n * k;
  const int64_t el = e / ep;
  int64_t per_source = n * std::min(k, el);
  if (capacity > 0) per_source = std::min(per_source, el * capacity);
  return ep * per_source;
}

void ExpertParallel::gather_counts(const int64_t* offsets, int64_t e, int32_t* counts) const {
  std::vector<int32_t> mine(static_cast<size_t>(e));
  for (int64_t x = 0; x < e; ++x) mine[x] = static_cast<int32_t>(offsets[x + 1] - offsets[x]);
  if (!active()) {
    std::copy(mine.begin(), mine.end(), counts);
    return;
  }
  comm_->all_gather(mine.data(), counts, e, DType::i32)->wait();
}

ExpertParallel::Exchange ExpertParallel::plan(const int32_t* counts, int64_t e, int64_t width,
                                              int64_t* local_offsets, int32_t* sort,
                                              int32_t* unsort) const {
  const int64_t el = e / size_, first = rank_ * el;
  auto count = [&](int src, int64_t x) { return static_cast<int64_t>(counts[src * e + x]); };
  Exchange ex;
  ex.send.assign(static_cast<size_t>(size_), 0);
  ex.recv.assign(static_cast<size_t>(size_), 0);
  for (int j = 0; j < size_; ++j)
    for (int64_t x = j * el; x < (j + 1) * el; ++x) ex.send[j] += count(rank_, x) * width;
  for (int src = 0; src < size_; ++src) {
    for (int64_t x = 0; x < el; ++x) ex.recv[src] += count(src, first + x) * width;
    ex.rows_in += ex.recv[src] / std::max<int64_t>(width, 1);
  }
  if (!local_offsets) return ex;
  // Source-major: source src's block starts at source_start[src]; inside it, expert x's rows
  // follow those of the experts before it. Expert-major: expert x's rows start at
  // local_offsets[x]; inside them, the sources in rank order.
  std::vector<int64_t> source_start(static_cast<size_t>(size_) + 1, 0);
  for (int src = 0; src < size_; ++src)
    source_start[src + 1] = source_start[src] + ex.recv[src] / std::max<int64_t>(width, 1);
  local_offsets[0] = 0;
  for (int64_t x = 0; x < el; ++x) {
    local_offsets[x + 1] = local_offsets[x];
    for (int src = 0; src < size_; ++src) local_offsets[x + 1] += count(src, first + x);
  }
  for (int src = 0; src < size_; ++src) {
    int64_t at = source_start[src];  // source-major row
    for (int64_t x = 0; x < el; ++x) {
      int64_t to = local_offsets[x];  // expert-major row: after the earlier sources' rows of x
      for (int s = 0; s < src; ++s) to += count(s, first + x);
      for (int64_t i = 0; i < count(src, first + x); ++i, ++at, ++to) {
        sort[to] = static_cast<int32_t>(at);
        unsort[at] = static_cast<int32_t>(to);
      }
    }
  }
  return ex;
}

WorkHandle ExpertParallel::to_experts(const float* rows, float* received,
                                      const Exchange& ex) const {
  STRATA_CHECK(active(), "ExpertParallel: no exchange with ep = 1");
  return comm_->all_to_all_v(rows, ex.send.data(), received, ex.recv.data(), DType::f32);
}

WorkHandle ExpertParallel::from_experts(const float* received, float* rows,
                                        const Exchange& ex) const {
  STRATA_CHECK(active(), "ExpertParallel: no exchange with ep = 1");
  return comm_->all_to_all_v(received, ex.recv.data(), rows, ex.send.data(), DType::f32);
}

}  // namespace strata
