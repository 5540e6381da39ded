// TensorParallel: the four communication operators of Megatron-LM's tensor and sequence
// parallelism, over the tp group, as the Decoder's layers use them.
//
//   without sp:  column-parallel input is the replicated activation (forward: identity,
//                backward: all-reduce of the input gradient); row-parallel output is all-reduced
//                (backward: identity).
//   with sp:     the residual stream holds this rank's block of rows; column-parallel input is
//                all-gathered (backward: reduce-scatter); row-parallel output is reduce-scattered
//                (backward: all-gather).
// So two functions cover all four directions: gather_rows (sp all-gather, else nothing) and
// reduce_rows (sp reduce-scatter, else all-reduce). With tp = 1 both do nothing.
// Collectives are waited for at once: they sit on the critical path of a layer. Every pointer is
// a device pointer of the backend (null: the CPU), which copies between buffers.
#pragma once
#include <cstdint>

#include "comm/comm.h"
#include "kernels/backend.h"

namespace strata {

class TensorParallel {
 public:
  TensorParallel() = default;  // tp = 1
  TensorParallel(Comm* comm, bool sequence_parallel, Backend* backend = nullptr);

  int size() const { return size_; }
  int rank() const { return rank_; }
  bool sp() const { return sp_; }
  bool active() const { return size_ > 1; }
  Comm* comm() const { return comm_; }
  Backend& backend() const { return *backend_; }

  // partial[n, c]: this rank's partial sums over all n rows. `out` receives the sum over ranks:
  // every row (all-reduce; out may be partial itself) or, with sp, this rank's n/tp rows.
  void reduce_rows(float* partial, float* out, int64_t n, int64_t c) const;
  // x: the rows this rank holds. With sp, all-gathers the row blocks into full[n, c] and returns
  // full; otherwise returns x (every rank holds every row).
  const float* gather_rows(const float* x, float* full, int64_t n, int64_t c) const;
  // The same for 16-bit rows (mixed precision: half the bytes on the wire).
  const uint16_t* gather_rows(const uint16_t* x, uint16_t* full, int64_t n, int64_t c,
                              DType dtype) const;
  void all_reduce(float* x, int64_t count, ReduceOp op) const;

 private:
  Comm* comm_ = nullptr;
  int size_ = 1, rank_ = 0;
  bool sp_ = false;
  Backend* backend_ = &cpu_backend();
};

}  // namespace strata
