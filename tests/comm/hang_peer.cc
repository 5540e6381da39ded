// A job in which rank 1 stops taking part after one good all_reduce, to check what the others see:
//   comm_hang_peer hang <timeout_s>: rank 1 sleeps; rank 0's wait must end the process within the
//     timeout with the "comm timeout: ..." line and exit status kCommTimeoutExit (124);
//   comm_hang_peer recv <timeout_s>: the same, with rank 0 waiting on a recv from rank 1: the
//     message names rank 1 as the peer;
//   comm_hang_peer die <timeout_s>: rank 1 exits abruptly (status 3); mpirun must end the job
//     quickly with a non-zero status, long before rank 0's timeout;
//   comm_hang_peer abort <timeout_s>: rank 1 calls mpi_abort(5) (an error its peers cannot see);
//     the job must end just as quickly.
// Run with mpirun -np 2 through expect_exit.sh (see CMakeLists.txt).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "comm/layout.h"
#include "comm/mpi_runtime.h"
#include "comm/process_groups.h"
#include "core/log.h"

int main(int argc, char** argv) {
  using namespace strata;
  const std::string mode = argc > 1 ? argv[1] : "";
  if (argc != 3 || (mode != "hang" && mode != "recv" && mode != "die" && mode != "abort")) {
    std::fprintf(stderr, "usage: comm_hang_peer hang|recv|die|abort <timeout_seconds>\n");
    return 2;
  }
  const double timeout = std::atof(argv[2]);
  mpi_init(&argc, &argv);
  ProcessGroups groups = ProcessGroups::create(resolve_layout(1, 1, 0, 0, mpi_world_size()));
  groups.set_timeout(timeout);
  groups.set_step(17);
  std::vector<float> grads(1 << 20, 1.0f);  // 4194304 bytes
  groups.dp().all_reduce(grads.data(), 1 << 20, DType::f32, ReduceOp::sum)->wait();
  log::info("first all_reduce completed on every rank");

  if (mpi_world_rank() == 1) {
    if (mode == "die") std::_Exit(3);
    if (mode == "abort") mpi_abort(5);
    std::this_thread::sleep_for(std::chrono::seconds(120));  // hung: never joins the next one
    std::_Exit(0);
  }
  if (mode == "recv") {
    groups.world().recv(grads.data(), 1024, DType::f32, 1, 7)->wait();
  } else {
    groups.dp().all_reduce(grads.data(), 1 << 20, DType::f32, ReduceOp::sum)->wait();
  }
  log::error("unexpected: the ", mode == "recv" ? "recv" : "all_reduce",
             " completed without rank 1");
  return 1;
}
