// Backend: the device a model runs on, as the model code sees it. Every kernel the model calls and
// every copy or fill of its buffers goes through one Backend, so that the same Decoder (and the
// parallel code above it) runs on the CPU (kernels/cpu) or on a GPU (kernels/cuda): the device is
// a config choice, not a second model.
//
// The kernels have the semantics, layouts and conventions of kernels/cpu/kernels.h (parameter
// gradients accumulate, activation gradients are overwritten unless noted); the comments there
// are the specification. Pointers are device pointers of this backend, except where a parameter
// says `host`. A backend orders its own work (one compute stream on a GPU); a call that returns a
// value computed from device data (the losses) synchronises with that work.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/arena.h"
#include "core/dtype.h"
#include "core/tensor.h"  // Device
#include "kernels/cpu/moe.h"
#include "kernels/rope_spec.h"
#include "kernels/shapes.h"

namespace strata {

// A copy queued on a CopyQueue; 0 stands for "no copy" (waiting for it returns at once).
using CopyTicket = uint64_t;

// Asynchronous copies between the device and host memory that run beside the backend's compute
// queue (on a GPU: a stream of their own, so that a transfer overlaps kernels), for the offloads
// (optim/host_offload.h, the Decoder's activation offload). Ordering:
//   - a download or upload runs after every compute call queued on the backend before it (a
//     download so that it sees their results; an upload because it may overwrite what they read);
//   - downloads complete in the order they were queued, and so do uploads; the two directions may
//     overlap each other, so an upload into device memory that a download still reads must be
//     queued after compute_waits_for(that download) (or wait_host);
//   - compute queued after compute_waits_for(t) runs after copy t has completed: it sees an
//     upload's data, and may overwrite a download's source;
//   - wait_host(t) blocks the calling thread until copy t has completed.
// The host buffer of a copy must stay valid, and unwritten (an upload) or unread (a download),
// until its ticket has completed. Host buffers should come from Backend::alloc_host: pageable
// memory is copied correctly but, on a GPU, without overlap. One thread at a time per queue.
class CopyQueue {
 public:
  virtual ~CopyQueue() = default;
  virtual CopyTicket download(void* host, const void* device, size_t bytes) = 0;
  virtual CopyTicket upload(void* device, const void* host, size_t bytes) = 0;
  virtual void wait_host(CopyTicket ticket) = 0;
  virtual void compute_waits_for(CopyTicket ticket) = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device kind() const = 0;
  // Where the arena of a model on this backend gets its memory (null: host memory).
  virtual DeviceMemory* memory() = 0;

  // ---- memory ----------------------------------------------------------------------------------
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;  // both on the device
  virtual void copy_from_host(void* dst, const void* host, size_t bytes) = 0;
  virtual void copy_to_host(void* host, const void* src, size_t bytes) = 0;  // waits for it
  // `rows` rows of `width` bytes each, from src (rows `src_pitch` bytes apart) to dst (rows
  // `dst_pitch` bytes apart), both on the device: columns of a row-major buffer (the k|v heads
  // of the fused qkv rows, a rank's share of the heads).
  virtual void copy_2d(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width,
                       size_t rows) = 0;
  virtual void zero(void* dst, size_t bytes) = 0;
  virtual void fill(float* dst, float value, int64_t count) = 0;
  virtual void synchronize() = 0;  // waits until the device's queued work has finished
  // Page-locked host memory (the source and target of asynchronous copies), zero-filled and
  // aligned to at least kHostAlignment bytes; free_host(nullptr) does nothing. Throws when the
  // system refuses, naming the size.
  static constexpr size_t kHostAlignment = 4096;
  virtual void* alloc_host(size_t bytes) = 0;
  virtual void free_host(void* ptr) = 0;
  // A queue of asynchronous copies beside this backend's compute (see CopyQueue). It must be
  // destroyed before the backend; its destructor waits for the copies it still has in flight.
  virtual std::unique_ptr<CopyQueue> make_copy_queue() = 0;

