// ForwardingBackend (tests only): a Backend that passes every call to another one, bracketing each
// with enter() and leave(). A test backend derives from it and overrides only what it changes:
// GuardedBackend (guarded_backend.h) its memory and the guard around each call. When Backend
// gains a method, it is forwarded here once.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

#include "kernels/backend.h"

namespace strata::testing {

class ForwardingBackend : public Backend {
 public:
  explicit ForwardingBackend(Backend& inner) : inner_(inner) {}

  Device kind() const override { return inner_.kind(); }
  DeviceMemory* memory() override { return inner_.memory(); }
  void copy(void* dst, const void* src, size_t bytes) override {
    const Call call(*this);
    inner_.copy(dst, src, bytes);
  }
  void copy_from_host(void* dst, const void* host, size_t bytes) override {
    const Call call(*this);
    inner_.copy_from_host(dst, host, bytes);
  }
  void copy_to_host(void* host, const void* src, size_t bytes) override {
    const Call call(*this);
    inner_.copy_to_host(host, src, bytes);
  }
  void copy_2d(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width,
               size_t rows) override {
    const Call call(*this);
    inner_.copy_2d(dst, dst_pitch, src, src_pitch, width, rows);
  }
  void zero(void* dst, size_t bytes) override {
    const Call call(*this);
    inner_.zero(dst, bytes);
  }
  void fill(float* dst, float value, int64_t count) override {
    const Call call(*this);
    inner_.fill(dst, value, count);
  }
  void synchronize() override { inner_.synchronize(); }
  void* alloc_host(size_t bytes) override { return inner_.alloc_host(bytes); }
  void free_host(void* ptr) override { inner_.free_host(ptr); }
  std::unique_ptr<CopyQueue> make_copy_queue() override { return inner_.make_copy_queue(); }
  bool supports_naive_attention() const override { return inner_.supports_naive_attention(); }

