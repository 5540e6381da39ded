// GEMM and linear layers on the GPU through cuBLASLt, with the CPU kernels' row-major semantics
// (kernels/cpu/kernels.h): C[M,N] = alpha * op(A)[M,K] * op(B)[K,N] + beta * C, lda/ldb/ldc the
// row strides of A, B and C as stored.
//
// cuBLASLt is column-major. A row-major matrix with row stride ld is, read column-major, its
// transpose with leading dimension ld, so GemmLt asks cuBLASLt for C^T = op(B)^T op(A)^T: the
// operands swap places and keep their transpose flags, and nothing is ever copied.
//
// Numerics:
//  * f32: FP32 arithmetic (CUBLAS_COMPUTE_32F), TF32 tensor cores OFF by default so results agree
//    with the CPU to ~1e-5 relative; GemmLt::Options::allow_tf32 turns them on (10-bit mantissa
//    inputs, about 8x the FP32 rate on Hopper).
//  * bf16: A and B in bf16 (uint16_t bit patterns), f32 accumulation (CUBLAS_COMPUTE_32F),
//    C in f32 or bf16.
//  * f16: A and B in IEEE f16 (uint16_t bit patterns), f32 accumulation, C in f32 (fp16
//    training's GEMMs; the CPU widens f16 operands to f32, which is the same arithmetic).
//
// Plans: the first call for a given (shape, strides, transposes, dtypes, epilogue, pointer
// alignments) builds the cuBLASLt descriptors and asks the heuristic for an algorithm; later calls
// reuse that plan and only update pointers, so a training step does no heuristic queries after
// the first (warm-up) step. A GemmLt owns one 32 MiB workspace: use one GemmLt per stream (calls
// on two streams at once would share the workspace), and from one host thread at a time.
#pragma once
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <map>

#include "core/dtype.h"

namespace strata::cuda {

enum class Epilogue : uint8_t {
  none,
  // C[i, :] = alpha * op(A) op(B) + beta * C[i, :] + bias[:] (bias has N elements).
  bias,
  // aux[M, ldaux] = alpha * op(A) op(B) + bias (the pre-activation, kept for the backward) and
  // C = gelu(aux), GELU's tanh approximation (as GPT-2 and kernels::gelu_forward). cuBLASLt needs
  // ldaux % 8 == 0. aux has C's dtype.
  gelu_aux_bias,
  // C as for `none`, and bias_grad[M] = row sums of op(A) (sum over k): cuBLASLt's BGRADB
  // (op(A)^T is cuBLAS's B). OVERWRITES bias_grad (cuBLASLt cannot accumulate it).
  bias_grad_a,
  // C as for `none`, and bias_grad[N] = column sums of op(B) (sum over k): cuBLASLt's BGRADA.
  // OVERWRITES bias_grad.
  bias_grad_b,
};
const char* epilogue_name(Epilogue e);

struct GemmArgs {
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  float alpha = 1.0f, beta = 0.0f;
  const void* a = nullptr;
  int64_t lda = 0;
  const void* b = nullptr;
  int64_t ldb = 0;
  void* c = nullptr;  // read when beta != 0 (then it has c_type too), written always
  int64_t ldc = 0;
  DType ab_type = DType::f32;  // A and B: f32, bf16 or f16
  DType c_type = DType::f32;   // C (and the bias, aux, bias_grad vectors): f32 or bf16 (bf16
                               // only with bf16 A and B)
  Epilogue epilogue = Epilogue::none;
  const void* bias = nullptr;  // Epilogue::bias, gelu_aux_bias: [N] of c_type (may be null for
                               // gelu_aux_bias: plain GELU with aux)
  void* bias_grad = nullptr;   // Epilogue::bias_grad_a ([M]) / bias_grad_b ([N]) of c_type
  void* aux = nullptr;         // Epilogue::gelu_aux_bias: [M, ldaux] of c_type
  int64_t ldaux = 0;
};

class GemmLt {
 public:
  struct Options {
    bool allow_tf32 = false;  // f32 GEMMs on TF32 tensor cores (see the top of this file)
    int64_t workspace_bytes = int64_t{32} << 20;
  };
  GemmLt();
  explicit GemmLt(Options options);
  ~GemmLt();
  GemmLt(const GemmLt&) = delete;
  GemmLt& operator=(const GemmLt&) = delete;

