#include "comm/group_state.h"

#include "core/error.h"

namespace strata::comm {

GroupState::GroupState(MPI_Comm c, std::string group_name) : comm(c), name(std::move(group_name)) {
  STRATA_CHECK(comm != MPI_COMM_NULL, "comm: group '", name, "' has no communicator");
  // The group owns (and frees) its communicator: never a predefined one.
  STRATA_CHECK(comm != MPI_COMM_WORLD && comm != MPI_COMM_SELF, "comm: group '", name,
               "' must own a duplicate of MPI_COMM_WORLD/SELF (see MpiComm::dup_world)");
  // Errors come back as codes so that a failed Work can report them instead of aborting the job.
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  MPI_Group group, world_group;
  MPI_Comm_group(comm, &group);
  MPI_Comm_group(MPI_COMM_WORLD, &world_group);
  std::vector<int> ranks(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) ranks[static_cast<size_t>(r)] = r;
  world_ranks.resize(static_cast<size_t>(size));
  MPI_Group_translate_ranks(group, size, ranks.data(), world_group, world_ranks.data());
  MPI_Group_free(&group);
  MPI_Group_free(&world_group);
  constexpr int kShown = 16;
  for (int r = 0; r < size; ++r) {
    if (r == kShown && size > kShown + 1) {
      world_ranks_text += cat(",...,", world_ranks.back());
      break;
    }
    world_ranks_text += cat(r ? "," : "", world_ranks[static_cast<size_t>(r)]);
  }
}

GroupState::~GroupState() {
  int finalised = 0;
  MPI_Finalized(&finalised);
  if (!finalised && comm != MPI_COMM_NULL) MPI_Comm_free(&comm);
}

void GroupState::count_issue(CommOp op, int64_t bytes) {
  std::lock_guard<std::mutex> lock(stats_mutex);
  CommOpStats& s = stats.ops[static_cast<int>(op)];
  s.calls += 1;
  s.bytes += bytes;
}

void GroupState::count_completion(CommOp op, double seconds) {
  std::lock_guard<std::mutex> lock(stats_mutex);
  stats.ops[static_cast<int>(op)].seconds += seconds;
}

void GroupState::count_wait(CommOp op, double seconds) {
  std::lock_guard<std::mutex> lock(stats_mutex);
  stats.ops[static_cast<int>(op)].wait_seconds += seconds;
}

}  // namespace strata::comm
