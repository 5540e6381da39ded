#include "kernels/cuda/gemm.h"

#include <algorithm>
#include <vector>

#include "kernels/cuda/cublas_check.h"
#include "kernels/cuda/cuda_check.h"

namespace strata::cuda {
namespace {

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::f32:
      return CUDA_R_32F;
    case DType::bf16:
      return CUDA_R_16BF;
    case DType::f16:
      return CUDA_R_16F;
    default:
      fail("GemmLt: dtype ", dtype_name(t), " is not supported (f32, bf16 or f16)");
  }
}

int64_t element_bytes(DType t) {
  return t == DType::f32 ? 4 : 2;
}

// The largest power of two up to 256 dividing the address: cuBLASLt's heuristic assumes 256-byte
// aligned pointers unless told otherwise, and a plan chosen for aligned pointers may fault on a
// sub-view, so the alignment is both a preference and part of the plan's key.
int64_t alignment(const void* p) {
  const auto v = reinterpret_cast<uintptr_t>(p);
  int64_t a = 256;
  while (a > 1 && v % static_cast<uintptr_t>(a) != 0) a /= 2;
  return a;
}

cublasLtEpilogue_t lt_epilogue(const GemmArgs& g) {
  switch (g.epilogue) {
    case Epilogue::none:
      return CUBLASLT_EPILOGUE_DEFAULT;
    case Epilogue::bias:
      return CUBLASLT_EPILOGUE_BIAS;
    case Epilogue::gelu_aux_bias:
      return g.bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
    // Row-major op(A) is cuBLAS's B operand and op(B) its A (see gemm.h).
    case Epilogue::bias_grad_a:
      return CUBLASLT_EPILOGUE_BGRADB;
    case Epilogue::bias_grad_b:
      return CUBLASLT_EPILOGUE_BGRADA;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

bool has_bias_vector(Epilogue e) {
  return e != Epilogue::none;
}

std::string describe(const GemmArgs& g) {
  return cat("m=", g.m, " n=", g.n, " k=", g.k, " trans_a=", g.trans_a, " trans_b=", g.trans_b,
             " lda=", g.lda, " ldb=", g.ldb, " ldc=", g.ldc, " ab=", dtype_name(g.ab_type),
             " c=", dtype_name(g.c_type), " epilogue=", epilogue_name(g.epilogue));
}

void validate(const GemmArgs& g) {
  STRATA_CHECK(g.m > 0 && g.n > 0 && g.k > 0, "GemmLt: sizes must be positive (", describe(g), ")");
  STRATA_CHECK(g.a && g.b && g.c, "GemmLt: null A, B or C (", describe(g), ")");
  STRATA_CHECK(g.lda >= (g.trans_a ? g.m : g.k), "GemmLt: lda too small (", describe(g), ")");
  STRATA_CHECK(g.ldb >= (g.trans_b ? g.k : g.n), "GemmLt: ldb too small (", describe(g), ")");
  STRATA_CHECK(g.ldc >= g.n, "GemmLt: ldc too small (", describe(g), ")");
  STRATA_CHECK(g.ab_type == DType::f32 || g.ab_type == DType::bf16 || g.ab_type == DType::f16,
               "GemmLt: A and B must be f32, bf16 or f16 (", describe(g), ")");
  STRATA_CHECK(g.c_type == DType::f32 || (g.c_type == DType::bf16 && g.ab_type == DType::bf16),
               "GemmLt: C must be f32, or bf16 with bf16 A and B (", describe(g), ")");
  switch (g.epilogue) {
    case Epilogue::none:
      break;
    case Epilogue::bias:
      STRATA_CHECK(g.bias, "GemmLt: Epilogue::bias without a bias (", describe(g), ")");
      break;
    case Epilogue::gelu_aux_bias:
      STRATA_CHECK(
          g.aux && g.ldaux >= g.n && g.ldaux % 8 == 0,
          "GemmLt: Epilogue::gelu_aux_bias needs aux with ldaux >= n and a multiple of 8 (",
          describe(g), ", ldaux=", g.ldaux, ")");
      break;
    case Epilogue::bias_grad_a:
    case Epilogue::bias_grad_b:
      STRATA_CHECK(g.bias_grad, "GemmLt: bias-gradient epilogue without bias_grad (", describe(g),
                   ")");
      break;
  }
}

template <typename T>
void set_desc(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const T& value) {
  STRATA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, attr, &value, sizeof(value)));
}

}  // namespace

