// The CUDA backend (see cuda_backend.h): one compute stream, cuBLASLt for the GEMMs (GemmLt, one
// per backend since it owns a workspace), the kernels of kernels/cuda for the rest, and a
// DeviceMemory on cudaMalloc for the model's Arena.
#include "kernels/cuda/cuda_backend.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <mutex>
#include <unordered_map>

#include "core/error.h"
#include "kernels/cuda/attention_ranges.h"
#include "kernels/cuda/copy_queue.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/flash_attention.h"
#include "kernels/cuda/flash_attention_mma.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/kernels.h"

namespace strata {

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

// "N bytes (x MiB)" and the device's free / total memory, for out-of-memory messages.
std::string memory_situation(size_t bytes) {
  size_t free_bytes = 0, total = 0;
  std::string info = "unknown";
  if (cudaMemGetInfo(&free_bytes, &total) == cudaSuccess) {
    info = cat(static_cast<int64_t>(double(free_bytes) / kMiB), " MiB free of ",
               static_cast<int64_t>(double(total) / kMiB), " MiB");
  } else {
    cudaGetLastError();
  }
  return cat(bytes, " bytes (", static_cast<int64_t>(double(bytes) / kMiB),
             " MiB); the device has ", info);
}

// cudaMalloc, or a strata::Error that says what was asked for, what the device has and what to do.
void* device_malloc(size_t bytes, const std::string& device, const char* what) {
  void* ptr = nullptr;
  const cudaError_t err = cudaMalloc(&ptr, bytes);
  if (err == cudaSuccess) return ptr;
  cudaGetLastError();  // an allocation failure is not sticky: clear it for the next call
  fail(device, ": cannot allocate ", what, ": cudaMalloc of ", memory_situation(bytes), " (",
       cudaGetErrorString(err),
       "). Use a smaller micro-batch or sequence length, recompute "
       "activations, or shard the model over more GPUs; `strata plan` estimates a config's memory");
}

// DeviceMemory for an Arena: zero-filled cudaMalloc blocks with the requested alignment, behind a
// cache. cudaMalloc and cudaFree synchronise the device and cost milliseconds, so a freed block is
// kept and handed out again to a later request of the same rounded size (whole 2 MiB for large
// blocks, 512 B for small ones); the cache is emptied, and the cudaMalloc tried again, when the
// device runs out. Alignment above cudaMalloc's 256 bytes is bought with that much slack in the
// block, so a block of a size class serves any request of it.
class CudaMemory final : public DeviceMemory {
 public:
  CudaMemory(int device, cudaStream_t stream) : device_(device), stream_(stream) {}
  ~CudaMemory() override {
    // Blocks an Arena still holds (it should have been destroyed first) are given back too.
    for (auto& [ptr, block] : live_) cudaFree(block.base);
    for (auto& [size, base] : cache_) cudaFree(base);
  }

  void* allocate(size_t bytes, size_t align) override {
    STRATA_CHECK(align > 0 && (align & (align - 1)) == 0, name(), ": alignment ", align,
                 " is not a power of two");
    bytes = std::max<size_t>(bytes, 1);
    const size_t size = size_class(bytes + (align > 256 ? align : 0));
    std::lock_guard<std::mutex> lock(mutex_);
    void* base = nullptr;
    if (const auto hit = cache_.find(size); hit != cache_.end()) {
      base = hit->second;
      cache_.erase(hit);
      cached_bytes_ -= size;
    } else {
      base = malloc_or_empty_cache(size);
    }
    const uintptr_t at = (reinterpret_cast<uintptr_t>(base) + align - 1) / align * align;
    void* ptr = reinterpret_cast<void*>(at);
    live_[ptr] = Block{base, size};
    // Zero on the compute stream, then wait: the block reads as zeros from any stream (NCCL's
    // included) and from the host, and a reused block is no longer read by earlier kernels.
    // Start-up only (DESIGN invariant 5), so the wait costs nothing.
    STRATA_CUDA_CHECK(cudaMemsetAsync(ptr, 0, bytes, stream_));
    STRATA_CUDA_CHECK(cudaStreamSynchronize(stream_));
    return ptr;
  }

