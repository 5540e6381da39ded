#include "model/tensor_parallel.h"

namespace strata {

TensorParallel::TensorParallel(Comm* comm, bool sequence_parallel, Backend* backend)
    : comm_(comm),
      size_(comm ? comm->size() : 1),
      rank_(comm ? comm->rank() : 0),
      sp_(sequence_parallel && size_ > 1),
      backend_(backend ? backend : &cpu_backend()) {}

void TensorParallel::reduce_rows(float* partial, float* out, int64_t n, int64_t c) const {
  if (!active()) {
    if (out != partial) backend_->copy(out, partial, static_cast<size_t>(n * c) * sizeof(float));
    return;
  }
  if (sp_) {
    comm_->reduce_scatter(partial, out, n / size_ * c, DType::f32, ReduceOp::sum)->wait();
    return;
  }
  comm_->all_reduce(partial, n * c, DType::f32, ReduceOp::sum)->wait();
  if (out != partial) backend_->copy(out, partial, static_cast<size_t>(n * c) * sizeof(float));
}

const float* TensorParallel::gather_rows(const float* x, float* full, int64_t n, int64_t c) const {
  if (!sp_) return x;
  comm_->all_gather(x, full, n / size_ * c, DType::f32)->wait();
  return full;
}

const uint16_t* TensorParallel::gather_rows(const uint16_t* x, uint16_t* full, int64_t n, int64_t c,
                                            DType dtype) const {
  if (!sp_) return x;
  comm_->all_gather(x, full, n / size_ * c, dtype)->wait();
  return full;
}

void TensorParallel::all_reduce(float* x, int64_t count, ReduceOp op) const {
  if (active()) comm_->all_reduce(x, count, DType::f32, op)->wait();
}

}  // namespace strata