const char* epilogue_name(Epilogue e) {
  switch (e) {
    case Epilogue::none:
      return "none";
    case Epilogue::bias:
      return "bias";
    case Epilogue::gelu_aux_bias:
      return "gelu_aux_bias";
    case Epilogue::bias_grad_a:
      return "bias_grad_a";
    case Epilogue::bias_grad_b:
      return "bias_grad_b";
  }
  return "?";
}

GemmLt::GemmLt() : GemmLt(Options{}) {}

GemmLt::GemmLt(Options options) : options_(options) {
  STRATA_CUBLAS_CHECK(cublasLtCreate(&handle_));
  // Allocated once here, never in the step loop.
  STRATA_CUDA_CHECK(cudaMalloc(&workspace_, static_cast<size_t>(options_.workspace_bytes)));
}

GemmLt::~GemmLt() {
  // No throwing from a destructor: statuses are ignored on the way out.
  for (auto& [key, plan] : plans_) {
    cublasLtMatrixLayoutDestroy(plan.a);
    cublasLtMatrixLayoutDestroy(plan.b);
    cublasLtMatrixLayoutDestroy(plan.c);
    cublasLtMatmulDescDestroy(plan.desc);
  }
  for (void* p : ones_) cudaFree(p);
  cudaFree(workspace_);
  cublasLtDestroy(handle_);
}

void GemmLt::set_pointers(const Plan& plan, const GemmArgs& g) {
  if (g.epilogue == Epilogue::bias || g.epilogue == Epilogue::gelu_aux_bias) {
    set_desc(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, g.bias);
  } else if (g.epilogue == Epilogue::bias_grad_a || g.epilogue == Epilogue::bias_grad_b) {
    set_desc(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<const void*>(g.bias_grad));
  }
  if (g.epilogue == Epilogue::gelu_aux_bias) {
    set_desc(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, g.aux);
  }
}

GemmLt::Plan& GemmLt::plan_for(const GemmArgs& g, const Key& key) {
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second;

  Plan plan;
  const bool tf32 = options_.allow_tf32 && g.ab_type == DType::f32;
  STRATA_CUBLAS_CHECK(cublasLtMatmulDescCreate(
      &plan.desc, tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F, CUDA_R_32F));
  // cuBLAS computes C^T[N,M] = op(B)^T op(A)^T: its A is our B, its B our A (see gemm.h).
  const cublasOperation_t op_a = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  set_desc(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, op_a);
  set_desc(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, op_b);
  set_desc(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, lt_epilogue(g));
  if (has_bias_vector(g.epilogue)) {
    // Explicit rather than cuBLASLt's default ("D's type"), so that the contract is visible.
    const int32_t bias_type = cuda_type(g.c_type);
    set_desc(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, bias_type);
  }
  if (g.epilogue == Epilogue::gelu_aux_bias) {
    set_desc(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, g.ldaux);
  }
  // Column-major shapes as stored: our row-major [rows, cols] with stride ld is cuBLAS's
  // [cols, rows] with leading dimension ld.
  const cudaDataType_t ab = cuda_type(g.ab_type), c = cuda_type(g.c_type);
  const auto u = [](int64_t v) { return static_cast<uint64_t>(v); };
  STRATA_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.a, ab, u(g.trans_b ? g.k : g.n),
                                                 u(g.trans_b ? g.n : g.k), g.ldb));
  STRATA_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.b, ab, u(g.trans_a ? g.m : g.k),
                                                 u(g.trans_a ? g.k : g.m), g.lda));
  STRATA_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.c, c, u(g.n), u(g.m), g.ldc));
  set_pointers(plan, g);  // the heuristic reads the epilogue pointers' alignment

  cublasLtMatmulPreference_t pref = nullptr;
  STRATA_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const auto set_pref = [&](cublasLtMatmulPreferenceAttributes_t attr, auto value) {
    STRATA_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &value, sizeof(value)));
  };
  set_pref(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, u(options_.workspace_bytes));
  set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, static_cast<uint32_t>(alignment(g.b)));
  set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, static_cast<uint32_t>(alignment(g.a)));
  set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, static_cast<uint32_t>(alignment(g.c)));
  set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, static_cast<uint32_t>(alignment(g.c)));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
      handle_, plan.desc, plan.a, plan.b, plan.c, plan.c, pref, 1, &result, &found);
  ++heuristic_queries_;
  cublasLtMatmulPreferenceDestroy(pref);
  if (status != CUBLAS_STATUS_SUCCESS || found == 0 || result.state != CUBLAS_STATUS_SUCCESS) {
    cublasLtMatrixLayoutDestroy(plan.a);
    cublasLtMatrixLayoutDestroy(plan.b);
    cublasLtMatrixLayoutDestroy(plan.c);
    cublasLtMatmulDescDestroy(plan.desc);
    fail("GemmLt: cuBLASLt has no algorithm for ", describe(g), " (",
         cublasLtGetStatusName(status != CUBLAS_STATUS_SUCCESS ? status : result.state), ")");
  }
  plan.algo = result.algo;
  return plans_.emplace(key, plan).first->second;
}