  // Enqueues the GEMM on `stream`. Throws strata::Error on invalid arguments or when cuBLASLt
  // has no algorithm for the combination (the message names the shape, dtypes and epilogue).
  void gemm(const GemmArgs& args, cudaStream_t stream);

  // The CPU signatures (kernels::gemm, kernels::gemm_bf16), device pointers.
  void gemm_f32(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                int64_t ldc, cudaStream_t stream);
  void gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                 const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, float beta,
                 float* c, int64_t ldc, cudaStream_t stream);

  // How many plans are cached and how many heuristic queries ran (tests check that repeated
  // shapes do not query again).
  int64_t plans() const { return static_cast<int64_t>(plans_.size()); }
  int64_t heuristic_queries() const { return heuristic_queries_; }
  const Options& options() const { return options_; }

  // A device vector of `count` ones in `type` (f32 or bf16), grown on demand (the growth
  // synchronises the device, so it belongs in warm-up): the left operand of column-sum GEMMs.
  const void* ones(DType type, int64_t count);

 private:
  // (transposes, m, n, k, lda, ldb, ldc, ldaux, dtypes, epilogue, bias presence, pointer
  // alignments): everything the descriptors and the heuristic's answer depend on.
  using Key = std::array<int64_t, 18>;
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };
  Plan& plan_for(const GemmArgs& args, const Key& key);
  void set_pointers(const Plan& plan, const GemmArgs& args);

  Options options_;
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  std::map<Key, Plan> plans_;
  int64_t heuristic_queries_ = 0;
  void* ones_[2] = {nullptr, nullptr};  // f32, bf16
  int64_t ones_count_[2] = {0, 0};
};

// ---- Linear layers (kernels::linear_forward / linear_backward on the device) ------------------
// y[n,out] = x[n,in] w[out,in]^T + bias[out] (bias may be null): one GEMM, bias in its epilogue.
void linear_forward(GemmLt& lt, float* y, const float* x, const float* w, const float* bias,
                    int64_t n, int64_t in, int64_t out, cudaStream_t stream);
// dx[n,in] = dy w (overwritten; dx may be null); dw[out,in] += dy^T x (dw may be null);
// dbias[out] += column sums of dy (dbias may be null). The column sums are one more GEMM,
// ones[1,n] dy with beta = 1, rather than the BGRADB epilogue, because the epilogue overwrites
// and the CPU contract accumulates over micro-batches; it is deterministic (no atomics).
void linear_backward(GemmLt& lt, float* dx, float* dw, float* dbias, const float* dy,
                     const float* x, const float* w, int64_t n, int64_t in, int64_t out,
                     cudaStream_t stream);
// bf16 operands, f32 outputs and accumulation (kernels::linear_forward_lowp with DType::bf16).
void linear_forward_bf16(GemmLt& lt, float* y, const uint16_t* x, const uint16_t* w,
                         const float* bias, int64_t n, int64_t in, int64_t out,
                         cudaStream_t stream);
// As linear_backward with dy, x, w in bf16 (the GPU keeps dy in bf16 already, unlike the CPU's
// linear_backward_lowp which rounds an f32 dy block by block); dx, dw, dbias in f32.
void linear_backward_bf16(GemmLt& lt, float* dx, float* dw, float* dbias, const uint16_t* dy,
                          const uint16_t* x, const uint16_t* w, int64_t n, int64_t in, int64_t out,
                          cudaStream_t stream);

}  // namespace strata::cuda
