#include "comm/mpi_types.h"

#include <cmath>

#include "comm/half.h"
#include "core/error.h"

namespace strata::comm {

namespace {

MPI_Datatype g_bf16 = MPI_DATATYPE_NULL;
MPI_Datatype g_f16 = MPI_DATATYPE_NULL;
MPI_Op g_bf16_sum = MPI_OP_NULL, g_bf16_max = MPI_OP_NULL;
MPI_Op g_f16_sum = MPI_OP_NULL, g_f16_max = MPI_OP_NULL;

// max that propagates NaN from either side (MPI_MAX on floats leaves NaN order-dependent).
inline float nan_max(float a, float b) {
  return (a > b || std::isnan(a)) ? a : b;
}

template <float (*ToF32)(uint16_t), uint16_t (*FromF32)(float), bool kMax>
void half_op(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  const int n = *len;
  for (int i = 0; i < n; ++i) {
    const float x = ToF32(a[i]), y = ToF32(b[i]);
    b[i] = FromF32(kMax ? nan_max(x, y) : x + y);
  }
}

void check_mpi(int rc, const char* what) {
  STRATA_CHECK(rc == MPI_SUCCESS, "MPI: ", what, " failed: ", mpi_error_string(rc));
}

}  // namespace

void create_mpi_types() {
  if (g_bf16 != MPI_DATATYPE_NULL) return;
  check_mpi(MPI_Type_contiguous(2, MPI_BYTE, &g_bf16), "MPI_Type_contiguous (bf16)");
  check_mpi(MPI_Type_commit(&g_bf16), "MPI_Type_commit (bf16)");
  check_mpi(MPI_Type_contiguous(2, MPI_BYTE, &g_f16), "MPI_Type_contiguous (f16)");
  check_mpi(MPI_Type_commit(&g_f16), "MPI_Type_commit (f16)");
  check_mpi(MPI_Op_create(&half_op<bf16_to_f32, f32_to_bf16, false>, 1, &g_bf16_sum),
            "MPI_Op_create");
  check_mpi(MPI_Op_create(&half_op<bf16_to_f32, f32_to_bf16, true>, 1, &g_bf16_max),
            "MPI_Op_create");
  check_mpi(MPI_Op_create(&half_op<f16_to_f32, f32_to_f16, false>, 1, &g_f16_sum), "MPI_Op_create");
  check_mpi(MPI_Op_create(&half_op<f16_to_f32, f32_to_f16, true>, 1, &g_f16_max), "MPI_Op_create");
}

void free_mpi_types() {
  if (g_bf16 == MPI_DATATYPE_NULL) return;
  for (MPI_Op* op : {&g_bf16_sum, &g_bf16_max, &g_f16_sum, &g_f16_max}) MPI_Op_free(op);
  MPI_Type_free(&g_bf16);
  MPI_Type_free(&g_f16);
  g_bf16 = g_f16 = MPI_DATATYPE_NULL;
}

MPI_Datatype mpi_datatype(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return MPI_FLOAT;
    case DType::i32:
      return MPI_INT32_T;
    case DType::u16:
      return MPI_UINT16_T;
    case DType::bf16:
    case DType::f16:
      STRATA_CHECK(g_bf16 != MPI_DATATYPE_NULL, "comm: MPI is not initialised (call mpi_init)");
      return dtype == DType::bf16 ? g_bf16 : g_f16;
  }
  fail("comm: unsupported dtype");
}

MPI_Op mpi_reduce_op(DType dtype, ReduceOp op) {
  const bool is_max = op == ReduceOp::max;
  switch (dtype) {
    case DType::f32:
      return is_max ? MPI_MAX : MPI_SUM;
    case DType::bf16:
      return is_max ? g_bf16_max : g_bf16_sum;
    case DType::f16:
      return is_max ? g_f16_max : g_f16_sum;
    case DType::i32:
    case DType::u16:
      STRATA_CHECK(op != ReduceOp::avg, "comm: avg needs a floating dtype (F32, BF16, F16), not ",
                   dtype_name(dtype), "; use sum and divide");
      return is_max ? MPI_MAX : MPI_SUM;
  }
  fail("comm: unsupported dtype");
}

void divide_in_place(void* buf, int64_t count, DType dtype, int divisor) {
  if (divisor == 1) return;
  const float d = static_cast<float>(divisor);
  if (dtype == DType::f32) {
    float* x = static_cast<float*>(buf);
    for (int64_t i = 0; i < count; ++i) x[i] /= d;
  } else if (dtype == DType::bf16) {
    uint16_t* x = static_cast<uint16_t*>(buf);
    for (int64_t i = 0; i < count; ++i) x[i] = f32_to_bf16(bf16_to_f32(x[i]) / d);
  } else if (dtype == DType::f16) {
    uint16_t* x = static_cast<uint16_t*>(buf);
    for (int64_t i = 0; i < count; ++i) x[i] = f32_to_f16(f16_to_f32(x[i]) / d);
  } else {
    fail("comm: avg needs a floating dtype, not ", dtype_name(dtype));
  }
}

std::string mpi_error_string(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) len = 0;
  return cat(len > 0 ? std::string(text, static_cast<size_t>(len)) : "unknown MPI error",
             " (MPI error code ", code, ")");
}

}  // namespace strata::comm
