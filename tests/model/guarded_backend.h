// GuardedBackend (tests only): the CPU kernels behind a Backend whose "device memory" the host
// cannot touch. Its DeviceMemory hands out page-aligned mmap'ed blocks that stay mprotect'ed
// PROT_NONE whenever control is outside a backend call; each Backend method unlocks every block
// (PROT_READ | PROT_WRITE), runs the CPU backend's version and locks them again. Model code that
// reads or writes a buffer of its device behind the backend's back then crashes (SIGSEGV) instead
// of silently working on the CPU, as it would not on a GPU.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "kernels/backend.h"

namespace strata::testing {

// Blocks are carved, page-aligned and never reused, from one mmap'ed reservation, so that locking
// or unlocking all of them is one mprotect of the range in use.
class GuardedMemory final : public DeviceMemory {
 public:
  explicit GuardedMemory(size_t reserve = size_t{1} << 30);
  ~GuardedMemory() override;
  GuardedMemory(const GuardedMemory&) = delete;
  GuardedMemory& operator=(const GuardedMemory&) = delete;

  void* allocate(size_t bytes, size_t align) override;  // zero-filled, locked unless in a call
  void free(void* ptr) override;
  std::string name() const override { return "guarded"; }

  // Unlocks every block on the first (outermost) call, locks them all on the last.
  void unlock();
  void lock();
  bool locked() const { return depth_ == 0; }
  // True for an address inside the blocks handed out (a "device" pointer of this memory).
  bool contains(const void* p) const {
    const char* c = static_cast<const char*>(p);
    return c >= base_ && c < base_ + used_;
  }
  int64_t unlocks() const { return unlocks_; }  // backend calls that reached the memory
  size_t blocks() const { return blocks_.size(); }

 private:
  void protect(int prot);
  char* base_ = nullptr;
  size_t reserved_ = 0, used_ = 0;  // bytes of the reservation, and its prefix handed out
  std::map<void*, size_t> blocks_;  // live blocks and their page-rounded sizes
  int depth_ = 0;
  int64_t unlocks_ = 0;
};

// Scoped unlock of a GuardedMemory (exception-safe).
class Unlocked {
 public:
  explicit Unlocked(GuardedMemory& memory) : memory_(memory) { memory_.unlock(); }
  ~Unlocked() { memory_.lock(); }
  Unlocked(const Unlocked&) = delete;
  Unlocked& operator=(const Unlocked&) = delete;

 private:
  GuardedMemory& memory_;
};

class GuardedBackend : public Backend {
 public:
  Device kind() const override { return Device::cpu; }
  DeviceMemory* memory() override { return &memory_; }
  GuardedMemory& guarded_memory() { return memory_; }

  void copy(void* dst, const void* src, size_t bytes) override {
    const Unlocked unlocked(memory_);
    cpu_backend().copy(dst, src, bytes);
  }
  void copy_from_host(void* dst, const void* host, size_t bytes) override {
    const Unlocked unlocked(memory_);
    cpu_backend().copy_from_host(dst, host, bytes);
  }
  void copy_to_host(void* host, const void* src, size_t bytes) override {
    const Unlocked unlocked(memory_);
    cpu_backend().copy_to_host(host, src, bytes);
  }
  void zero(void* dst, size_t bytes) override {
    const Unlocked unlocked(memory_);
    cpu_backend().zero(dst, bytes);
  }
  void fill(float* dst, float value, int64_t count) override {
    const Unlocked unlocked(memory_);
    cpu_backend().fill(dst, value, count);
  }
  void synchronize() override { cpu_backend().synchronize(); }
  // Host buffers are plain host memory (never locked); the queue's copies are this backend's
  // copy_to_host / copy_from_host, which unlock the device memory around each copy.
  void* alloc_host(size_t bytes) override { return cpu_backend().alloc_host(bytes); }
  void free_host(void* ptr) override { cpu_backend().free_host(ptr); }
  std::unique_ptr<CopyQueue> make_copy_queue() override {
    return make_synchronous_copy_queue(*this);
  }
  bool supports_naive_attention() const override { return true; }