  void free(void* ptr) override {
    if (ptr == nullptr) return;
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = live_.find(ptr);
    if (it == live_.end()) {
      std::fprintf(stderr, "strata: %s: free of a pointer it did not allocate (%p), ignored\n",
                   name().c_str(), ptr);
      return;
    }
    // Kept for reuse; kernels still queued that read it finish before the next allocate()
    // returns it (its zero fill waits for the stream).
    cache_.emplace(it->second.size, it->second.base);
    cached_bytes_ += it->second.size;
    live_.erase(it);
  }

  std::string name() const override { return cat("cuda:", device_); }

 private:
  struct Block {
    void* base;   // what cudaMalloc returned
    size_t size;  // its size class
  };
  static size_t size_class(size_t bytes) {
    const size_t unit = bytes >= (size_t{1} << 20) ? size_t{2} << 20 : 512;
    return (bytes + unit - 1) / unit * unit;
  }
  void* malloc_or_empty_cache(size_t size) {
    void* base = nullptr;
    if (cached_bytes_ > 0) {
      if (cudaMalloc(&base, size) == cudaSuccess) return base;
      cudaGetLastError();  // not sticky; give the cache back and try once more
      // cudaFree waits for the device, so no queued kernel still reads a cached block.
      for (auto& [s, b] : cache_) cudaFree(b);
      cache_.clear();
      cached_bytes_ = 0;
    }
    return device_malloc(size, name(), "an arena block");
  }