void GemmLt::gemm(const GemmArgs& g, cudaStream_t stream) {
  validate(g);
  const void* vec = g.epilogue == Epilogue::bias_grad_a || g.epilogue == Epilogue::bias_grad_b
                        ? static_cast<const void*>(g.bias_grad)
                        : g.bias;
  const Key key = {g.trans_a,
                   g.trans_b,
                   g.m,
                   g.n,
                   g.k,
                   g.lda,
                   g.ldb,
                   g.ldc,
                   g.epilogue == Epilogue::gelu_aux_bias ? g.ldaux : 0,
                   static_cast<int64_t>(g.ab_type),
                   static_cast<int64_t>(g.c_type),
                   static_cast<int64_t>(g.epilogue),
                   vec != nullptr,
                   alignment(g.a),
                   alignment(g.b),
                   alignment(g.c),
                   vec ? alignment(vec) : 0,
                   g.aux ? alignment(g.aux) : 0};
  Plan& plan = plan_for(g, key);
  set_pointers(plan, g);
  STRATA_CUBLAS_CHECK(cublasLtMatmul(handle_, plan.desc, &g.alpha, g.b, plan.a, g.a, plan.b,
                                     &g.beta, g.c, plan.c, g.c, plan.c, &plan.algo, workspace_,
                                     static_cast<size_t>(options_.workspace_bytes), stream));
}

void GemmLt::gemm_f32(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                      const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
                      float* c, int64_t ldc, cudaStream_t stream) {
  GemmArgs g;
  g.trans_a = trans_a, g.trans_b = trans_b, g.m = m, g.n = n, g.k = k, g.alpha = alpha;
  g.a = a, g.lda = lda, g.b = b, g.ldb = ldb, g.beta = beta, g.c = c, g.ldc = ldc;
  gemm(g, stream);
}

void GemmLt::gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                       const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, float beta,
                       float* c, int64_t ldc, cudaStream_t stream) {
  GemmArgs g;
  g.trans_a = trans_a, g.trans_b = trans_b, g.m = m, g.n = n, g.k = k, g.alpha = alpha;
  g.a = a, g.lda = lda, g.b = b, g.ldb = ldb, g.beta = beta, g.c = c, g.ldc = ldc;
  g.ab_type = DType::bf16;
  gemm(g, stream);
}