  // ---- GEMM and linear layers -------------------------------------------------------------------
  // The operands' type is an argument, not a twin method: `ab` (gemm's a and b), `t` (a linear
  // layer's x and w), `qkv_type`, `y_type`, `grad_type` are DType::f32 for float buffers and
  // bf16 (or f16 where it says so) for uint16_t buffers holding 16-bit values. Results and
  // gradients are f32 unless said otherwise. A backend throws on a type it does not have.
  // C[m, n] = alpha * op(A) . op(B) + beta * C, row-major, op = transpose when trans_*: ab f32
  // or bf16.
  virtual void gemm(DType ab, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                    float alpha, const void* a, int64_t lda, const void* b, int64_t ldb, float beta,
                    float* c, int64_t ldc) = 0;
  // x and w f32, or bf16/f16 (the 16-bit working copies, products accumulated in f32).
  virtual void linear_forward(DType t, float* y, const void* x, const void* w, const float* bias,
                              const LinearShape& s, const LowpScratch& scratch) = 0;
  // dx, dw (accumulated into), dbias (accumulated into) may each be null.
  virtual void linear_backward(DType t, float* dx, float* dw, float* dbias, const float* dy,
                               const void* x, const void* w, const LinearShape& s,
                               const LowpScratch& scratch) = 0;
  virtual void to_lowp(DType t, uint16_t* out, const float* in, int64_t count) = 0;
  virtual void from_lowp(DType t, float* out, const uint16_t* in, int64_t count) = 0;

  // ---- embeddings ------------------------------------------------------------------------------
  virtual void embedding_forward(float* out, const int32_t* tokens, const float* wte,
                                 const float* wpe, int64_t b, int64_t t, int64_t c) = 0;
  virtual void embedding_backward(float* dwte, float* dwpe, const float* dout,
                                  const int32_t* tokens, int64_t b, int64_t t, int64_t c) = 0;
  virtual void embedding_range_forward(float* out, const int32_t* tokens, const float* wte_rows,
                                       int64_t vocab_begin, int64_t vocab_count, int64_t n,
                                       int64_t c) = 0;
  virtual void embedding_range_backward(float* dwte_rows, const float* dout, const int32_t* tokens,
                                        int64_t vocab_begin, int64_t vocab_count, int64_t n,
                                        int64_t c) = 0;
  // `positions` (host-visible int32 per row of the micro-batch; null: row % t): the position of
  // each row, as context parallelism and document masking give them.
  virtual void positions_add_forward(float* out, const float* wpe, int64_t first_row, int64_t n,
                                     int64_t t, int64_t c, const int32_t* positions) = 0;
  virtual void positions_add_backward(float* dwpe, const float* dout, int64_t first_row, int64_t n,
                                      int64_t t, int64_t c, const int32_t* positions) = 0;

  // ---- norms, activations, RoPE
  // ------------------------------------------------------------------
  virtual void layernorm_forward(float* y, float* mean, float* rstd, const float* x, const float* w,
                                 const float* bias, int64_t n, int64_t c, float eps) = 0;
  virtual void layernorm_backward(float* dx, float* dw, float* dbias, const float* dy,
                                  const float* x, const float* w, const float* mean,
                                  const float* rstd, int64_t n, int64_t c) = 0;
  virtual void rmsnorm_forward(float* y, float* rstd, const float* x, const float* w, int64_t n,
                               int64_t c, float eps) = 0;
  virtual void rmsnorm_backward(float* dx, float* dw, const float* dy, const float* x,
                                const float* w, const float* rstd, int64_t n, int64_t c) = 0;
  virtual void gelu_forward(DType y_type, void* y, const float* x, int64_t count) = 0;  // f32, bf16
  virtual void gelu_backward(float* dx, const float* x, const float* dy, int64_t count) = 0;
  virtual void swiglu_forward(float* y, const float* gate_up, int64_t n, int64_t f) = 0;
  virtual void swiglu_backward(float* dgate_up, const float* gate_up, const float* dy, int64_t n,
                               int64_t f) = 0;
  // positions: each row's position (null: row % t), as positions_add_forward.
  virtual void rope_forward(float* qkv, const AttentionShape& s, const RopeSpec& rope,
                            const int32_t* positions) = 0;
  virtual void rope_backward(float* dqkv, const AttentionShape& s, const RopeSpec& rope,
                             const int32_t* positions) = 0;
  virtual void head_rmsnorm_forward(float* qkv, float* pre, float* rstd, const float* wq,
                                    const float* wk, const AttentionShape& s, float eps) = 0;
  virtual void head_rmsnorm_backward(float* dqkv, float* dwq, float* dwk, const float* pre,
                                     const float* rstd, const float* wq, const float* wk,
                                     const AttentionShape& s) = 0;

