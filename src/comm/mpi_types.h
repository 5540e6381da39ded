// DType and ReduceOp -> MPI datatype and MPI_Op. f32, i32 and u16 use MPI's own types and
// MPI_SUM/MPI_MAX; bf16 and f16 have no MPI type, so each is a 2-byte contiguous datatype with
// user-defined commutative sum and max ops that widen to f32, combine, and round to nearest even
// (what NCCL does for bf16). avg is a sum that the progress engine scales by 1/size afterwards.
#pragma once
#include <mpi.h>

#include <cstdint>
#include <string>

#include "comm/comm.h"
#include "core/dtype.h"

namespace strata::comm {

// Called by mpi_init / mpi_finalize (the types and ops must exist between the two).
void create_mpi_types();
void free_mpi_types();

MPI_Datatype mpi_datatype(DType dtype);
// The MPI op that computes `op` (avg -> the sum op); fails for avg on integer dtypes.
MPI_Op mpi_reduce_op(DType dtype, ReduceOp op);
// buf[i] /= divisor, rounded back to dtype: the second half of avg.
void divide_in_place(void* buf, int64_t count, DType dtype, int divisor);

// "MPI_ERR_TRUNCATE: message truncated" for an MPI error code.
std::string mpi_error_string(int code);

}  // namespace strata::comm
