// Algorithm choice for Open MPI's nonblocking all-reduce.
//
// libnbc (the component behind MPI_Iallreduce in Open MPI 4) uses its binomial tree for every
// in-place all-reduce on fewer than 4 ranks, whatever the size: all data travels to rank 0, is
// reduced there (into a freshly allocated temporary) and travels back, which measured 3-4x
// slower than the blocking MPI_Allreduce on 16 MB (docs/COMM.md). Its algorithm is an MPI_T
// control variable that can be written at run time, so the progress engine (the only thread that
// issues) selects Rabenseifner's reduce-scatter + all-gather for large buffers and leaves libnbc's
// own choice for small ones. With another MPI, or when the user sets
// OMPI_MCA_coll_libnbc_iallreduce_algorithm, this does nothing.
#pragma once
#include <cstdint>

namespace strata::comm {

void init_nbc_tuning();  // after MPI_Init_thread
void free_nbc_tuning();  // before MPI_Finalize
bool nbc_tuning_active();
// Before each MPI_Iallreduce, on the issuing thread.
void tune_iallreduce(int64_t bytes, int64_t count, int comm_size);

}  // namespace strata::comm
