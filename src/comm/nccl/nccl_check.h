// Every NCCL call goes through STRATA_NCCL_CHECK (or NcclComm's own polling, for the calls of a
// non-blocking communicator that may answer ncclInProgress): a failure throws strata::Error naming
// the call as written, where it was made, NCCL's text for the code, and NCCL's last warning (the
// detailed reason: ncclGetErrorString only names the class of error), e.g.
//   NCCL error at comm/nccl/nccl_comm.cc:120: ncclGroupEnd() failed: invalid usage (run with
//   NCCL_DEBUG=WARN for details) (ncclInvalidUsage); last NCCL error: ncclGroupEnd: not in a
//   group call.
// Also the mapping of strata's dtypes and reduce ops to NCCL's, which needs no GPU.
#pragma once
#include <nccl.h>

#include <string>

#include "comm/comm.h"
#include "core/dtype.h"
#include "core/error.h"

namespace strata::nccl {

// "ncclInvalidUsage", ... (the enum's own name: greppable in NCCL's sources and issues).
inline const char* result_name(ncclResult_t r) {
  switch (r) {
    case ncclSuccess:
      return "ncclSuccess";
    case ncclUnhandledCudaError:
      return "ncclUnhandledCudaError";
    case ncclSystemError:
      return "ncclSystemError";
    case ncclInternalError:
      return "ncclInternalError";
    case ncclInvalidArgument:
      return "ncclInvalidArgument";
    case ncclInvalidUsage:
      return "ncclInvalidUsage";
    case ncclRemoteError:
      return "ncclRemoteError";
    case ncclInProgress:
      return "ncclInProgress";
    default:
      return "ncclResult";
  }
}

// NCCL's text for `r`, its enum name, and the last warning NCCL logged for `comm` (nullptr: the
// process's last one). The last warning is not cleared by NCCL and may belong to an earlier call,
// so it is labelled as such rather than presented as the cause.
inline std::string describe_result(ncclResult_t r, ncclComm_t comm = nullptr) {
  std::string text = cat(ncclGetErrorString(r), " (", result_name(r), ")");
  const char* last = ncclGetLastError(comm);
  if (last && *last) text += cat("; last NCCL error: ", last);
  return text;
}

[[noreturn]] inline void fail_nccl(ncclResult_t r, const char* call, const char* file, int line,
                                   ncclComm_t comm = nullptr) {
  fail("NCCL error at ", file, ":", line, ": ", call, " failed: ", describe_result(r, comm));
}

// NCCL's datatype for a strata dtype. u16 has no NCCL type: it travels as f16 (the same two
// bytes; copies do not look at the bits), and is refused for reductions by reduce_op().
inline ncclDataType_t datatype(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return ncclFloat32;
    case DType::bf16:
      return ncclBfloat16;
    case DType::f16:
      return ncclFloat16;
    case DType::i32:
      return ncclInt32;
    case DType::u16:
      return ncclFloat16;
  }
  fail("comm: dtype ", static_cast<int>(dtype), " has no NCCL datatype");
}

// NCCL's reduction for `op` on `dtype`. avg is refused on integers (as the MPI backend does, so
// that a model behaves the same on both), and any reduction on u16 (no NCCL type reduces it).
inline ncclRedOp_t reduce_op(DType dtype, ReduceOp op) {
  STRATA_CHECK(dtype != DType::u16, "comm: NCCL cannot reduce ", dtype_name(dtype),
               " (no NCCL type); reduce f32, bf16, f16 or i32");
  switch (op) {
    case ReduceOp::sum:
      return ncclSum;
    case ReduceOp::max:
      return ncclMax;
    case ReduceOp::avg:
      // The MPI backend's words, so that the error reads the same on either backend.
      STRATA_CHECK(dtype != DType::i32, "comm: avg needs a floating dtype (F32, BF16, F16), not ",
                   dtype_name(dtype), "; use sum and divide");
      return ncclAvg;
  }
  fail("comm: unknown reduce op ", static_cast<int>(op));
}

}  // namespace strata::nccl

// Throws strata::Error for any result but ncclSuccess. For a non-blocking communicator's calls,
// which may return ncclInProgress, use NcclComm's settle() instead.
#define STRATA_NCCL_CHECK(call)                                               \
  do {                                                                        \
    const ncclResult_t strata_nccl_res_ = (call);                             \
    if (strata_nccl_res_ != ncclSuccess)                                      \
      ::strata::nccl::fail_nccl(strata_nccl_res_, #call, __FILE__, __LINE__); \
  } while (0)
