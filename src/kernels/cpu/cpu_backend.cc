// The CPU backend: kernels/cpu behind the Backend interface, host memory, nothing queued (every
// call has finished when it returns).
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "kernels/backend.h"
#include "kernels/cpu/attention_ranges.h"
#include "kernels/cpu/flash_attention.h"
#include "kernels/cpu/kernels.h"

namespace strata {

namespace k = kernels;

void* aligned_host_alloc(size_t bytes) {
  constexpr size_t align = Backend::kHostAlignment;
  const size_t rounded = (std::max<size_t>(bytes, 1) + align - 1) / align * align;
  void* ptr = std::aligned_alloc(align, rounded);
  STRATA_CHECK(ptr != nullptr, "out of host memory: the system refused ", rounded,
               " bytes of host buffers");
  std::memset(ptr, 0, rounded);
  return ptr;
}

void check_operand_type(bool ok, const char* method, DType t) {
  STRATA_CHECK(ok, "Backend::", method, ": operands of type ", dtype_name(t),
               " are not supported (f32 and bf16 are)");
}

namespace {

// Every copy has finished when download / upload return, so waiting is a no-op; tickets still
// count up, so that code written against the asynchronous contract runs unchanged.
class SynchronousCopyQueue final : public CopyQueue {
 public:
  explicit SynchronousCopyQueue(Backend& backend) : backend_(backend) {}
  CopyTicket download(void* host, const void* device, size_t bytes) override {
    backend_.copy_to_host(host, device, bytes);
    return ++issued_;
  }
  CopyTicket upload(void* device, const void* host, size_t bytes) override {
    backend_.copy_from_host(device, host, bytes);
    return ++issued_;
  }
  void wait_host(CopyTicket /*ticket*/) override {}
  void compute_waits_for(CopyTicket /*ticket*/) override {}

 private:
  Backend& backend_;
  CopyTicket issued_ = 0;
};

class CpuBackend final : public Backend {
 public:
  Device kind() const override { return Device::cpu; }
  DeviceMemory* memory() override { return nullptr; }
  void copy(void* dst, const void* src, size_t bytes) override {
    if (dst != src) std::memmove(dst, src, bytes);
  }
  void copy_from_host(void* dst, const void* host, size_t bytes) override {
    copy(dst, host, bytes);
  }
  void copy_to_host(void* host, const void* src, size_t bytes) override { copy(host, src, bytes); }
  void copy_2d(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width,
               size_t rows) override {
    auto* d = static_cast<char*>(dst);
    const auto* s = static_cast<const char*>(src);
#pragma omp parallel for schedule(static) if (rows * width >= (size_t{1} << 16))
    for (size_t i = 0; i < rows; ++i) std::memcpy(d + i * dst_pitch, s + i * src_pitch, width);
  }
  void zero(void* dst, size_t bytes) override {
    std::memset(dst, 0, bytes);
  }
  void fill(float* dst, float value, int64_t count) override {
    std::fill(dst, dst + count, value);
  }
  void synchronize() override {}
  void* alloc_host(size_t bytes) override {
    return aligned_host_alloc(bytes);
  }
  void free_host(void* ptr) override {
    std::free(ptr);
  }
  std::unique_ptr<CopyQueue> make_copy_queue() override {
    return make_synchronous_copy_queue(*this);
  }
  bool supports_naive_attention() const override {
    return true;
  }