  void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
            const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
            int64_t ldc) override {
    const Unlocked unlocked(memory_);
    cpu_backend().gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
  void gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                 const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, float beta,
                 float* c, int64_t ldc) override {
    const Unlocked unlocked(memory_);
    cpu_backend().gemm_bf16(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
  void linear_forward(float* y, const float* x, const float* w, const float* bias, int64_t n,
                      int64_t in, int64_t out) override {
    const Unlocked unlocked(memory_);
    cpu_backend().linear_forward(y, x, w, bias, n, in, out);
  }
  void linear_backward(float* dx, float* dw, float* dbias, const float* dy, const float* x,
                       const float* w, int64_t n, int64_t in, int64_t out) override {
    const Unlocked unlocked(memory_);
    cpu_backend().linear_backward(dx, dw, dbias, dy, x, w, n, in, out);
  }
  void linear_forward_lowp(DType t, float* y, const uint16_t* x, const uint16_t* w,
                           const float* bias, int64_t n, int64_t in, int64_t out,
                           float* f32_scratch) override {
    const Unlocked unlocked(memory_);
    cpu_backend().linear_forward_lowp(t, y, x, w, bias, n, in, out, f32_scratch);
  }
  void linear_backward_lowp(DType t, float* dx, float* dw, float* dbias, const float* dy,
                            uint16_t* dy_lowp, int64_t capacity, const uint16_t* x,
                            const uint16_t* w, int64_t n, int64_t in, int64_t out,
                            float* f32_scratch) override {
    const Unlocked unlocked(memory_);
    cpu_backend().linear_backward_lowp(t, dx, dw, dbias, dy, dy_lowp, capacity, x, w, n, in, out,
                                       f32_scratch);
  }
  void to_lowp(DType t, uint16_t* out, const float* in, int64_t count) override {
    const Unlocked unlocked(memory_);
    cpu_backend().to_lowp(t, out, in, count);
  }
  void from_lowp(DType t, float* out, const uint16_t* in, int64_t count) override {
    const Unlocked unlocked(memory_);
    cpu_backend().from_lowp(t, out, in, count);
  }
  void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                         int64_t b, int64_t t, int64_t c) override {
    const Unlocked unlocked(memory_);
    cpu_backend().embedding_forward(out, tokens, wte, wpe, b, t, c);
  }
  void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                          int64_t b, int64_t t, int64_t c) override {
    const Unlocked unlocked(memory_);
    cpu_backend().embedding_backward(dwte, dwpe, dout, tokens, b, t, c);
  }
  void embedding_range_forward(float* out, const int32_t* tokens, const float* wte_rows,
                               int64_t vocab_begin, int64_t vocab_count, int64_t n,
                               int64_t c) override {
    const Unlocked unlocked(memory_);
    cpu_backend().embedding_range_forward(out, tokens, wte_rows, vocab_begin, vocab_count, n, c);
  }
  void embedding_range_backward(float* dwte_rows, const float* dout, const int32_t* tokens,
                                int64_t vocab_begin, int64_t vocab_count, int64_t n,
                                int64_t c) override {
    const Unlocked unlocked(memory_);
    cpu_backend().embedding_range_backward(dwte_rows, dout, tokens, vocab_begin, vocab_count, n, c);
  }
  void positions_add_forward(float* out, const float* wpe, int64_t first_row, int64_t n, int64_t t,
                             int64_t c) override {
    const Unlocked unlocked(memory_);
    cpu_backend().positions_add_forward(out, wpe, first_row, n, t, c);
  }
  void positions_add_backward(float* dwpe, const float* dout, int64_t first_row, int64_t n,
                              int64_t t, int64_t c) override {
    const Unlocked unlocked(memory_);
    cpu_backend().positions_add_backward(dwpe, dout, first_row, n, t, c);
  }
  void layernorm_forward(float* y, float* mean, float* rstd, const float* x, const float* w,
                         const float* bias, int64_t n, int64_t c, float eps) override {
    const Unlocked unlocked(memory_);
    cpu_backend().layernorm_forward(y, mean, rstd, x, w, bias, n, c, eps);
  }
  void layernorm_backward(float* dx, float* dw, float* dbias, const float* dy, const float* x,
                          const float* w, const float* mean, const float* rstd, int64_t n,
                          int64_t c) override {
    const Unlocked unlocked(memory_);
    cpu_backend().layernorm_backward(dx, dw, dbias, dy, x, w, mean, rstd, n, c);
  }
  void rmsnorm_forward(float* y, float* rstd, const float* x, const float* w, int64_t n, int64_t c,
                       float eps) override {
    const Unlocked unlocked(memory_);
    cpu_backend().rmsnorm_forward(y, rstd, x, w, n, c, eps);
  }
  void rmsnorm_backward(float* dx, float* dw, const float* dy, const float* x, const float* w,
                        const float* rstd, int64_t n, int64_t c) override {
    const Unlocked unlocked(memory_);
    cpu_backend().rmsnorm_backward(dx, dw, dy, x, w, rstd, n, c);
  }
  void gelu_forward(float* y, const float* x, int64_t count) override {
    const Unlocked unlocked(memory_);
    cpu_backend().gelu_forward(y, x, count);
  }
  void gelu_forward_bf16(uint16_t* y, const float* x, int64_t count) override {
    const Unlocked unlocked(memory_);
    cpu_backend().gelu_forward_bf16(y, x, count);
  }
  void gelu_backward(float* dx, const float* x, const float* dy, int64_t count) override {
    const Unlocked unlocked(memory_);
    cpu_backend().gelu_backward(dx, x, dy, count);
  }
  void swiglu_forward(float* y, const float* gate_up, int64_t n, int64_t f) override {
    const Unlocked unlocked(memory_);
    cpu_backend().swiglu_forward(y, gate_up, n, f);
  }
  void swiglu_backward(float* dgate_up, const float* gate_up, const float* dy, int64_t n,
                       int64_t f) override {
    const Unlocked unlocked(memory_);
    cpu_backend().swiglu_backward(dgate_up, gate_up, dy, n, f);
  }
  void rope_forward(float* qkv, const AttentionShape& s, const RopeSpec& rope) override {
    const Unlocked unlocked(memory_);
    cpu_backend().rope_forward(qkv, s, rope);
  }
  void rope_backward(float* dqkv, const AttentionShape& s, const RopeSpec& rope) override {
    const Unlocked unlocked(memory_);
    cpu_backend().rope_backward(dqkv, s, rope);
  }
  void head_rmsnorm_forward(float* qkv, float* pre, float* rstd, const float* wq, const float* wk,
                            const AttentionShape& s, float eps) override {
    const Unlocked unlocked(memory_);
    cpu_backend().head_rmsnorm_forward(qkv, pre, rstd, wq, wk, s, eps);
  }
  void head_rmsnorm_backward(float* dqkv, float* dwq, float* dwk, const float* pre,
                             const float* rstd, const float* wq, const float* wk,
                             const AttentionShape& s) override {
    const Unlocked unlocked(memory_);
    cpu_backend().head_rmsnorm_backward(dqkv, dwq, dwk, pre, rstd, wq, wk, s);
  }
  void attention_forward(float* out, float* probs, const float* qkv, int64_t b, int64_t t,
                         int64_t nh, int64_t nkv, int64_t hd) override {
    const Unlocked unlocked(memory_);
    cpu_backend().attention_forward(out, probs, qkv, b, t, nh, nkv, hd);
  }
  void attention_backward(float* dqkv, float* scratch, const float* dout, const float* qkv,
                          const float* probs, int64_t b, int64_t t, int64_t nh, int64_t nkv,
                          int64_t hd) override {
    const Unlocked unlocked(memory_);
    cpu_backend().attention_backward(dqkv, scratch, dout, qkv, probs, b, t, nh, nkv, hd);
  }
  int64_t attention_backward_scratch(int64_t b, int64_t t, int64_t nh, int64_t nkv,
                                     int64_t hd) const override {
    return cpu_backend().attention_backward_scratch(b, t, nh, nkv, hd);
  }
  void flash_attention_forward(float* out, float* lse, const float* qkv, int64_t b, int64_t t,
                               int64_t nh, int64_t nkv, int64_t hd) override {
    const Unlocked unlocked(memory_);
    cpu_backend().flash_attention_forward(out, lse, qkv, b, t, nh, nkv, hd);
  }
  void flash_attention_backward(float* dqkv, float* scratch, const float* dout, const float* qkv,
                                const float* out, const float* lse, int64_t b, int64_t t,
                                int64_t nh, int64_t nkv, int64_t hd) override {
    const Unlocked unlocked(memory_);
    cpu_backend().flash_attention_backward(dqkv, scratch, dout, qkv, out, lse, b, t, nh, nkv, hd);
  }
  int64_t flash_attention_backward_scratch(int64_t b, int64_t t, int64_t nh, int64_t nkv,
                                           int64_t hd) const override {
    return cpu_backend().flash_attention_backward_scratch(b, t, nh, nkv, hd);
  }
  void flash_attention_forward_bf16(float* out, float* lse, const uint16_t* qkv16, int64_t b,
                                    int64_t t, int64_t nh, int64_t nkv, int64_t hd) override {
    const Unlocked unlocked(memory_);
    cpu_backend().flash_attention_forward_bf16(out, lse, qkv16, b, t, nh, nkv, hd);
  }
  void flash_attention_backward_bf16(float* dqkv, float* scratch, const float* dout,
                                     const uint16_t* qkv16, const float* out, const float* lse,
                                     int64_t b, int64_t t, int64_t nh, int64_t nkv,
                                     int64_t hd) override {
    const Unlocked unlocked(memory_);
    cpu_backend().flash_attention_backward_bf16(dqkv, scratch, dout, qkv16, out, lse, b, t, nh, nkv,
                                                hd);
  }
  int64_t flash_attention_backward_bf16_scratch(int64_t b, int64_t t, int64_t nh, int64_t nkv,
                                                int64_t hd) const override {
    return cpu_backend().flash_attention_backward_bf16_scratch(b, t, nh, nkv, hd);
  }
  double cross_entropy_forward(float* losses, const float* logits, const int32_t* targets,
                               int64_t n, int64_t v) override {
    const Unlocked unlocked(memory_);
    return cpu_backend().cross_entropy_forward(losses, logits, targets, n, v);
  }
  double cross_entropy_forward_backward(float* losses, float* logits, const int32_t* targets,
                                        int64_t n, int64_t v, float grad_scale) override {
    const Unlocked unlocked(memory_);
    return cpu_backend().cross_entropy_forward_backward(losses, logits, targets, n, v, grad_scale);
  }
  double cross_entropy_forward_backward_bf16(float* losses, float* logits, const int32_t* targets,
                                             int64_t n, int64_t v, float grad_scale) override {
    const Unlocked unlocked(memory_);
    return cpu_backend().cross_entropy_forward_backward_bf16(losses, logits, targets, n, v,
                                                             grad_scale);
  }
  void vocab_parallel_ce_max(float* row_max, const float* logits, int64_t n,
                             int64_t v_local) override {
    const Unlocked unlocked(memory_);
    cpu_backend().vocab_parallel_ce_max(row_max, logits, n, v_local);
  }
  void vocab_parallel_ce_sums(float* sum_exp, float* target_logit, const float* logits,
                              const float* row_max, const int32_t* targets, int64_t n,
                              int64_t v_local, int64_t vocab_begin) override {
    const Unlocked unlocked(memory_);
    cpu_backend().vocab_parallel_ce_sums(sum_exp, target_logit, logits, row_max, targets, n,
                                         v_local, vocab_begin);
  }
  double vocab_parallel_ce_finish(float* losses, float* logits, const float* row_max,
                                  const float* sum_exp, const float* target_logit,
                                  const int32_t* targets, int64_t n, int64_t v_local,
                                  int64_t vocab_begin, bool backward, float grad_scale) override {
    const Unlocked unlocked(memory_);
    return cpu_backend().vocab_parallel_ce_finish(losses, logits, row_max, sum_exp, target_logit,
                                                  targets, n, v_local, vocab_begin, backward,
                                                  grad_scale);
  }
  void add_bias(float* y, const float* bias, int64_t n, int64_t c) override {
    const Unlocked unlocked(memory_);
    cpu_backend().add_bias(y, bias, n, c);
  }
  void add(float* out, const float* a, const float* b, int64_t count) override {
    const Unlocked unlocked(memory_);
    cpu_backend().add(out, a, b, count);
  }
  void add_inplace(float* y, const float* x, int64_t count) override {
    const Unlocked unlocked(memory_);
    cpu_backend().add_inplace(y, x, count);
  }
  void scale_inplace(float* y, float s, int64_t count) override {
    const Unlocked unlocked(memory_);
    cpu_backend().scale_inplace(y, s, count);
  }
  void adamw_update(float* p, const float* g, float* m, float* v, int64_t count, float lr,
                    float beta1, float beta2, float eps, float weight_decay, float grad_scale,
                    int64_t step, uint16_t* p_bf16) override {
    const Unlocked unlocked(memory_);
    cpu_backend().adamw_update(p, g, m, v, count, lr, beta1, beta2, eps, weight_decay, grad_scale,
                               step, p_bf16);
  }
  double sum_squares(const float* x, int64_t count) override {
    const Unlocked unlocked(memory_);
    return cpu_backend().sum_squares(x, count);
  }

 private:
  GuardedMemory memory_;
};

}  // namespace strata::testing
