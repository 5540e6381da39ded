// ExpertParallel: the token exchange of a Mixture-of-Experts layer over the expert-parallel group
// (GitHub issue 21; Megatron-Core's all-to-all token dispatcher, in strata's terms).
//
// Every rank routes its own tokens over all e experts. Its dispatch plan sorts the (token, expert)
// rows by global expert, so the rows for the experts of ep rank j (experts [j*el, (j+1)*el),
// el = e / ep) are one contiguous block, and one variable-size all-to-all sends block j to rank j.
// A rank receives from each source rank, in rank order, that source's rows for its own experts,
// sorted by expert within the source ("source-major"). The grouped GEMMs want them grouped by
// expert ("expert-major"), so a row permutation `sort` gathers them into that order and its
// inverse `unsort` puts the experts' outputs back before the reverse all-to-all returns them:
//
//   forward   rows (global-expert order) --a2a--> source-major --sort--> expert-major
//             --experts' GEMMs--> expert-major --unsort--> source-major --a2a--> rows
//   backward  the rows' gradients along the same path (the permutations are each other's
//             backward: the gradient of a gather by a permutation is the gather by its inverse)
//
// Who sends what follows from one table, counts[src * e + x]: the rows rank src keeps for global
// expert x in this micro-batch. Forward all-gathers it (e int32 per rank); the layer keeps it
// with its activations for backward, so every micro-batch in flight in a pipeline, and a
// recomputed layer, has its own.
#pragma once
#include <cstdint>
#include <vector>

#include "comm/comm.h"

namespace strata {

class ExpertParallel {
 public:
  ExpertParallel() = default;  // ep = 1: no exchange
  explicit ExpertParallel(Comm* comm);

  int size() const { return size_; }
  int rank() const { return rank_; }
  bool active() const { return size_ > 1; }

  // The most rows this rank's experts can receive for n tokens per rank routed to k of e experts
  // (el = e / ep of them here), sized once for the preallocated buffers: a token reaches at most
  // min(k, el) of one rank's experts, and with a capacity (> 0, per expert and source rank) an
  // expert takes at most that many of each source's rows. ep = 1: the n * k rows themselves.
  static int64_t max_rows(int64_t n, int64_t k, int64_t e, int ep, int64_t capacity);

  // Forward: all-gathers every rank's kept rows per expert (this rank's: the dispatch plan's
  // offsets [e + 1], host) into counts [ep * e] (host).
  void gather_counts(const int64_t* offsets, int64_t e, int32_t* counts) const;

  // One exchange of rows of `width` floats: the elements sent to and received from each rank.
  struct Exchange {
    std::vector<int64_t> send, recv;
    int64_t rows_in = 0;  // rows this rank's experts receive
  };
  // From counts: the exchange, and when the pointers are not null (host, forward), the local
  // experts' row offsets [el + 1] in expert-major order and the permutations sort [rows_in]
  // (expert-major row <- source-major row) and unsort (its inverse).
  Exchange plan(const int32_t* counts, int64_t e, int64_t width, int64_t* local_offsets,
                int32_t* sort, int32_t* unsort) const;

  // Rows in global-expert order to the experts' ranks (received source-major), and back.
  WorkHandle to_experts(const float* rows, float* received, const Exchange& ex) const;
  WorkHandle from_experts(const float* received, float* rows, const Exchange& ex) const;

 private:
  Comm* comm_ = nullptr;
  int size_ = 1, rank_ = 0;
};

}  // namespace strata
