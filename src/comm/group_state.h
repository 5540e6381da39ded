// What a process group shares between its MpiComm and the Work handles it issued: the MPI
// communicator, the names that timeout messages need, the timeout and step, and the stats. Works
// hold it by shared_ptr, so a Comm may be destroyed while its last operations finish.
#pragma once
#include <mpi.h>

#include <atomic>
#include <mutex>
#include <string>
#include <vector>

#include "comm/comm.h"

namespace strata::comm {

constexpr double kDefaultCommTimeoutSeconds = 300;

struct GroupState {
  // Adopts comm (freed in the destructor unless MPI is finalised by then).
  GroupState(MPI_Comm comm, std::string name);
  ~GroupState();
  GroupState(const GroupState&) = delete;
  GroupState& operator=(const GroupState&) = delete;

  MPI_Comm comm = MPI_COMM_NULL;
  std::string name;
  int rank = 0;
  int size = 1;
  std::vector<int> world_ranks;  // group rank -> world rank
  std::string world_ranks_text;  // "0,1,2,3" (abbreviated for large groups)

  std::atomic<int64_t> step{0};
  std::atomic<double> timeout_seconds{kDefaultCommTimeoutSeconds};

  mutable std::mutex stats_mutex;
  CommStats stats;
  void count_issue(CommOp op, int64_t bytes);
  void count_completion(CommOp op, double seconds);
  void count_wait(CommOp op, double seconds);
};

}  // namespace strata::comm