  void gemm(DType ab, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
            const void* a, int64_t lda, const void* b, int64_t ldb, float beta, float* c,
            int64_t ldc) override {
    const Call call(*this);
    inner_.gemm(ab, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
  void linear_forward(DType t, float* y, const void* x, const void* w, const float* bias,
                      const LinearShape& s, const LowpScratch& scratch) override {
    const Call call(*this);
    inner_.linear_forward(t, y, x, w, bias, s, scratch);
  }
  void linear_backward(DType t, float* dx, float* dw, float* dbias, const float* dy, const void* x,
                       const void* w, const LinearShape& s, const LowpScratch& scratch) override {
    const Call call(*this);
    inner_.linear_backward(t, dx, dw, dbias, dy, x, w, s, scratch);
  }
  void to_lowp(DType t, uint16_t* out, const float* in, int64_t count) override {
    const Call call(*this);
    inner_.to_lowp(t, out, in, count);
  }
  void from_lowp(DType t, float* out, const uint16_t* in, int64_t count) override {
    const Call call(*this);
    inner_.from_lowp(t, out, in, count);
  }
  void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                         int64_t b, int64_t t, int64_t c) override {
    const Call call(*this);
    inner_.embedding_forward(out, tokens, wte, wpe, b, t, c);
  }
  void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                          int64_t b, int64_t t, int64_t c) override {
    const Call call(*this);
    inner_.embedding_backward(dwte, dwpe, dout, tokens, b, t, c);
  }
  void embedding_range_forward(float* out, const int32_t* tokens, const float* wte_rows,
                               int64_t vocab_begin, int64_t vocab_count, int64_t n,
                               int64_t c) override {
    const Call call(*this);
    inner_.embedding_range_forward(out, tokens, wte_rows, vocab_begin, vocab_count, n, c);
  }
  void embedding_range_backward(float* dwte_rows, const float* dout, const int32_t* tokens,
                                int64_t vocab_begin, int64_t vocab_count, int64_t n,
                                int64_t c) override {
    const Call call(*this);
    inner_.embedding_range_backward(dwte_rows, dout, tokens, vocab_begin, vocab_count, n, c);
  }
  void positions_add_forward(float* out, const float* wpe, int64_t first_row, int64_t n, int64_t t,
                             int64_t c, const int32_t* positions) override {
    const Call call(*this);
    inner_.positions_add_forward(out, wpe, first_row, n, t, c, positions);
  }
  void positions_add_backward(float* dwpe, const float* dout, int64_t first_row, int64_t n,
                              int64_t t, int64_t c, const int32_t* positions) override {
    const Call call(*this);
    inner_.positions_add_backward(dwpe, dout, first_row, n, t, c, positions);
  }
  void layernorm_forward(float* y, float* mean, float* rstd, const float* x, const float* w,
                         const float* bias, int64_t n, int64_t c, float eps) override {
    const Call call(*this);
    inner_.layernorm_forward(y, mean, rstd, x, w, bias, n, c, eps);
  }
  void layernorm_backward(float* dx, float* dw, float* dbias, const float* dy, const float* x,
                          const float* w, const float* mean, const float* rstd, int64_t n,
                          int64_t c) override {
    const Call call(*this);
    inner_.layernorm_backward(dx, dw, dbias, dy, x, w, mean, rstd, n, c);
  }
  void rmsnorm_forward(float* y, float* rstd, const float* x, const float* w, int64_t n, int64_t c,
                       float eps) override {
    const Call call(*this);
    inner_.rmsnorm_forward(y, rstd, x, w, n, c, eps);
  }
  void rmsnorm_backward(float* dx, float* dw, const float* dy, const float* x, const float* w,
                        const float* rstd, int64_t n, int64_t c) override {
    const Call call(*this);
    inner_.rmsnorm_backward(dx, dw, dy, x, w, rstd, n, c);
  }
  void gelu_forward(DType y_type, void* y, const float* x, int64_t count) override {
    const Call call(*this);
    inner_.gelu_forward(y_type, y, x, count);
  }
  void gelu_backward(float* dx, const float* x, const float* dy, int64_t count) override {
    const Call call(*this);
    inner_.gelu_backward(dx, x, dy, count);
  }
  void swiglu_forward(float* y, const float* gate_up, int64_t n, int64_t f) override {
    const Call call(*this);
    inner_.swiglu_forward(y, gate_up, n, f);
  }
  void swiglu_backward(float* dgate_up, const float* gate_up, const float* dy, int64_t n,
                       int64_t f) override {
    const Call call(*this);
    inner_.swiglu_backward(dgate_up, gate_up, dy, n, f);
  }
  void moe_route_forward(kernels::MoeGating gating, int32_t* expert_idx, float* weight,
                         float* probs, const float* logits, const float* bias, int64_t n, int64_t e,
                         int64_t k, bool normalize, float scale) override {
    const Call call(*this);
    inner_.moe_route_forward(gating, expert_idx, weight, probs, logits, bias, n, e, k, normalize,
                             scale);
  }
  void moe_route_backward(kernels::MoeGating gating, float* dlogits, const float* dweight,
                          const float* probs, const int32_t* expert_idx, int64_t n, int64_t e,
                          int64_t k, bool normalize, float scale) override {
    const Call call(*this);
    inner_.moe_route_backward(gating, dlogits, dweight, probs, expert_idx, n, e, k, normalize,
                              scale);
  }
  double moe_aux_loss_forward(kernels::MoeGating gating, const float* probs,
                              const int64_t* tokens_per_expert, int64_t n, int64_t e, int64_t k,
                              float coeff) override {
    const Call call(*this);
    return inner_.moe_aux_loss_forward(gating, probs, tokens_per_expert, n, e, k, coeff);
  }
  void moe_aux_loss_backward(kernels::MoeGating gating, float* dlogits, const float* probs,
                             const int64_t* tokens_per_expert, int64_t n, int64_t e, int64_t k,
                             float coeff) override {
    const Call call(*this);
    inner_.moe_aux_loss_backward(gating, dlogits, probs, tokens_per_expert, n, e, k, coeff);
  }
  double moe_z_loss_forward(const float* logits, int64_t n, int64_t e, float coeff) override {
    const Call call(*this);
    return inner_.moe_z_loss_forward(logits, n, e, coeff);
  }
  void moe_z_loss_backward(float* dlogits, const float* logits, int64_t n, int64_t e,
                           float coeff) override {
    const Call call(*this);
    inner_.moe_z_loss_backward(dlogits, logits, n, e, coeff);
  }
  int64_t moe_dispatch_plan(int64_t* offsets, int32_t* row_token, int32_t* row_slot,
                            int32_t* token_row, int64_t* tokens_per_expert,
                            const int32_t* expert_idx, int64_t n, int64_t e, int64_t k,
                            int64_t capacity) override {
    const Call call(*this);
    return inner_.moe_dispatch_plan(offsets, row_token, row_slot, token_row, tokens_per_expert,
                                    expert_idx, n, e, k, capacity);
  }
  void moe_permute_forward(float* xs, const float* x, const int32_t* row_token, int64_t rows,
                           int64_t c) override {
    const Call call(*this);
    inner_.moe_permute_forward(xs, x, row_token, rows, c);
  }
  void moe_permute_backward(float* dx, const float* dxs, const int32_t* token_row, int64_t n,
                            int64_t k, int64_t c) override {
    const Call call(*this);
    inner_.moe_permute_backward(dx, dxs, token_row, n, k, c);
  }
  void moe_grouped_linear_forward(float* ys, const float* xs, const float* w,
                                  const int64_t* offsets, int64_t e, int64_t in,
                                  int64_t out) override {
    const Call call(*this);
    inner_.moe_grouped_linear_forward(ys, xs, w, offsets, e, in, out);
  }
  void moe_grouped_linear_backward(float* dxs, float* dw, const float* dys, const float* xs,
                                   const float* w, const int64_t* offsets, int64_t e, int64_t in,
                                   int64_t out) override {
    const Call call(*this);
    inner_.moe_grouped_linear_backward(dxs, dw, dys, xs, w, offsets, e, in, out);
  }
  void moe_combine_forward(float* y, const float* ys, const float* weight, const int32_t* token_row,
                           int64_t n, int64_t k, int64_t c) override {
    const Call call(*this);
    inner_.moe_combine_forward(y, ys, weight, token_row, n, k, c);
  }
  void moe_combine_backward(float* dys, float* dweight, const float* dy, const float* ys,
                            const float* weight, const int32_t* token_row, int64_t n, int64_t k,
                            int64_t c) override {
    const Call call(*this);
    inner_.moe_combine_backward(dys, dweight, dy, ys, weight, token_row, n, k, c);
  }
  void rope_forward(float* qkv, const AttentionShape& s, const RopeSpec& rope,
                    const int32_t* positions) override {
    const Call call(*this);
    inner_.rope_forward(qkv, s, rope, positions);
  }
  void rope_backward(float* dqkv, const AttentionShape& s, const RopeSpec& rope,
                     const int32_t* positions) override {
    const Call call(*this);
    inner_.rope_backward(dqkv, s, rope, positions);
  }
  void head_rmsnorm_forward(float* qkv, float* pre, float* rstd, const float* wq, const float* wk,
                            const AttentionShape& s, float eps) override {
    const Call call(*this);
    inner_.head_rmsnorm_forward(qkv, pre, rstd, wq, wk, s, eps);
  }
  void head_rmsnorm_backward(float* dqkv, float* dwq, float* dwk, const float* pre,
                             const float* rstd, const float* wq, const float* wk,
                             const AttentionShape& s) override {
    const Call call(*this);
    inner_.head_rmsnorm_backward(dqkv, dwq, dwk, pre, rstd, wq, wk, s);
  }
  void attention_forward(float* out, float* probs, const float* qkv,
                         const AttentionShape& s) override {
    const Call call(*this);
    inner_.attention_forward(out, probs, qkv, s);
  }
  void attention_backward(float* dqkv, float* scratch, const float* dout, const float* qkv,
                          const float* probs, const AttentionShape& s) override {
    const Call call(*this);
    inner_.attention_backward(dqkv, scratch, dout, qkv, probs, s);
  }
  int64_t attention_backward_scratch(const AttentionShape& s) const override {
    return inner_.attention_backward_scratch(s);
  }
  void flash_attention_forward(DType qkv_type, float* out, float* lse, const void* qkv,
                               const AttentionShape& s) override {
    const Call call(*this);
    inner_.flash_attention_forward(qkv_type, out, lse, qkv, s);
  }
  void flash_attention_backward(DType qkv_type, float* dqkv, float* scratch, const float* dout,
                                const void* qkv, const float* out, const float* lse,
                                const AttentionShape& s) override {
    const Call call(*this);
    inner_.flash_attention_backward(qkv_type, dqkv, scratch, dout, qkv, out, lse, s);
  }
  int64_t flash_attention_backward_scratch(DType qkv_type, const AttentionShape& s) const override {
    return inner_.flash_attention_backward_scratch(qkv_type, s);
  }
  void attention_ranges_forward(float* out, float* lse, const float* q, int64_t q_stride,
                                const float* k, const float* v, int64_t kv_stride,
                                const int32_t* key_begin, const int32_t* key_end,
                                const RangeAttentionShape& s) override {
    const Call call(*this);
    inner_.attention_ranges_forward(out, lse, q, q_stride, k, v, kv_stride, key_begin, key_end, s);
  }
  void attention_ranges_merge(float* out_acc, float* lse_acc, const float* out_part,
                              const float* lse_part, const RangeAttentionShape& s) override {
    const Call call(*this);
    inner_.attention_ranges_merge(out_acc, lse_acc, out_part, lse_part, s);
  }
  int64_t attention_ranges_backward_scratch(int64_t head_dim) const override {
    return inner_.attention_ranges_backward_scratch(head_dim);
  }
  void attention_ranges_backward(float* dq, float* dk, float* dv, float* scratch, const float* dout,
                                 const float* q, int64_t q_stride, const float* k, const float* v,
                                 int64_t kv_stride, const float* out, const float* lse,
                                 const int32_t* key_begin, const int32_t* key_end,
                                 const RangeAttentionShape& s) override {
    const Call call(*this);
    inner_.attention_ranges_backward(dq, dk, dv, scratch, dout, q, q_stride, k, v, kv_stride, out,
                                     lse, key_begin, key_end, s);
  }
  double cross_entropy_forward(float* losses, const float* logits, const int32_t* targets,
                               int64_t n, int64_t v) override {
    const Call call(*this);
    return inner_.cross_entropy_forward(losses, logits, targets, n, v);
  }
  double cross_entropy_forward_backward(DType grad_type, float* losses, float* logits,
                                        const int32_t* targets, int64_t n, int64_t v,
                                        float grad_scale) override {
    const Call call(*this);
    return inner_.cross_entropy_forward_backward(grad_type, losses, logits, targets, n, v,
                                                 grad_scale);
  }
  void vocab_parallel_ce_max(float* row_max, const float* logits, int64_t n,
                             int64_t v_local) override {
    const Call call(*this);
    inner_.vocab_parallel_ce_max(row_max, logits, n, v_local);
  }
  void vocab_parallel_ce_sums(float* sum_exp, float* target_logit, const float* logits,
                              const float* row_max, const int32_t* targets, int64_t n,
                              int64_t v_local, int64_t vocab_begin) override {
    const Call call(*this);
    inner_.vocab_parallel_ce_sums(sum_exp, target_logit, logits, row_max, targets, n, v_local,
                                  vocab_begin);
  }
  double vocab_parallel_ce_finish(float* losses, float* logits, const float* row_max,
                                  const float* sum_exp, const float* target_logit,
                                  const int32_t* targets, int64_t n, int64_t v_local,
                                  int64_t vocab_begin, bool backward, float grad_scale) override {
    const Call call(*this);
    return inner_.vocab_parallel_ce_finish(losses, logits, row_max, sum_exp, target_logit, targets,
                                           n, v_local, vocab_begin, backward, grad_scale);
  }
  void add_bias(float* y, const float* bias, int64_t n, int64_t c) override {
    const Call call(*this);
    inner_.add_bias(y, bias, n, c);
  }
  void add(float* out, const float* a, const float* b, int64_t count) override {
    const Call call(*this);
    inner_.add(out, a, b, count);
  }
  void add_inplace(float* y, const float* x, int64_t count) override {
    const Call call(*this);
    inner_.add_inplace(y, x, count);
  }
  void scale_inplace(float* y, float s, int64_t count) override {
    const Call call(*this);
    inner_.scale_inplace(y, s, count);
  }
  void adamw_update(float* p, const float* g, float* m, float* v, int64_t count, float lr,
                    float beta1, float beta2, float eps, float weight_decay, float grad_scale,
                    int64_t step, uint16_t* p_bf16) override {
    const Call call(*this);
    inner_.adamw_update(p, g, m, v, count, lr, beta1, beta2, eps, weight_decay, grad_scale, step,
                        p_bf16);
  }
  double sum_squares(const float* x, int64_t count) override {
    const Call call(*this);
    return inner_.sum_squares(x, count);
  }

 protected:
  // Around every forwarded call that touches device memory (not memory(), alloc_host, ...).
  virtual void enter() {}
  virtual void leave() {}
  Backend& inner() { return inner_; }

 private:
  struct Call {  // enter() now, leave() at scope exit (exception-safe)
    explicit Call(ForwardingBackend& b) : backend(b) { backend.enter(); }
    ~Call() { backend.leave(); }
    Call(const Call&) = delete;
    Call& operator=(const Call&) = delete;
    ForwardingBackend& backend;
  };
  Backend& inner_;
};

}  // namespace strata::testing