  void gemm(DType ab, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
            const void* a, int64_t lda, const void* b, int64_t ldb, float beta, float* c,
            int64_t ldc) override {
    if (ab == DType::f32)
      return k::gemm(trans_a, trans_b, m, n, k, alpha, static_cast<const float*>(a), lda,
                     static_cast<const float*>(b), ldb, beta, c, ldc);
    check_operand_type(ab == DType::bf16, "gemm", ab);
    k::gemm_bf16(trans_a, trans_b, m, n, k, alpha, static_cast<const uint16_t*>(a), lda,
                 static_cast<const uint16_t*>(b), ldb, beta, c, ldc);
  }
  void linear_forward(DType t, float* y, const void* x, const void* w, const float* bias,
                      const LinearShape& s, const LowpScratch& scratch) override {
    if (t == DType::f32)
      return k::linear_forward(y, static_cast<const float*>(x), static_cast<const float*>(w), bias,
                               s.rows, s.in, s.out);
    k::linear_forward_lowp(t, y, static_cast<const uint16_t*>(x), static_cast<const uint16_t*>(w),
                           bias, s.rows, s.in, s.out, scratch.f32);
  }
  void linear_backward(DType t, float* dx, float* dw, float* dbias, const float* dy, const void* x,
                       const void* w, const LinearShape& s, const LowpScratch& scratch) override {
    if (t == DType::f32)
      return k::linear_backward(dx, dw, dbias, dy, static_cast<const float*>(x),
                                static_cast<const float*>(w), s.rows, s.in, s.out);
    k::linear_backward_lowp(t, dx, dw, dbias, dy, scratch.dy, scratch.dy_capacity,
                            static_cast<const uint16_t*>(x), static_cast<const uint16_t*>(w),
                            s.rows, s.in, s.out, scratch.f32);
  }
  void to_lowp(DType t, uint16_t* out, const float* in, int64_t count) override {
    k::to_lowp(t, out, in, count);
  }
  void from_lowp(DType t, float* out, const uint16_t* in, int64_t count) override {
    k::from_lowp(t, out, in, count);
  }
  void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                         int64_t b, int64_t t, int64_t c) override {
    k::embedding_forward(out, tokens, wte, wpe, b, t, c);
  }
  void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                          int64_t b, int64_t t, int64_t c) override {
    k::embedding_backward(dwte, dwpe, dout, tokens, b, t, c);
  }
  void embedding_range_forward(float* out, const int32_t* tokens, const float* wte_rows,
                               int64_t vocab_begin, int64_t vocab_count, int64_t n,
                               int64_t c) override {
    k::embedding_range_forward(out, tokens, wte_rows, vocab_begin, vocab_count, n, c);
  }
  void embedding_range_backward(float* dwte_rows, const float* dout, const int32_t* tokens,
                                int64_t vocab_begin, int64_t vocab_count, int64_t n,
                                int64_t c) override {
    k::embedding_range_backward(dwte_rows, dout, tokens, vocab_begin, vocab_count, n, c);
  }
  void positions_add_forward(float* out, const float* wpe, int64_t first_row, int64_t n, int64_t t,
                             int64_t c, const int32_t* positions) override {
    k::positions_add_forward(out, wpe, first_row, n, t, c, positions);
  }
  void positions_add_backward(float* dwpe, const float* dout, int64_t first_row, int64_t n,
                              int64_t t, int64_t c, const int32_t* positions) override {
    k::positions_add_backward(dwpe, dout, first_row, n, t, c, positions);
  }
  void layernorm_forward(float* y, float* mean, float* rstd, const float* x, const float* w,
                         const float* bias, int64_t n, int64_t c, float eps) override {
    k::layernorm_forward(y, mean, rstd, x, w, bias, n, c, eps);
  }
  void layernorm_backward(float* dx, float* dw, float* dbias, const float* dy, const float* x,
                          const float* w, const float* mean, const float* rstd, int64_t n,
                          int64_t c) override {
    k::layernorm_backward(dx, dw, dbias, dy, x, w, mean, rstd, n, c);
  }
  void rmsnorm_forward(float* y, float* rstd, const float* x, const float* w, int64_t n, int64_t c,
                       float eps) override {
    k::rmsnorm_forward(y, rstd, x, w, n, c, eps);
  }
  void rmsnorm_backward(float* dx, float* dw, const float* dy, const float* x, const float* w,
                        const float* rstd, int64_t n, int64_t c) override {
    k::rmsnorm_backward(dx, dw, dy, x, w, rstd, n, c);
  }
  void gelu_forward(DType y_type, void* y, const float* x, int64_t count) override {
    if (y_type == DType::f32) return k::gelu_forward(static_cast<float*>(y), x, count);
    check_operand_type(y_type == DType::bf16, "gelu_forward", y_type);
    k::gelu_forward_bf16(static_cast<uint16_t*>(y), x, count);
  }
  void gelu_backward(float* dx, const float* x, const float* dy, int64_t count) override {
    k::gelu_backward(dx, x, dy, count);
  }
  void swiglu_forward(float* y, const float* gate_up, int64_t n, int64_t f) override {
    k::swiglu_forward(y, gate_up, n, f);
  }
  void swiglu_backward(float* dgate_up, const float* gate_up, const float* dy, int64_t n,
                       int64_t f) override {
    k::swiglu_backward(dgate_up, gate_up, dy, n, f);
  }
  void moe_route_forward(kernels::MoeGating gating, int32_t* expert_idx, float* weight,
                         float* probs, const float* logits, const float* bias, int64_t n, int64_t e,
                         int64_t k, bool normalize, float scale) override {
    kernels::moe_route_forward(gating, expert_idx, weight, probs, logits, bias, n, e, k, normalize,
                               scale);
  }
  void moe_route_backward(kernels::MoeGating gating, float* dlogits, const float* dweight,
                          const float* probs, const int32_t* expert_idx, int64_t n, int64_t e,
                          int64_t k, bool normalize, float scale) override {
    kernels::moe_route_backward(gating, dlogits, dweight, probs, expert_idx, n, e, k, normalize,
                                scale);
  }
  double moe_aux_loss_forward(kernels::MoeGating gating, const float* probs,
                              const int64_t* tokens_per_expert, int64_t n, int64_t e, int64_t k,
                              float coeff) override {
    return kernels::moe_aux_loss_forward(gating, probs, tokens_per_expert, n, e, k, coeff);
  }
  void moe_aux_loss_backward(kernels::MoeGating gating, float* dlogits, const float* probs,
                             const int64_t* tokens_per_expert, int64_t n, int64_t e, int64_t k,
                             float coeff) override {
    kernels::moe_aux_loss_backward(gating, dlogits, probs, tokens_per_expert, n, e, k, coeff);
  }
  double moe_z_loss_forward(const float* logits, int64_t n, int64_t e, float coeff) override {
    return kernels::moe_z_loss_forward(logits, n, e, coeff);
  }
  void moe_z_loss_backward(float* dlogits, const float* logits, int64_t n, int64_t e,
                           float coeff) override {
    kernels::moe_z_loss_backward(dlogits, logits, n, e, coeff);
  }
  int64_t moe_dispatch_plan(int64_t* offsets, int32_t* row_token, int32_t* row_slot,
                            int32_t* token_row, int64_t* tokens_per_expert,
                            const int32_t* expert_idx, int64_t n, int64_t e, int64_t k,
                            int64_t capacity) override {
    return kernels::moe_dispatch_plan(offsets, row_token, row_slot, token_row, tokens_per_expert,
                                      expert_idx, n, e, k, capacity);
  }
  void moe_permute_forward(float* xs, const float* x, const int32_t* row_token, int64_t rows,
                           int64_t c) override {
    kernels::moe_permute_forward(xs, x, row_token, rows, c);
  }
  void moe_permute_backward(float* dx, const float* dxs, const int32_t* token_row, int64_t n,
                            int64_t k, int64_t c) override {
    kernels::moe_permute_backward(dx, dxs, token_row, n, k, c);
  }
  void moe_grouped_linear_forward(float* ys, const float* xs, const float* w,
                                  const int64_t* offsets, int64_t e, int64_t in,
                                  int64_t out) override {
    kernels::moe_grouped_linear_forward(ys, xs, w, offsets, e, in, out);
  }
  void moe_grouped_linear_backward(float* dxs, float* dw, const float* dys, const float* xs,
                                   const float* w, const int64_t* offsets, int64_t e, int64_t in,
                                   int64_t out) override {
    kernels::moe_grouped_linear_backward(dxs, dw, dys, xs, w, offsets, e, in, out);
  }
  void moe_combine_forward(float* y, const float* ys, const float* weight, const int32_t* token_row,
                           int64_t n, int64_t k, int64_t c) override {
    kernels::moe_combine_forward(y, ys, weight, token_row, n, k, c);
  }
  void moe_combine_backward(float* dys, float* dweight, const float* dy, const float* ys,
                            const float* weight, const int32_t* token_row, int64_t n, int64_t k,
                            int64_t c) override {
    kernels::moe_combine_backward(dys, dweight, dy, ys, weight, token_row, n, k, c);
  }
  void rope_forward(float* qkv, const AttentionShape& s, const RopeSpec& rope,
                    const int32_t* positions) override {
    k::rope_forward(qkv, s, rope, positions);
  }
  void rope_backward(float* dqkv, const AttentionShape& s, const RopeSpec& rope,
                     const int32_t* positions) override {
    k::rope_backward(dqkv, s, rope, positions);
  }
  void head_rmsnorm_forward(float* qkv, float* pre, float* rstd, const float* wq, const float* wk,
                            const AttentionShape& s, float eps) override {
    k::head_rmsnorm_forward(qkv, pre, rstd, wq, wk, s, eps);
  }
  void head_rmsnorm_backward(float* dqkv, float* dwq, float* dwk, const float* pre,
                             const float* rstd, const float* wq, const float* wk,
                             const AttentionShape& s) override {
    k::head_rmsnorm_backward(dqkv, dwq, dwk, pre, rstd, wq, wk, s);
  }
  void attention_forward(float* out, float* probs, const float* qkv,
                         const AttentionShape& s) override {
    k::attention_forward(out, probs, qkv, s.b, s.t, s.heads, s.kv_heads, s.head_dim);
  }
  void attention_backward(float* dqkv, float* scratch, const float* dout, const float* qkv,
                          const float* probs, const AttentionShape& s) override {
    k::attention_backward(dqkv, scratch, dout, qkv, probs, s.b, s.t, s.heads, s.kv_heads,
                          s.head_dim);
  }
  int64_t attention_backward_scratch(const AttentionShape& s) const override {
    return k::attention_backward_scratch(s.b, s.t, s.heads, s.kv_heads, s.head_dim);
  }
  void flash_attention_forward(DType qkv_type, float* out, float* lse, const void* qkv,
                               const AttentionShape& s) override {
    if (qkv_type == DType::f32)
      return k::flash_attention_forward(out, lse, static_cast<const float*>(qkv), s.b, s.t, s.heads,
                                        s.kv_heads, s.head_dim);
    check_operand_type(qkv_type == DType::bf16, "flash_attention_forward", qkv_type);
    k::flash_attention_forward_bf16(out, lse, static_cast<const uint16_t*>(qkv), s.b, s.t, s.heads,
                                    s.kv_heads, s.head_dim);
  }
  void flash_attention_backward(DType qkv_type, float* dqkv, float* scratch, const float* dout,
                                const void* qkv, const float* out, const float* lse,
                                const AttentionShape& s) override {
    if (qkv_type == DType::f32)
      return k::flash_attention_backward(dqkv, scratch, dout, static_cast<const float*>(qkv), out,
                                         lse, s.b, s.t, s.heads, s.kv_heads, s.head_dim);
    check_operand_type(qkv_type == DType::bf16, "flash_attention_backward", qkv_type);
    k::flash_attention_backward_bf16(dqkv, scratch, dout, static_cast<const uint16_t*>(qkv), out,
                                     lse, s.b, s.t, s.heads, s.kv_heads, s.head_dim);
  }
  int64_t flash_attention_backward_scratch(DType qkv_type, const AttentionShape& s) const override {
    if (qkv_type == DType::f32)
      return k::flash_attention_backward_scratch(s.b, s.t, s.heads, s.kv_heads, s.head_dim);
    check_operand_type(qkv_type == DType::bf16, "flash_attention_backward_scratch", qkv_type);
    return k::flash_attention_backward_bf16_scratch(s.b, s.t, s.heads, s.kv_heads, s.head_dim);
  }
  void attention_ranges_forward(float* out, float* lse, const float* q, int64_t q_stride,
                                const float* kk, const float* v, int64_t kv_stride,
                                const int32_t* key_begin, const int32_t* key_end,
                                const RangeAttentionShape& s) override {
    k::attention_ranges_forward(out, lse, q, q_stride, kk, v, kv_stride, key_begin, key_end, s);
  }
  void attention_ranges_merge(float* out_acc, float* lse_acc, const float* out_part,
                              const float* lse_part, const RangeAttentionShape& s) override {
    k::attention_ranges_merge(out_acc, lse_acc, out_part, lse_part, s.b, s.tq, s.nh, s.hd);
  }
  int64_t attention_ranges_backward_scratch(int64_t head_dim) const override {
    return k::attention_ranges_backward_scratch(head_dim);
  }
  void attention_ranges_backward(float* dq, float* dk, float* dv, float* scratch, const float* dout,
                                 const float* q, int64_t q_stride, const float* kk, const float* v,
                                 int64_t kv_stride, const float* out, const float* lse,
                                 const int32_t* key_begin, const int32_t* key_end,
                                 const RangeAttentionShape& s) override {
    k::attention_ranges_backward(dq, dk, dv, scratch, dout, q, q_stride, kk, v, kv_stride, out, lse,
                                 key_begin, key_end, s);
  }
  double cross_entropy_forward(float* losses, const float* logits, const int32_t* targets,
                               int64_t n, int64_t v) override {
    return k::cross_entropy_forward(losses, logits, targets, n, v);
  }
  double cross_entropy_forward_backward(DType grad_type, float* losses, float* logits,
                                        const int32_t* targets, int64_t n, int64_t v,
                                        float grad_scale) override {
    if (grad_type == DType::f32)
      return k::cross_entropy_forward_backward(losses, logits, targets, n, v, grad_scale);
    check_operand_type(grad_type == DType::bf16, "cross_entropy_forward_backward", grad_type);
    return k::cross_entropy_forward_backward_bf16(losses, logits, targets, n, v, grad_scale);
  }
  void vocab_parallel_ce_max(float* row_max, const float* logits, int64_t n,
                             int64_t v_local) override {
    k::vocab_parallel_ce_max(row_max, logits, n, v_local);
  }
  void vocab_parallel_ce_sums(float* sum_exp, float* target_logit, const float* logits,
                              const float* row_max, const int32_t* targets, int64_t n,
                              int64_t v_local, int64_t vocab_begin) override {
    k::vocab_parallel_ce_sums(sum_exp, target_logit, logits, row_max, targets, n, v_local,
                              vocab_begin);
  }
  double vocab_parallel_ce_finish(float* losses, float* logits, const float* row_max,
                                  const float* sum_exp, const float* target_logit,
                                  const int32_t* targets, int64_t n, int64_t v_local,
                                  int64_t vocab_begin, bool backward, float grad_scale) override {
    return k::vocab_parallel_ce_finish(losses, logits, row_max, sum_exp, target_logit, targets, n,
                                       v_local, vocab_begin, backward, grad_scale);
  }
  void add_bias(float* y, const float* bias, int64_t n, int64_t c) override {
    k::add_bias(y, bias, n, c);
  }
  void add(float* out, const float* a, const float* b, int64_t count) override {
    k::add(out, a, b, count);
  }
  void add_inplace(float* y, const float* x, int64_t count) override {
    k::add_inplace(y, x, count);
  }
  void scale_inplace(float* y, float s, int64_t count) override {
    k::scale_inplace(y, s, count);
  }
  void adamw_update(float* p, const float* g, float* m, float* v, int64_t count, float lr,
                    float beta1, float beta2, float eps, float weight_decay, float grad_scale,
                    int64_t step, uint16_t* p_bf16) override {
    k::adamw_update(p, g, m, v, count, lr, beta1, beta2, eps, weight_decay, grad_scale, step,
                    p_bf16);
  }
  double sum_squares(const float* x, int64_t count) override {
    return k::sum_squares(x, count);
  }
};

}  // namespace

std::unique_ptr<CopyQueue> make_synchronous_copy_queue(Backend& backend) {
  return std::make_unique<SynchronousCopyQueue>(backend);
}

Backend& cpu_backend() {
  static CpuBackend backend;
  return backend;
}

}  // namespace strata