  // ---- Mixture of Experts (kernels/cpu/moe.h: layouts, conventions) ----------------------------
  // expert_idx, row_token, row_slot, token_row are int32 and offsets, tokens_per_expert int64,
  // all device buffers. The losses and the dispatch plan's dropped count come back to the host
  // (synchronising).
  virtual void moe_route_forward(kernels::MoeGating gating, int32_t* expert_idx, float* weight,
                                 float* probs, const float* logits, const float* bias, int64_t n,
                                 int64_t e, int64_t k, bool normalize, float scale) = 0;
  virtual void moe_route_backward(kernels::MoeGating gating, float* dlogits, const float* dweight,
                                  const float* probs, const int32_t* expert_idx, int64_t n,
                                  int64_t e, int64_t k, bool normalize, float scale) = 0;
  virtual double moe_aux_loss_forward(kernels::MoeGating gating, const float* probs,
                                      const int64_t* tokens_per_expert, int64_t n, int64_t e,
                                      int64_t k, float coeff) = 0;
  virtual void moe_aux_loss_backward(kernels::MoeGating gating, float* dlogits, const float* probs,
                                     const int64_t* tokens_per_expert, int64_t n, int64_t e,
                                     int64_t k, float coeff) = 0;
  virtual double moe_z_loss_forward(const float* logits, int64_t n, int64_t e, float coeff) = 0;
  virtual void moe_z_loss_backward(float* dlogits, const float* logits, int64_t n, int64_t e,
                                   float coeff) = 0;
  virtual int64_t moe_dispatch_plan(int64_t* offsets, int32_t* row_token, int32_t* row_slot,
                                    int32_t* token_row, int64_t* tokens_per_expert,
                                    const int32_t* expert_idx, int64_t n, int64_t e, int64_t k,
                                    int64_t capacity) = 0;
  virtual void moe_permute_forward(float* xs, const float* x, const int32_t* row_token,
                                   int64_t rows, int64_t c) = 0;
  virtual void moe_permute_backward(float* dx, const float* dxs, const int32_t* token_row,
                                    int64_t n, int64_t k, int64_t c) = 0;
  virtual void moe_grouped_linear_forward(float* ys, const float* xs, const float* w,
                                          const int64_t* offsets, int64_t e, int64_t in,
                                          int64_t out) = 0;
  virtual void moe_grouped_linear_backward(float* dxs, float* dw, const float* dys, const float* xs,
                                           const float* w, const int64_t* offsets, int64_t e,
                                           int64_t in, int64_t out) = 0;
  virtual void moe_combine_forward(float* y, const float* ys, const float* weight,
                                   const int32_t* token_row, int64_t n, int64_t k, int64_t c) = 0;
  virtual void moe_combine_backward(float* dys, float* dweight, const float* dy, const float* ys,
                                    const float* weight, const int32_t* token_row, int64_t n,
                                    int64_t k, int64_t c) = 0;

