#include "comm/nbc_tuning.h"

#include <mpi.h>

#include <cstdlib>

#include "core/log.h"

namespace strata::comm {

namespace {

constexpr const char* kVariable = "coll_libnbc_iallreduce_algorithm";
constexpr int kAuto = 0;          // libnbc's own choice (binomial when in place and < 4 ranks)
constexpr int kRabenseifner = 3;  // reduce-scatter by halving + all-gather by doubling
// libnbc's own small-message threshold: below it the binomial tree's fewer rounds win.
constexpr int64_t kLargeBytes = 64 * 1024;

bool g_tuning = false;
MPI_T_cvar_handle g_handle = MPI_T_CVAR_HANDLE_NULL;
int g_current = -1;

}  // namespace

void init_nbc_tuning() {
  if (g_tuning || std::getenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm")) return;
  int provided = 0;
  if (MPI_T_init_thread(MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) return;
  int index = -1, count = 0;
  if (MPI_T_cvar_get_index(kVariable, &index) != MPI_SUCCESS ||
      MPI_T_cvar_handle_alloc(index, nullptr, &g_handle, &count) != MPI_SUCCESS || count != 1) {
    MPI_T_finalize();
    return;
  }
  g_tuning = true;
  g_current = -1;
}

void free_nbc_tuning() {
  if (!g_tuning) return;
  MPI_T_cvar_handle_free(&g_handle);
  MPI_T_finalize();
  g_tuning = false;
}

bool nbc_tuning_active() {
  return g_tuning;
}

void tune_iallreduce(int64_t bytes, int64_t count, int comm_size) {
  if (!g_tuning) return;
  int pof2 = 1;
  while (pof2 * 2 <= comm_size) pof2 *= 2;
  const int want = bytes >= kLargeBytes && count >= pof2 ? kRabenseifner : kAuto;
  if (want == g_current) return;
  if (MPI_T_cvar_write(g_handle, &want) != MPI_SUCCESS) {
    log::warn("comm: cannot set ", kVariable, "; large all_reduce stays on libnbc's default");
    free_nbc_tuning();
    return;
  }
  g_current = want;
}

}  // namespace strata::comm