const void* GemmLt::ones(DType type, int64_t count) {
  STRATA_CHECK(type == DType::f32 || type == DType::bf16, "GemmLt::ones: dtype ", dtype_name(type),
               " is not f32 or bf16");
  const int i = type == DType::f32 ? 0 : 1;
  if (count > ones_count_[i]) {
    const int64_t cap = std::max<int64_t>(count, 4096);
    // cudaFree synchronises the device, so work still reading the old vector has finished.
    STRATA_CUDA_CHECK(cudaFree(ones_[i]));
    ones_[i] = nullptr;
    ones_count_[i] = 0;
    STRATA_CUDA_CHECK(cudaMalloc(&ones_[i], static_cast<size_t>(cap * element_bytes(type))));
    if (type == DType::f32) {
      const std::vector<float> host(static_cast<size_t>(cap), 1.0f);
      STRATA_CUDA_CHECK(cudaMemcpy(ones_[i], host.data(), host.size() * 4, cudaMemcpyHostToDevice));
    } else {
      const std::vector<uint16_t> host(static_cast<size_t>(cap), f32_to_bf16(1.0f));
      STRATA_CUDA_CHECK(cudaMemcpy(ones_[i], host.data(), host.size() * 2, cudaMemcpyHostToDevice));
    }
    // A cudaMemcpy from pageable memory may return before its DMA has landed, and it runs on the
    // legacy stream, which the callers' non-blocking streams do not wait for: wait here, so the
    // next GEMM on any stream reads ones.
    STRATA_CUDA_CHECK(cudaDeviceSynchronize());
    ones_count_[i] = cap;
  }
  return ones_[i];
}

// ---- Linear layers -----------------------------------------------------------------------------
namespace {

void linear_forward_any(GemmLt& lt, DType t, float* y, const void* x, const void* w,
                        const float* bias, int64_t n, int64_t in, int64_t out,
                        cudaStream_t stream) {
  GemmArgs g;  // y[n,out] = x[n,in] w[out,in]^T
  g.trans_b = true, g.m = n, g.n = out, g.k = in;
  g.a = x, g.lda = in, g.b = w, g.ldb = in, g.c = y, g.ldc = out;
  g.ab_type = t;
  if (bias) g.epilogue = Epilogue::bias, g.bias = bias;
  lt.gemm(g, stream);
}

void linear_backward_any(GemmLt& lt, DType t, float* dx, float* dw, float* dbias, const void* dy,
                         const void* x, const void* w, int64_t n, int64_t in, int64_t out,
                         cudaStream_t stream) {
  if (dx) {  // dx[n,in] = dy[n,out] w[out,in]
    GemmArgs g;
    g.m = n, g.n = in, g.k = out, g.a = dy, g.lda = out, g.b = w, g.ldb = in, g.c = dx, g.ldc = in;
    g.ab_type = t;
    lt.gemm(g, stream);
  }
  if (dw) {  // dw[out,in] += dy^T x
    GemmArgs g;
    g.trans_a = true, g.m = out, g.n = in, g.k = n, g.beta = 1.0f;
    g.a = dy, g.lda = out, g.b = x, g.ldb = in, g.c = dw, g.ldc = in;
    g.ab_type = t;
    lt.gemm(g, stream);
  }
  if (dbias) {  // dbias[1,out] += ones[1,n] dy[n,out]
    GemmArgs g;
    g.m = 1, g.n = out, g.k = n, g.beta = 1.0f;
    g.a = lt.ones(t, n), g.lda = n, g.b = dy, g.ldb = out, g.c = dbias, g.ldc = out;
    g.ab_type = t;
    lt.gemm(g, stream);
  }
}

}  // namespace

void linear_forward(GemmLt& lt, float* y, const float* x, const float* w, const float* bias,
                    int64_t n, int64_t in, int64_t out, cudaStream_t stream) {
  linear_forward_any(lt, DType::f32, y, x, w, bias, n, in, out, stream);
}

void linear_backward(GemmLt& lt, float* dx, float* dw, float* dbias, const float* dy,
                     const float* x, const float* w, int64_t n, int64_t in, int64_t out,
                     cudaStream_t stream) {
  linear_backward_any(lt, DType::f32, dx, dw, dbias, dy, x, w, n, in, out, stream);
}

void linear_forward_bf16(GemmLt& lt, float* y, const uint16_t* x, const uint16_t* w,
                         const float* bias, int64_t n, int64_t in, int64_t out,
                         cudaStream_t stream) {
  linear_forward_any(lt, DType::bf16, y, x, w, bias, n, in, out, stream);
}

void linear_backward_bf16(GemmLt& lt, float* dx, float* dw, float* dbias, const uint16_t* dy,
                          const uint16_t* x, const uint16_t* w, int64_t n, int64_t in, int64_t out,
                          cudaStream_t stream) {
  linear_backward_any(lt, DType::bf16, dx, dw, dbias, dy, x, w, n, in, out, stream);
}

}  // namespace strata::cuda