  // ---- attention -------------------------------------------------------------------------------
  // Naive attention (materialised probabilities); a backend may not have it (supports_naive).
  virtual bool supports_naive_attention() const = 0;
  virtual void attention_forward(float* out, float* probs, const float* qkv,
                                 const AttentionShape& s) = 0;
  virtual void attention_backward(float* dqkv, float* scratch, const float* dout, const float* qkv,
                                  const float* probs, const AttentionShape& s) = 0;
  virtual int64_t attention_backward_scratch(const AttentionShape& s) const = 0;
  // Flash attention over qkv of qkv_type f32 or bf16 (out, lse and the gradients are f32).
  virtual void flash_attention_forward(DType qkv_type, float* out, float* lse, const void* qkv,
                                       const AttentionShape& s) = 0;
  virtual void flash_attention_backward(DType qkv_type, float* dqkv, float* scratch,
                                        const float* dout, const void* qkv, const float* out,
                                        const float* lse, const AttentionShape& s) = 0;
  virtual int64_t flash_attention_backward_scratch(DType qkv_type,
                                                   const AttentionShape& s) const = 0;
  // Attention with a key range per query row (kernels/cpu/attention_ranges.h: layouts, strides
  // and the merge rule): the block computation of context parallelism and document masking.
  virtual void attention_ranges_forward(float* out, float* lse, const float* q, int64_t q_stride,
                                        const float* k, const float* v, int64_t kv_stride,
                                        const int32_t* key_begin, const int32_t* key_end,
                                        const RangeAttentionShape& s) = 0;
  virtual void attention_ranges_merge(float* out_acc, float* lse_acc, const float* out_part,
                                      const float* lse_part, const RangeAttentionShape& s) = 0;
  virtual int64_t attention_ranges_backward_scratch(int64_t head_dim) const = 0;
  virtual void attention_ranges_backward(float* dq, float* dk, float* dv, float* scratch,
                                         const float* dout, const float* q, int64_t q_stride,
                                         const float* k, const float* v, int64_t kv_stride,
                                         const float* out, const float* lse,
                                         const int32_t* key_begin, const int32_t* key_end,
                                         const RangeAttentionShape& s) = 0;

  // ---- loss ------------------------------------------------------------------------------------
  // Each returns the sum of the valid rows' losses (synchronising with the device).
  virtual double cross_entropy_forward(float* losses, const float* logits, const int32_t* targets,
                                       int64_t n, int64_t v) = 0;
  // The gradient of the logits overwrites them: f32, or grad_type bf16 (packed at the front of
  // the same buffer, row-major [n, v] uint16_t: the 16-bit head GEMMs' operand).
  virtual double cross_entropy_forward_backward(DType grad_type, float* losses, float* logits,
                                                const int32_t* targets, int64_t n, int64_t v,
                                                float grad_scale) = 0;
  virtual void vocab_parallel_ce_max(float* row_max, const float* logits, int64_t n,
                                     int64_t v_local) = 0;
  virtual void vocab_parallel_ce_sums(float* sum_exp, float* target_logit, const float* logits,
                                      const float* row_max, const int32_t* targets, int64_t n,
                                      int64_t v_local, int64_t vocab_begin) = 0;
  virtual double vocab_parallel_ce_finish(float* losses, float* logits, const float* row_max,
                                          const float* sum_exp, const float* target_logit,
                                          const int32_t* targets, int64_t n, int64_t v_local,
                                          int64_t vocab_begin, bool backward, float grad_scale) = 0;

  // ---- element-wise and optimizer
  // ----------------------------------------------------------------
  virtual void add_bias(float* y, const float* bias, int64_t n, int64_t c) = 0;
  virtual void add(float* out, const float* a, const float* b, int64_t count) = 0;
  virtual void add_inplace(float* y, const float* x, int64_t count) = 0;
  virtual void scale_inplace(float* y, float s, int64_t count) = 0;
  virtual void adamw_update(float* p, const float* g, float* m, float* v, int64_t count, float lr,
                            float beta1, float beta2, float eps, float weight_decay,
                            float grad_scale, int64_t step, uint16_t* p_bf16) = 0;
  virtual double sum_squares(const float* x, int64_t count) = 0;  // synchronises
};

// Throws, naming the method and the type, unless `ok`: a Backend method given an operand type
// that it does not have (an f16 flash attention).
void check_operand_type(bool ok, const char* method, DType t);

// The CPU backend (kernels/cpu), shared by every model that does not name another device.
Backend& cpu_backend();

// A CopyQueue whose copies are backend.copy_to_host / copy_from_host, complete when they return
// (tickets only count): the CPU's queue, and that of test backends built on the CPU kernels.
std::unique_ptr<CopyQueue> make_synchronous_copy_queue(Backend& backend);
// Host memory as the CPU backend hands it out: aligned, zero-filled (not page-locked: on the CPU
// every copy is a memcpy anyway).
void* aligned_host_alloc(size_t bytes);

}  // namespace strata
