#include "model/parallel_linear.h"

namespace strata {

void ParallelLinear::forward(float* y, LinearInput x, int w, int bias, int64_t n, int64_t in,
                             int64_t out) {
  const float* b = bias >= 0 ? params_->param(bias) : nullptr;
  if (!lowp())
    return k_->linear_forward(DType::f32, y, x.f32, params_->param(w), b, {n, in, out}, {});
  k_->linear_forward(precision_, y, x.lowp, lowp_weight(w), b, {n, in, out}, scratch());
}

void ParallelLinear::backward(float* dx, float* dw, float* dbias, const float* dy, LinearInput x,
                              int w, int64_t n, int64_t in, int64_t out) {
  if (!lowp()) {
    if (dw) {
      k_->linear_backward(DType::f32, dx, dw, dbias, dy, x.f32, params_->param(w), {n, in, out},
                          {});
    } else {  // a tied head: dx only here, its weight gradient later
      k_->gemm(DType::f32, false, false, n, in, out, 1.0f, dy, out, params_->param(w), in, 0.0f, dx,
               in);
    }
    return;
  }
  k_->linear_backward(precision_, dx, dw, dbias, dy, x.lowp, lowp_weight(w), {n, in, out},
                      scratch());
}

LinearInput ParallelLinear::column_input(const float* x, uint16_t* keep, float* gather32, int64_t n,
                                         bool convert) {
  if (!lowp()) return {tp_->gather_rows(x, gather32, n, c_), nullptr};
  if (convert) k_->to_lowp(precision_, keep, x, shard_->local_rows(n) * c_);
  return {nullptr, tp_->gather_rows(keep, s_->full_lp, n, c_, precision_)};
}

void ParallelLinear::row_parallel(float* out, LinearInput x, int w, int bias, const float* residual,
                                  int64_t n, int64_t in) {
  const float* b = bias >= 0 ? params_->param(bias) : nullptr;
  if (!tp_->active()) {
    forward(out, x, w, bias, n, in, c_);
    k_->add_inplace(out, residual, n * c_);
    return;
  }
  float* partial = tp_->sp() ? s_->full_b : out;
  forward(partial, x, w, -1, n, in, c_);
  tp_->reduce_rows(partial, out, n, c_);
  const int64_t ns = shard_->local_rows(n);
  if (b) k_->add_bias(out, b, ns, c_);
  k_->add_inplace(out, residual, ns * c_);
}

}  // namespace strata
