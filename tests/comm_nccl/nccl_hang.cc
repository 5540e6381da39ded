// The NCCL backend's timeout path, end to end: one rank whose all_reduce cannot complete (the
// compute stream it is ordered after is held by a 60 s host callback, as a peer that never
// arrives would hold it) must end within the timeout with the MPI backend's one-line error and
// exit status kCommTimeoutExit (124), after aborting its NCCL communicator.
//   nccl_hang <timeout_s>   (run with mpirun -np 1 through tests/comm/expect_exit.sh)
// Without a GPU it prints "NCCL timeout test skipped: <why>" (ctest marks the test skipped).
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "comm/mpi_comm.h"
#include "comm/mpi_runtime.h"
#include "comm/nccl/nccl_comm.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device.h"

namespace {
void CUDART_CB hold_stream(void*) {
  std::this_thread::sleep_for(std::chrono::seconds(60));
}
}  // namespace

int main(int argc, char** argv) {
  using namespace strata;
  if (argc != 2) {
    std::fprintf(stderr, "usage: nccl_hang <timeout_seconds>\n");
    return 2;
  }
  std::string why;
  if (cuda::device_count(&why) == 0) {
    std::printf("NCCL timeout test skipped: %s\n", why.c_str());
    return 0;
  }
  mpi_init(&argc, &argv);
  {
    std::unique_ptr<MpiComm> world = MpiComm::dup_world("world");
    NcclComm comm(*world, local_device());
    comm.set_timeout(std::atof(argv[1]));
    comm.set_step(5);
    void* buf = nullptr;
    STRATA_CUDA_CHECK(cudaMalloc(&buf, 4096));
    // A good operation first: the communicator works.
    wait_host(comm.all_reduce(buf, 1024, DType::f32, ReduceOp::sum));
    std::printf("first all_reduce completed\n");
    std::fflush(stdout);
    cuda::Stream compute;
    comm.set_compute_stream(compute.get());
    STRATA_CUDA_CHECK(cudaLaunchHostFunc(compute.get(), hold_stream, nullptr));
    wait_host(comm.all_reduce(buf, 1024, DType::f32, ReduceOp::sum));  // must not return
    std::printf("error: the held all_reduce completed\n");
  }
  mpi_finalize();
  return 1;
}
