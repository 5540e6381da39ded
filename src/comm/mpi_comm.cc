#include "comm/mpi_comm.h"

#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "comm/group_state.h"
#include "comm/mpi_runtime.h"
#include "comm/mpi_types.h"
#include "comm/mpi_work.h"
#include "comm/progress_engine.h"
#include "core/error.h"
#include "core/log.h"

namespace strata {

using comm::GroupState;
using comm::OpArgs;
using comm::PendingOp;

MpiComm::MpiComm(MPI_Comm c, std::string group_name) {
  STRATA_CHECK(mpi_active(), "comm: group '", group_name, "' created before mpi_init");
  group_ = std::make_shared<GroupState>(c, std::move(group_name));
}

MpiComm::~MpiComm() = default;

std::unique_ptr<MpiComm> MpiComm::dup_world(const std::string& group_name) {
  STRATA_CHECK(mpi_active(), "comm: group '", group_name, "' created before mpi_init");
  MPI_Comm dup = MPI_COMM_NULL;
  MPI_Request request = MPI_REQUEST_NULL;
  int rc = MPI_Comm_idup(MPI_COMM_WORLD, &dup, &request);
  STRATA_CHECK(rc == MPI_SUCCESS, "comm: MPI_Comm_idup failed: ", comm::mpi_error_string(rc));
  const double timeout = comm::kDefaultCommTimeoutSeconds;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout);
  int done = 0;
  for (;;) {
    rc = MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    STRATA_CHECK(rc == MPI_SUCCESS, "comm: MPI_Comm_idup failed: ", comm::mpi_error_string(rc));
    if (done) break;
    if (std::chrono::steady_clock::now() > deadline) {
      log::error("comm timeout: creating group '", group_name, "' (all ", mpi_world_size(),
                 " world ranks) did not complete within ", timeout,
                 " s; a peer rank may have hung or died before reaching it");
      std::fflush(stderr);
      std::_Exit(kCommTimeoutExit);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  return std::make_unique<MpiComm>(dup, group_name);
}

int MpiComm::rank() const {
  return group_->rank;
}
int MpiComm::size() const {
  return group_->size;
}
const std::string& MpiComm::name() const {
  return group_->name;
}
const std::vector<int>& MpiComm::world_ranks() const {
  return group_->world_ranks;
}
MPI_Comm MpiComm::handle() const {
  return group_->comm;
}

int MpiComm::world_rank_of(int group_rank) const {
  STRATA_CHECK(group_rank >= 0 && group_rank < size(), "comm: group '", name(), "' has ", size(),
               " ranks; there is no rank ", group_rank);
  return group_->world_ranks[static_cast<size_t>(group_rank)];
}

int MpiComm::checked_count(int64_t count, DType dtype, const char* what) const {
  STRATA_CHECK(count >= 0, "comm: ", what, " on group '", name(), "': count ", count,
               " is negative");
  // MPI 3 counts are ints; a larger buffer must be split by the caller (a bucket is far smaller).
  STRATA_CHECK(count <= INT_MAX, "comm: ", what, " on group '", name(), "': ", count,
               " elements exceed MPI's limit of ", INT_MAX, " per call; split the buffer");
  comm::mpi_datatype(dtype);  // throws for an unsupported dtype
  return static_cast<int>(count);
}

void MpiComm::check_peer(int peer, const char* what) const {
  STRATA_CHECK(peer >= 0 && peer < size(), "comm: ", what, " on group '", name(), "': rank ", peer,
               " is not in the group (", size(), " ranks)");
}

WorkHandle MpiComm::submit(const OpArgs& args) {
  STRATA_CHECK(mpi_active(), "comm: ", comm_op_name(args.kind), " on group '", name(),
               "' after mpi_finalize");
  auto op = std::make_shared<PendingOp>(group_, args);
  group_->count_issue(args.kind, args.bytes);
  comm::ProgressEngine::get().submit(op);
  return op;
}

WorkHandle MpiComm::all_reduce(void* buf, int64_t count, DType dtype, ReduceOp op) {
  OpArgs a;
  a.kind = CommOp::all_reduce;
  a.count = checked_count(count, dtype, "all_reduce");
  comm::mpi_reduce_op(dtype, op);  // throws for avg on an integer dtype
  STRATA_CHECK(buf || count == 0, "comm: all_reduce on group '", name(), "': null buffer");
  a.recv = buf;
  a.dtype = dtype;
  a.op = op;
  a.bytes = count * static_cast<int64_t>(dtype_size(dtype));
  return submit(a);
}

WorkHandle MpiComm::reduce_scatter(const void* send, void* recv, int64_t recv_count, DType dtype,
                                   ReduceOp op) {
  OpArgs a;
  a.kind = CommOp::reduce_scatter;
  a.count = checked_count(recv_count, dtype, "reduce_scatter");
  comm::mpi_reduce_op(dtype, op);
  const int64_t block = recv_count * static_cast<int64_t>(dtype_size(dtype));
  const int64_t total = block * size();
  STRATA_CHECK((send && recv) || recv_count == 0, "comm: reduce_scatter on group '", name(),
               "': null buffer");
  const auto* s = static_cast<const char*>(send);
  const auto* r = static_cast<const char*>(recv);
  if (send != recv)
    STRATA_CHECK(s + total <= r || r + block <= s || recv_count == 0,
                 "comm: reduce_scatter on group '", name(),
                 "': send and recv overlap (only send == recv, in place, is allowed)");
  a.send = send == recv ? nullptr : send;
  a.recv = recv;
  a.dtype = dtype;
  a.op = op;
  a.bytes = total;
  return submit(a);
}

WorkHandle MpiComm::all_gather(const void* send, void* recv, int64_t send_count, DType dtype) {
  OpArgs a;
  a.kind = CommOp::all_gather;
  a.count = checked_count(send_count, dtype, "all_gather");
  const int64_t block = send_count * static_cast<int64_t>(dtype_size(dtype));
  STRATA_CHECK((send && recv) || send_count == 0, "comm: all_gather on group '", name(),
               "': null buffer");
  const auto* s = static_cast<const char*>(send);
  const auto* r = static_cast<const char*>(recv);
  const char* own = r + block * rank();
  const bool in_place = s == own;
  if (!in_place)
    STRATA_CHECK(s + block <= r || r + block * size() <= s || send_count == 0,
                 "comm: all_gather on group '", name(),
                 "': send overlaps recv but is not recv's block ", rank(), " (in place)");
  a.send = in_place ? nullptr : send;
  a.recv = recv;
  a.dtype = dtype;
  a.bytes = block;
  return submit(a);
}

WorkHandle MpiComm::broadcast(void* buf, int64_t count, DType dtype, int root) {
  OpArgs a;
  a.kind = CommOp::broadcast;
  a.count = checked_count(count, dtype, "broadcast");
  check_peer(root, "broadcast root");
  STRATA_CHECK(buf || count == 0, "comm: broadcast on group '", name(), "': null buffer");
  a.recv = buf;
  a.dtype = dtype;
  a.peer = root;
  a.bytes = count * static_cast<int64_t>(dtype_size(dtype));
  return submit(a);
}

WorkHandle MpiComm::send(const void* buf, int64_t count, DType dtype, int peer, int tag) {
  OpArgs a;
  a.kind = CommOp::send;
  a.count = checked_count(count, dtype, "send");
  check_peer(peer, "send");
  STRATA_CHECK(tag >= 0 && tag <= 32767, "comm: send on group '", name(), "': tag ", tag,
               " is outside 0..32767 (the range MPI guarantees)");
  STRATA_CHECK(buf || count == 0, "comm: send on group '", name(), "': null buffer");
  a.send = buf;
  a.dtype = dtype;
  a.peer = peer;
  a.tag = tag;
  a.bytes = count * static_cast<int64_t>(dtype_size(dtype));
  return submit(a);
}

WorkHandle MpiComm::recv(void* buf, int64_t count, DType dtype, int peer, int tag) {
  OpArgs a;
  a.kind = CommOp::recv;
  a.count = checked_count(count, dtype, "recv");
  check_peer(peer, "recv");
  STRATA_CHECK(tag >= 0 && tag <= 32767, "comm: recv on group '", name(), "': tag ", tag,
               " is outside 0..32767 (the range MPI guarantees)");
  STRATA_CHECK(buf || count == 0, "comm: recv on group '", name(), "': null buffer");
  a.recv = buf;
  a.dtype = dtype;
  a.peer = peer;
  a.tag = tag;
  a.bytes = count * static_cast<int64_t>(dtype_size(dtype));
  return submit(a);
}

void MpiComm::barrier() {
  OpArgs a;
  a.kind = CommOp::barrier;
  submit(a)->wait();
}

WorkHandle MpiComm::all_to_all_v(const void* send, const int64_t* send_counts, void* recv,
                                 const int64_t* recv_counts, DType dtype) {
  OpArgs a;
  a.kind = CommOp::all_to_all;
  a.dtype = dtype;
  comm::mpi_datatype(dtype);
  STRATA_CHECK(send_counts && recv_counts, "comm: all_to_all_v on group '", name(),
               "': null counts");
  // Counts and displacements are MPI ints: each must fit, and so must every running total.
  int64_t sent = 0, received = 0;
  for (int p = 0; p < size(); ++p) {
    a.send_displs.push_back(checked_count(sent, dtype, "all_to_all_v"));
    a.recv_displs.push_back(checked_count(received, dtype, "all_to_all_v"));
    a.send_counts.push_back(checked_count(send_counts[p], dtype, "all_to_all_v"));
    a.recv_counts.push_back(checked_count(recv_counts[p], dtype, "all_to_all_v"));
    sent += send_counts[p];
    received += recv_counts[p];
  }
  const auto elem = static_cast<int64_t>(dtype_size(dtype));
  STRATA_CHECK((send || sent == 0) && (recv || received == 0), "comm: all_to_all_v on group '",
               name(), "': null buffer");
  const auto* s = static_cast<const char*>(send);
  const auto* r = static_cast<const char*>(recv);
  STRATA_CHECK(sent == 0 || received == 0 || s + sent * elem <= r || r + received * elem <= s,
               "comm: all_to_all_v on group '", name(), "': send and recv overlap");
  a.send = send;
  a.recv = recv;
  a.bytes = sent * elem;
  return submit(a);
}

void MpiComm::set_step(int64_t step) {
  group_->step.store(step);
}

void MpiComm::set_timeout(double seconds) {
  STRATA_CHECK(seconds > 0, "comm: timeout for group '", name(), "' must be positive (got ",
               seconds, " s)");
  group_->timeout_seconds.store(seconds);
}

double MpiComm::timeout() const {
  return group_->timeout_seconds.load();
}

CommStats MpiComm::stats() const {
  std::lock_guard<std::mutex> lock(group_->stats_mutex);
  return group_->stats;
}

void MpiComm::reset_stats() {
  std::lock_guard<std::mutex> lock(group_->stats_mutex);
  group_->stats = CommStats{};
}

}  // namespace strata