  int device_;
  cudaStream_t stream_;
  std::mutex mutex_;
  std::unordered_map<void*, Block> live_;  // pointer handed out -> its block
  std::multimap<size_t, void*> cache_;     // freed blocks by size class
  size_t cached_bytes_ = 0;
};

// Grow-only device scratch. Growing frees the old block (cudaFree waits for the device, so queued
// kernels that still use it have finished) and allocates the new size with 25% headroom: the first
// call of a larger shape synchronises; repeated shapes never allocate.
class Scratch {
 public:
  explicit Scratch(std::string device) : device_(std::move(device)) {}
  ~Scratch() { cudaFree(ptr_); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;

  float* floats(int64_t count) {
    const size_t bytes = static_cast<size_t>(std::max<int64_t>(count, 1)) * sizeof(float);
    if (bytes > bytes_) {
      STRATA_CUDA_CHECK(cudaFree(ptr_));
      ptr_ = nullptr;
      bytes_ = 0;
      const size_t want = bytes + bytes / 4;
      ptr_ = device_malloc(want, device_, "backend scratch");
      bytes_ = want;
    }
    return static_cast<float*>(ptr_);
  }

 private:
  std::string device_;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

int select_device(int device) {
  std::string why;
  const int count = cuda::device_count(&why);
  STRATA_CHECK(device >= 0 && device < count, "make_cuda_backend: no usable CUDA device ", device,
               ": this process sees ", count, " CUDA device(s)",
               count == 0 ? cat(" (", why, ")") : cat(" (valid: 0..", count - 1, ")"),
               "; check the driver (nvidia-smi) and CUDA_VISIBLE_DEVICES");
  STRATA_CUDA_CHECK(cudaSetDevice(device));
  return device;
}

void check_lowp(DType t, const char* what) {
  STRATA_CHECK(t == DType::bf16 || t == DType::f16, what, ": dtype ", dtype_name(t),
               " is not bf16 or f16");
}

[[noreturn]] void no_naive_attention(const char* what) {
  fail(what,
       ": naive attention is not available on cuda (it would materialise the b x nh x t x "
       "t probabilities); use model.attention = \"flash\"");
}

[[noreturn]] void moe_not_on_gpu(const char* what) {
  fail("CudaBackend::", what,
       ": MoE is not on the GPU yet (model.moe.experts > 0 runs on "
       "system.device = \"cpu\")");
}

class CudaBackendImpl final : public CudaBackend {
 public:
  explicit CudaBackendImpl(int device)
      : device_(select_device(device)),
        memory_(device_, stream_.get()),
        norm_scratch_(memory_.name()) {
    reduce_ = static_cast<double*>(
        device_malloc(static_cast<size_t>(1 + cuda::sum_squares_scratch_doubles()) * sizeof(double),
                      memory_.name(), "reduction scratch"));
  }
  ~CudaBackendImpl() override {
    cudaStreamSynchronize(stream_.get());  // queued work may still use the scratch below
    cudaFree(reduce_);
  }

  int device() const override { return device_; }
  cudaStream_t stream() const override { return stream_.get(); }
  DeviceMemory* memory() override { return &memory_; }

  // ---- memory ---------------------------------------------------------------------------------
  void copy(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0 || dst == src) return;
    STRATA_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s()));
  }
  // Waits, so the caller may reuse the host buffer at once (and pinned memory, which the copy
  // would otherwise read later, is safe too).
  void copy_from_host(void* dst, const void* host, size_t bytes) override {
    if (bytes == 0) return;
    STRATA_CUDA_CHECK(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, s()));
    stream_.synchronize();
  }
  void copy_to_host(void* host, const void* src, size_t bytes) override {
    if (bytes == 0) return;
    STRATA_CUDA_CHECK(cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost, s()));
    stream_.synchronize();
  }
  void copy_2d(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width,
               size_t rows) override {
    if (width == 0 || rows == 0) return;
    STRATA_CUDA_CHECK(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, width, rows,
                                        cudaMemcpyDeviceToDevice, s()));
  }
  void zero(void* dst, size_t bytes) override {
    if (bytes == 0) return;
    STRATA_CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, s()));
  }
  void fill(float* dst, float value, int64_t count) override { cuda::fill(dst, value, count, s()); }
  void* alloc_host(size_t bytes) override { return cuda::alloc_pinned(bytes); }
  void free_host(void* ptr) override { cuda::free_pinned(ptr); }
  std::unique_ptr<CopyQueue> make_copy_queue() override { return cuda::make_copy_queue(s()); }
  void synchronize() override { stream_.synchronize(); }

  // ---- GEMM and linear layers -----------------------------------------------------------------
  void gemm(DType ab, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
            const void* a, int64_t lda, const void* b, int64_t ldb, float beta, float* c,
            int64_t ldc) override {
    check_operand_type(ab == DType::f32 || ab == DType::bf16, "gemm", ab);
    if (m == 0 || n == 0) return;
    if (k == 0) return cuda::scale_matrix(c, ldc, m, n, beta, s());
    if (ab == DType::f32)
      return lt_.gemm_f32(trans_a, trans_b, m, n, k, alpha, static_cast<const float*>(a), lda,
                          static_cast<const float*>(b), ldb, beta, c, ldc, s());
    lt_.gemm_bf16(trans_a, trans_b, m, n, k, alpha, static_cast<const uint16_t*>(a), lda,
                  static_cast<const uint16_t*>(b), ldb, beta, c, ldc, s());
  }
  // bf16: one GEMM with the bias in its epilogue. f16: the GEMM, then the bias added (the same
  // single rounding of acc + bias as the CPU's beta = 1 GEMM over bias rows). scratch.f32 is not
  // used: the GPU multiplies f16 directly.
  void linear_forward(DType t, float* y, const void* x, const void* w, const float* bias,
                      const LinearShape& sh, const LowpScratch& /*scratch*/) override {
    if (t != DType::f32) check_lowp(t, "linear_forward");
    if (sh.rows == 0) return;
    if (t == DType::f32)
      return cuda::linear_forward(lt_, y, static_cast<const float*>(x),
                                  static_cast<const float*>(w), bias, sh.rows, sh.in, sh.out, s());
    const auto* x16 = static_cast<const uint16_t*>(x);
    const auto* w16 = static_cast<const uint16_t*>(w);
    if (t == DType::bf16)
      return cuda::linear_forward_bf16(lt_, y, x16, w16, bias, sh.rows, sh.in, sh.out, s());
    lowp_gemm(t, false, true, sh.rows, sh.out, sh.in, x16, sh.in, w16, sh.in, 0.0f, y, sh.out);
    if (bias) cuda::add_bias(y, bias, sh.rows, sh.out, s());
  }
  // 16-bit: the CPU's algorithm: dbias from the f32 dy; dy rounded to t in blocks of rows that
  // fit scratch.dy, each block's dx rows and dw contribution from it (dw accumulating block by
  // block).
  void linear_backward(DType t, float* dx, float* dw, float* dbias, const float* dy, const void* x,
                       const void* w, const LinearShape& sh, const LowpScratch& scratch) override {
    const int64_t n = sh.rows, in = sh.in, out = sh.out;
    if (t == DType::f32) {
      if (n == 0) return;  // no rows: nothing to overwrite, nothing to accumulate
      return cuda::linear_backward(lt_, dx, dw, dbias, dy, static_cast<const float*>(x),
                                   static_cast<const float*>(w), n, in, out, s());
    }
    check_lowp(t, "linear_backward");
    STRATA_CHECK(scratch.dy_capacity >= out, "linear_backward: a dy block of ", scratch.dy_capacity,
                 " elements cannot hold one row of ", out);
    if (n == 0) return;
    if (dbias)
      cuda::linear_backward(lt_, nullptr, nullptr, dbias, dy, nullptr, nullptr, n, in, out, s());
    if (!dx && !dw) return;
    const auto* x16 = static_cast<const uint16_t*>(x);
    const auto* w16 = static_cast<const uint16_t*>(w);
    const int64_t rows = std::min(n, scratch.dy_capacity / out);
    for (int64_t r0 = 0; r0 < n; r0 += rows) {
      const int64_t r = std::min(rows, n - r0);
      to_lowp(t, scratch.dy, dy + r0 * out, r * out);
      if (dx)  // dx[r, in] = dy[r, out] w[out, in]
        lowp_gemm(t, false, false, r, in, out, scratch.dy, out, w16, in, 0.0f, dx + r0 * in, in);
      if (dw)  // dw[out, in] += dy^T[out, r] x[r, in]
        lowp_gemm(t, true, false, out, in, r, scratch.dy, out, x16 + r0 * in, in, 1.0f, dw, in);
    }
  }
  void to_lowp(DType t, uint16_t* out, const float* in, int64_t count) override {
    check_lowp(t, "to_lowp");
    t == DType::bf16 ? cuda::to_bf16(out, in, count, s()) : cuda::to_f16(out, in, count, s());
  }
  void from_lowp(DType t, float* out, const uint16_t* in, int64_t count) override {
    check_lowp(t, "from_lowp");
    t == DType::bf16 ? cuda::from_bf16(out, in, count, s()) : cuda::from_f16(out, in, count, s());
  }

  // ---- embeddings -----------------------------------------------------------------------------
  void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                         int64_t b, int64_t t, int64_t c) override {
    cuda::embedding_forward(out, tokens, wte, wpe, b, t, c, s());
  }
  void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                          int64_t b, int64_t t, int64_t c) override {
    cuda::embedding_backward(dwte, dwpe, dout, tokens, b, t, c, s());
  }
  void embedding_range_forward(float* out, const int32_t* tokens, const float* wte_rows,
                               int64_t vocab_begin, int64_t vocab_count, int64_t n,
                               int64_t c) override {
    cuda::embedding_range_forward(out, tokens, wte_rows, vocab_begin, vocab_count, n, c, s());
  }
  void embedding_range_backward(float* dwte_rows, const float* dout, const int32_t* tokens,
                                int64_t vocab_begin, int64_t vocab_count, int64_t n,
                                int64_t c) override {
    cuda::embedding_range_backward(dwte_rows, dout, tokens, vocab_begin, vocab_count, n, c, s());
  }
  void positions_add_forward(float* out, const float* wpe, int64_t first_row, int64_t n, int64_t t,
                             int64_t c, const int32_t* positions) override {
    cuda::positions_add_forward(out, wpe, first_row, n, t, c, positions, s());
  }
  void positions_add_backward(float* dwpe, const float* dout, int64_t first_row, int64_t n,
                              int64_t t, int64_t c, const int32_t* positions) override {
    cuda::positions_add_backward(dwpe, dout, first_row, n, t, c, positions, s());
  }

  // ---- norms, activations, RoPE ---------------------------------------------------------------
  void layernorm_forward(float* y, float* mean, float* rstd, const float* x, const float* w,
                         const float* bias, int64_t n, int64_t c, float eps) override {
    cuda::layernorm_forward(y, mean, rstd, x, w, bias, n, c, eps, s());
  }
  void layernorm_backward(float* dx, float* dw, float* dbias, const float* dy, const float* x,
                          const float* w, const float* mean, const float* rstd, int64_t n,
                          int64_t c) override {
    float* scratch = norm_scratch_.floats(cuda::layernorm_backward_scratch_floats(n, c));
    cuda::layernorm_backward(dx, dw, dbias, scratch, dy, x, w, mean, rstd, n, c, s());
  }
  void rmsnorm_forward(float* y, float* rstd, const float* x, const float* w, int64_t n, int64_t c,
                       float eps) override {
    cuda::rmsnorm_forward(y, rstd, x, w, n, c, eps, s());
  }
  void rmsnorm_backward(float* dx, float* dw, const float* dy, const float* x, const float* w,
                        const float* rstd, int64_t n, int64_t c) override {
    float* scratch = norm_scratch_.floats(cuda::rmsnorm_backward_scratch_floats(n, c));
    cuda::rmsnorm_backward(dx, dw, scratch, dy, x, w, rstd, n, c, s());
  }
  void gelu_forward(DType y_type, void* y, const float* x, int64_t count) override {
    if (y_type == DType::f32) return cuda::gelu_forward(static_cast<float*>(y), x, count, s());
    check_operand_type(y_type == DType::bf16, "gelu_forward", y_type);
    cuda::gelu_forward_bf16(static_cast<uint16_t*>(y), x, count, s());
  }
  void gelu_backward(float* dx, const float* x, const float* dy, int64_t count) override {
    cuda::gelu_backward(dx, x, dy, count, s());
  }
  void swiglu_forward(float* y, const float* gate_up, int64_t n, int64_t f) override {
    cuda::swiglu_forward(y, gate_up, n, f, s());
  }
  void swiglu_backward(float* dgate_up, const float* gate_up, const float* dy, int64_t n,
                       int64_t f) override {
    cuda::swiglu_backward(dgate_up, gate_up, dy, n, f, s());
  }
  // The MoE kernels are CPU-only so far (GitHub issue 21).
  void moe_route_forward(kernels::MoeGating, int32_t*, float*, float*, const float*, const float*,
                         int64_t, int64_t, int64_t, bool, float) override {
    moe_not_on_gpu("moe_route_forward");
  }
  void moe_route_backward(kernels::MoeGating, float*, const float*, const float*, const int32_t*,
                          int64_t, int64_t, int64_t, bool, float) override {
    moe_not_on_gpu("moe_route_backward");
  }
  double moe_aux_loss_forward(kernels::MoeGating, const float*, const int64_t*, int64_t, int64_t,
                              int64_t, float) override {
    moe_not_on_gpu("moe_aux_loss_forward");
  }
  void moe_aux_loss_backward(kernels::MoeGating, float*, const float*, const int64_t*, int64_t,
                             int64_t, int64_t, float) override {
    moe_not_on_gpu("moe_aux_loss_backward");
  }
  double moe_z_loss_forward(const float*, int64_t, int64_t, float) override {
    moe_not_on_gpu("moe_z_loss_forward");
  }
  void moe_z_loss_backward(float*, const float*, int64_t, int64_t, float) override {
    moe_not_on_gpu("moe_z_loss_backward");
  }
  int64_t moe_dispatch_plan(int64_t*, int32_t*, int32_t*, int32_t*, int64_t*, const int32_t*,
                            int64_t, int64_t, int64_t, int64_t) override {
    moe_not_on_gpu("moe_dispatch_plan");
  }
  void moe_permute_forward(float*, const float*, const int32_t*, int64_t, int64_t) override {
    moe_not_on_gpu("moe_permute_forward");
  }
  void moe_permute_backward(float*, const float*, const int32_t*, int64_t, int64_t,
                            int64_t) override {
    moe_not_on_gpu("moe_permute_backward");
  }
  void moe_grouped_linear_forward(float*, const float*, const float*, const int64_t*, int64_t,
                                  int64_t, int64_t) override {
    moe_not_on_gpu("moe_grouped_linear_forward");
  }
  void moe_grouped_linear_backward(float*, float*, const float*, const float*, const float*,
                                   const int64_t*, int64_t, int64_t, int64_t) override {
    moe_not_on_gpu("moe_grouped_linear_backward");
  }
  void moe_combine_forward(float*, const float*, const float*, const int32_t*, int64_t, int64_t,
                           int64_t) override {
    moe_not_on_gpu("moe_combine_forward");
  }
  void moe_combine_backward(float*, float*, const float*, const float*, const float*,
                            const int32_t*, int64_t, int64_t, int64_t) override {
    moe_not_on_gpu("moe_combine_backward");
  }
  void rope_forward(float* qkv, const AttentionShape& shape, const RopeSpec& rope,
                    const int32_t* positions) override {
    cuda::rope_forward(qkv, shape, rope, positions, s());
  }
  void rope_backward(float* dqkv, const AttentionShape& shape, const RopeSpec& rope,
                     const int32_t* positions) override {
    cuda::rope_backward(dqkv, shape, rope, positions, s());
  }
  void head_rmsnorm_forward(float* qkv, float* pre, float* rstd, const float* wq, const float* wk,
                            const AttentionShape& shape, float eps) override {
    cuda::head_rmsnorm_forward(qkv, pre, rstd, wq, wk, shape, eps, s());
  }
  void head_rmsnorm_backward(float* dqkv, float* dwq, float* dwk, const float* pre,
                             const float* rstd, const float* wq, const float* wk,
                             const AttentionShape& shape) override {
    float* scratch = norm_scratch_.floats(cuda::head_rmsnorm_backward_scratch_floats(shape));
    cuda::head_rmsnorm_backward(dqkv, dwq, dwk, scratch, pre, rstd, wq, wk, shape, s());
  }

  // ---- attention ------------------------------------------------------------------------------
  bool supports_naive_attention() const override { return false; }
  void attention_forward(float*, float*, const float*, const AttentionShape&) override {
    no_naive_attention("attention_forward");
  }
  void attention_backward(float*, float*, const float*, const float*, const float*,
                          const AttentionShape&) override {
    no_naive_attention("attention_backward");
  }
  int64_t attention_backward_scratch(const AttentionShape&) const override {
    no_naive_attention("attention_backward_scratch");
  }
  // f32: the scalar kernels. bf16: the tensor-core kernels (flash_attention_mma.h), or the
  // scalar ones with STRATA_FLASH_KERNEL=scalar. The scratch is the kernels' workspace (D =
  // rowsum(dO o O)), counted in floats; for bf16 it fits either (the mma workspace is larger).
  void flash_attention_forward(DType qkv_type, float* out, float* lse, const void* qkv,
                               const AttentionShape& sh) override {
    check_operand_type(qkv_type == DType::f32 || qkv_type == DType::bf16, "flash_attention_forward",
                       qkv_type);
    if (qkv_type == DType::f32)
      return cuda::flash_attention_forward(out, lse, static_cast<const float*>(qkv), sh.b, sh.t,
                                           sh.heads, sh.kv_heads, sh.head_dim, s());
    const auto* qkv16 = static_cast<const uint16_t*>(qkv);
    if (cuda::flash_attention_mma_enabled())
      return cuda::flash_attention_mma_forward_bf16(out, lse, qkv16, sh.b, sh.t, sh.heads,
                                                    sh.kv_heads, sh.head_dim, s());
    cuda::flash_attention_forward_bf16(out, lse, qkv16, sh.b, sh.t, sh.heads, sh.kv_heads,
                                       sh.head_dim, s());
  }
  void flash_attention_backward(DType qkv_type, float* dqkv, float* scratch, const float* dout,
                                const void* qkv, const float* out, const float* lse,
                                const AttentionShape& sh) override {
    check_operand_type(qkv_type == DType::f32 || qkv_type == DType::bf16,
                       "flash_attention_backward", qkv_type);
    if (qkv_type == DType::f32)
      return cuda::flash_attention_backward(dqkv, scratch, dout, static_cast<const float*>(qkv),
                                            out, lse, sh.b, sh.t, sh.heads, sh.kv_heads,
                                            sh.head_dim, s());
    const auto* qkv16 = static_cast<const uint16_t*>(qkv);
    if (cuda::flash_attention_mma_enabled())
      return cuda::flash_attention_mma_backward_bf16(dqkv, scratch, dout, qkv16, out, lse, sh.b,
                                                     sh.t, sh.heads, sh.kv_heads, sh.head_dim, s());
    cuda::flash_attention_backward_bf16(dqkv, scratch, dout, qkv16, out, lse, sh.b, sh.t, sh.heads,
                                        sh.kv_heads, sh.head_dim, s());
  }
  int64_t flash_attention_backward_scratch(DType qkv_type,
                                           const AttentionShape& sh) const override {
    check_operand_type(qkv_type == DType::f32 || qkv_type == DType::bf16,
                       "flash_attention_backward_scratch", qkv_type);
    const int64_t scalar =
        cuda::flash_attention_backward_workspace(sh.b, sh.t, sh.heads, sh.kv_heads, sh.head_dim);
    if (qkv_type == DType::f32) return floats_for(scalar);
    return floats_for(std::max(scalar, cuda::flash_attention_mma_backward_workspace(
                                           sh.b, sh.t, sh.heads, sh.kv_heads, sh.head_dim)));
  }

  // Context parallelism and document masking (kernels/cuda/attention_ranges.h). The backward
  // needs no scratch: it recomputes what the CPU kernel keeps in its per-thread tiles.
  void attention_ranges_forward(float* out, float* lse, const float* q, int64_t q_stride,
                                const float* k, const float* v, int64_t kv_stride,
                                const int32_t* key_begin, const int32_t* key_end,
                                const RangeAttentionShape& shape) override {
    cuda::attention_ranges_forward(out, lse, q, q_stride, k, v, kv_stride, key_begin, key_end,
                                   shape, s());
  }
  void attention_ranges_merge(float* out_acc, float* lse_acc, const float* out_part,
                              const float* lse_part, const RangeAttentionShape& shape) override {
    cuda::attention_ranges_merge(out_acc, lse_acc, out_part, lse_part, shape, s());
  }
  int64_t attention_ranges_backward_scratch(int64_t) const override { return 0; }
  void attention_ranges_backward(float* dq, float* dk, float* dv, float* /*scratch*/,
                                 const float* dout, const float* q, int64_t q_stride,
                                 const float* k, const float* v, int64_t kv_stride,
                                 const float* out, const float* lse, const int32_t* key_begin,
                                 const int32_t* key_end,
                                 const RangeAttentionShape& shape) override {
    cuda::attention_ranges_backward(dq, dk, dv, dout, q, q_stride, k, v, kv_stride, out, lse,
                                    key_begin, key_end, shape, s());
  }

  // ---- loss -----------------------------------------------------------------------------------
  double cross_entropy_forward(float* losses, const float* logits, const int32_t* targets,
                               int64_t n, int64_t v) override {
    cuda::cross_entropy_forward(losses, logits, targets, n, v, s());
    return total_loss(losses, targets, n);
  }
  double cross_entropy_forward_backward(DType grad_type, float* losses, float* logits,
                                        const int32_t* targets, int64_t n, int64_t v,
                                        float grad_scale) override {
    if (grad_type == DType::f32) {
      cuda::cross_entropy_forward_backward(losses, logits, targets, n, v, grad_scale, s());
    } else {
      check_operand_type(grad_type == DType::bf16, "cross_entropy_forward_backward", grad_type);
      cuda::cross_entropy_forward_backward_bf16(losses, logits, targets, n, v, grad_scale, s());
    }
    return total_loss(losses, targets, n);
  }
  void vocab_parallel_ce_max(float* row_max, const float* logits, int64_t n,
                             int64_t v_local) override {
    cuda::vocab_parallel_ce_max(row_max, logits, n, v_local, s());
  }
  void vocab_parallel_ce_sums(float* sum_exp, float* target_logit, const float* logits,
                              const float* row_max, const int32_t* targets, int64_t n,
                              int64_t v_local, int64_t vocab_begin) override {
    cuda::vocab_parallel_ce_sums(sum_exp, target_logit, logits, row_max, targets, n, v_local,
                                 vocab_begin, s());
  }
  double vocab_parallel_ce_finish(float* losses, float* logits, const float* row_max,
                                  const float* sum_exp, const float* target_logit,
                                  const int32_t* targets, int64_t n, int64_t v_local,
                                  int64_t vocab_begin, bool backward, float grad_scale) override {
    cuda::vocab_parallel_ce_finish(losses, logits, row_max, sum_exp, target_logit, targets, n,
                                   v_local, vocab_begin, backward, grad_scale, s());
    return total_loss(losses, targets, n);
  }

  // ---- element-wise and optimizer -------------------------------------------------------------
  void add_bias(float* y, const float* bias, int64_t n, int64_t c) override {
    cuda::add_bias(y, bias, n, c, s());
  }
  void add(float* out, const float* a, const float* b, int64_t count) override {
    cuda::add(out, a, b, count, s());
  }
  void add_inplace(float* y, const float* x, int64_t count) override {
    cuda::add_inplace(y, x, count, s());
  }
  void scale_inplace(float* y, float sc, int64_t count) override {
    cuda::scale_inplace(y, sc, count, s());
  }
  void adamw_update(float* p, const float* g, float* m, float* v, int64_t count, float lr,
                    float beta1, float beta2, float eps, float weight_decay, float grad_scale,
                    int64_t step, uint16_t* p_bf16) override {
    cuda::adamw_update(p, g, m, v, count, lr, beta1, beta2, eps, weight_decay, grad_scale, step,
                       p_bf16, s());
  }
  double sum_squares(const float* x, int64_t count) override {
    cuda::sum_squares(reduce_, reduce_ + 1, x, count, s());
    return read_result();
  }

 private:
  cudaStream_t s() const { return stream_.get(); }
  static int64_t floats_for(int64_t bytes) {
    return (bytes + static_cast<int64_t>(sizeof(float)) - 1) / static_cast<int64_t>(sizeof(float));
  }

  // op(A) op(B) with A and B in t (bf16 or f16), f32 C and accumulation.
  void lowp_gemm(DType t, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const uint16_t* a,
                 int64_t lda, const uint16_t* b, int64_t ldb, float beta, float* c, int64_t ldc) {
    cuda::GemmArgs g;
    g.trans_a = ta, g.trans_b = tb, g.m = m, g.n = n, g.k = k, g.beta = beta;
    g.a = a, g.lda = lda, g.b = b, g.ldb = ldb, g.c = c, g.ldc = ldc;
    g.ab_type = t;
    lt_.gemm(g, s());
  }

  // The sum of the valid rows' losses: on the device, then copied back (synchronising).
  double total_loss(const float* losses, const int32_t* targets, int64_t n) {
    cuda::sum_losses(reduce_, losses, targets, n, s());
    return read_result();
  }
  double read_result() {
    double host = 0.0;
    STRATA_CUDA_CHECK(cudaMemcpyAsync(&host, reduce_, sizeof(double), cudaMemcpyDeviceToHost, s()));
    stream_.synchronize();
    return host;
  }

  // Declaration order is construction order: the device is selected before anything allocates.
  int device_;
  cuda::Stream stream_;
  cuda::GemmLt lt_;
  CudaMemory memory_;
  Scratch norm_scratch_;
  double* reduce_ = nullptr;  // [0]: a reduction's result; [1..]: sum_squares' partials
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(int device) {
  return std::make_unique<CudaBackendImpl>(device);
}

}  // namespace strata
