#include "comm/nccl/nccl_comm.h"

#include <cstring>
#include <mutex>

#include "comm/mpi_comm.h"
#include "comm/mpi_runtime.h"
#include "comm/nccl/nccl_check.h"
#include "comm/nccl/nccl_group_state.h"
#include "core/trace.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device.h"

namespace strata {

using nccl::Clock;
using nccl::DeviceGuard;
using nccl::OpState;

// ---------------------------------------------------------------------------------------------
// NcclWork

NcclWork::NcclWork(std::shared_ptr<nccl::Group> group, std::shared_ptr<OpState> op)
    : group_(std::move(group)), op_(std::move(op)) {}

cudaEvent_t NcclWork::event() const {
  return op_->done;
}

bool NcclWork::test() {
  nccl::Group& g = *group_;
  const std::string what = g.describe(*op_);
  DeviceGuard guard(g.device);
  // An aborted communicator's kernels end early: their completion event says nothing.
  g.throw_if_aborted(what);
  const cudaError_t e = cudaEventQuery(op_->done);
  if (e == cudaSuccess) return true;
  if (e != cudaErrorNotReady)
    fail("comm: ", what, " failed: ", cudaGetErrorString(e), " (", cudaGetErrorName(e), ")");
  std::lock_guard<std::mutex> lock(g.mutex);
  g.poll_async(what);
  return false;
}

void NcclWork::wait() {
  wait_stream(op_->compute);
}

void NcclWork::wait_stream(cudaStream_t stream) {
  nccl::Group& g = *group_;
  g.throw_if_aborted(g.describe(*op_));
  DeviceGuard guard(g.device);
  STRATA_CUDA_CHECK(cudaStreamWaitEvent(stream, op_->done, 0));
}

void NcclWork::wait_host() {
  if (test()) return;
  nccl::Group& g = *group_;
  TraceSpan span(nccl::kWaitNames[static_cast<int>(op_->kind)], "comm_wait");
  span.arg("group", g.name).arg("bytes", op_->bytes);
  DeviceGuard guard(g.device);
  const std::string what = g.describe(*op_);
  const double timeout = g.timeout_seconds.load();
  const Clock::time_point start = Clock::now();
  const Clock::time_point deadline = nccl::deadline_after(timeout);
  for (;;) {
    const cudaError_t e = cudaEventQuery(op_->done);
    if (e == cudaSuccess) break;
    if (e != cudaErrorNotReady)
      fail("comm: ", what, " failed: ", cudaGetErrorString(e), " (", cudaGetErrorName(e), ")");
    {
      std::lock_guard<std::mutex> lock(g.mutex);
      g.poll_async(what);  // a peer's failure shows here long before the timeout
      if (Clock::now() > deadline) {
        const int peer = op_->peer >= 0 && (op_->kind == CommOp::send ||
                                            op_->kind == CommOp::recv || op_->exchange)
                             ? g.world_rank(op_->peer)
                             : -1;
        g.timeout_exit(what, op_->bytes, peer, g.behind(op_.get()));
      }
    }
    nccl::pause_poll(start);
  }
  g.throw_if_aborted(what);
  const double waited = std::chrono::duration<double>(Clock::now() - start).count();
  std::lock_guard<std::mutex> lock(g.mutex);
  g.stats.ops[static_cast<int>(op_->exchange ? CommOp::send : op_->kind)].wait_seconds += waited;
}

void wait_host(const WorkHandle& work) {
  if (!work) return;
  if (auto* w = dynamic_cast<NcclWork*>(work.get()))
    w->wait_host();
  else
    work->wait();
}

// ---------------------------------------------------------------------------------------------
// NcclComm

struct NcclComm::Args {
  CommOp kind = CommOp::barrier;
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;  // NCCL's count: the buffer (all_reduce, broadcast, p2p) or one block
  DType dtype = DType::f32;
  ReduceOp op = ReduceOp::sum;
  int peer = -1;
  int tag = 0;
  int64_t bytes = 0;
  bool exchange = false;
  // reduce_scatter in place: NCCL leaves the result in block rank(); MpiComm's convention (and
  // MPI's) puts it first, so a device copy follows on the communication stream.
  size_t move_block_bytes = 0;
  // all_to_all: elements to and from each rank (size() entries, the caller's arrays: read while
  // the operation is enqueued).
  const int64_t* send_counts = nullptr;
  const int64_t* recv_counts = nullptr;
};

namespace {
// One operation's arguments; bytes default to the whole buffer (count elements).
NcclComm::Args op_args(CommOp kind, const void* send, void* recv, int64_t count, DType dtype) {
  NcclComm::Args a;
  a.kind = kind;
  a.send = send;
  a.recv = recv;
  a.count = static_cast<size_t>(count);
  a.dtype = dtype;
  a.bytes = count * static_cast<int64_t>(dtype_size(dtype));
  return a;
}
}  // namespace

NcclComm::NcclComm(Comm& bootstrap, int device) {
  auto g = std::make_shared<nccl::Group>();
  g->name = bootstrap.name();
  g->rank = bootstrap.rank();
  g->size = bootstrap.size();
  g->device = device;
  for (int r = 0; r < g->size; ++r) g->world_ranks.push_back(bootstrap.world_rank_of(r));
  constexpr int kShown = 16;  // large groups abbreviated in messages, as the MPI groups do
  for (int r = 0; r < g->size; ++r) {
    if (r == kShown && g->size > kShown + 1) {
      g->world_ranks_text += cat(",...,", g->world_ranks.back());
      break;
    }
    g->world_ranks_text += cat(r ? "," : "", g->world_rank(r));
  }
  if (const auto* mpi = dynamic_cast<const MpiComm*>(&bootstrap))
    g->timeout_seconds.store(mpi->timeout());

  // Every rank learns whether all have a usable device before any waits on NCCL: a rank without
  // one would otherwise leave the others blocked in the id broadcast until the timeout.
  std::string why;
  const int devices = cuda::device_count(&why);
  if (devices > 0 && (device < 0 || device >= devices))
    why = cat("device ", device, " does not exist (", devices, " visible)");
  int32_t bad = why.empty() ? 0 : 1;
  bootstrap.all_reduce(&bad, 1, DType::i32, ReduceOp::max)->wait();
  STRATA_CHECK(why.empty(), "comm: NCCL group '", g->name, "' on world rank ",
               g->world_rank(g->rank), ": ", why);
  STRATA_CHECK(bad == 0, "comm: NCCL group '", g->name,
               "': another rank has no usable GPU (see its error)");

  // The device becomes (and stays) current on the calling thread: it is the rank's device from now
  // on. Operations switch to it themselves only when issued from a thread on another device.
  STRATA_CUDA_CHECK(cudaSetDevice(device));
  ncclUniqueId id;
  std::memset(&id, 0, sizeof id);
  if (g->rank == 0) STRATA_NCCL_CHECK(ncclGetUniqueId(&id));
  static_assert(sizeof(ncclUniqueId) % 4 == 0, "the id travels as int32s");
  bootstrap.broadcast(&id, sizeof(id) / 4, DType::i32, 0)->wait();

  int least = 0, greatest = 0;
  STRATA_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  // High priority: NCCL's kernels use few SMs and wait on peers; behind a long GEMM on the
  // compute stream they would delay every other rank.
  STRATA_CUDA_CHECK(cudaStreamCreateWithPriority(&g->stream, cudaStreamNonBlocking, greatest));
  STRATA_CUDA_CHECK(cudaEventCreateWithFlags(&g->ready, cudaEventDisableTiming));
  STRATA_CUDA_CHECK(cudaMalloc(&g->scratch, 16));
  STRATA_CUDA_CHECK(cudaMemset(g->scratch, 0, 16));

  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // see the header: every wait on NCCL gets the timeout
  config.commName = g->name.c_str();
  const std::string what = cat("creating the NCCL communicator of group '", g->name,
                               "' (world ranks ", g->world_ranks_text, ")");
  {
    std::lock_guard<std::mutex> lock(g->mutex);
    const ncclResult_t r = ncclCommInitRankConfig(&g->comm, g->size, id, g->rank, &config);
    try {
      g->settle(r, "ncclCommInitRankConfig", what, -1, -1,
                nccl::deadline_after(g->timeout_seconds.load()));
    } catch (...) {
      // A half-made communicator cannot be finalized: abort it (the destructor then skips it).
      if (g->comm && !g->aborted.load()) {
        g->aborted.store(true);
        ncclCommAbort(g->comm);
      }
      throw;
    }
  }
  group_ = std::move(g);
}

NcclComm::~NcclComm() = default;

int NcclComm::rank() const {
  return group_->rank;
}
int NcclComm::size() const {
  return group_->size;
}
const std::string& NcclComm::name() const {
  return group_->name;
}
int NcclComm::world_rank_of(int group_rank) const {
  STRATA_CHECK(group_rank >= 0 && group_rank < size(), "comm: group '", name(), "' has ", size(),
               " ranks; there is no rank ", group_rank);
  return group_->world_rank(group_rank);
}
cudaStream_t NcclComm::comm_stream() const {
  return group_->stream;
}
cudaStream_t NcclComm::compute_stream() const {
  return group_->compute.load();
}
void NcclComm::set_compute_stream(cudaStream_t stream) {
  group_->compute.store(stream);
}
int NcclComm::device() const {
  return group_->device;
}
ncclComm_t NcclComm::handle() const {
  return group_->comm;
}

void NcclComm::check_count(int64_t count, const char* what) const {
  STRATA_CHECK(count >= 0, "comm: ", what, " on group '", name(), "': count ", count,
               " is negative");
}

void NcclComm::check_peer(int peer, const char* what) const {
  STRATA_CHECK(peer >= 0 && peer < size(), "comm: ", what, " on group '", name(), "': rank ", peer,
               " is not in the group (", size(), " ranks)");
}

void NcclComm::check_device_buffer(const void* p, const char* what) const {
  STRATA_CHECK(p, "comm: ", what, " on group '", name(), "': null buffer");
  cudaPointerAttributes attr{};
  const cudaError_t e = cudaPointerGetAttributes(&attr, p);
  if (e != cudaSuccess) {
    cudaGetLastError();  // not sticky: clear it so that later calls do not report it
    fail("comm: ", what, " on group '", name(), "': cannot inspect buffer ", p, ": ",
         cudaGetErrorString(e));
  }
  STRATA_CHECK(attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged,
               "comm: ", what, " on group '", name(), "': buffer ", p,
               " is host memory; NCCL groups move GPU buffers (use the MPI group for host ones)");
  STRATA_CHECK(attr.type == cudaMemoryTypeManaged || attr.device == device(), "comm: ", what,
               " on group '", name(), "': buffer ", p, " is on device ", attr.device,
               ", the group's device is ", device());
}

WorkHandle NcclComm::issue(const Args& a) {
  nccl::Group& g = *group_;
  DeviceGuard guard(g.device);
  auto op = std::make_shared<OpState>();
  op->kind = a.kind;
  op->bytes = a.bytes;
  op->peer = a.peer;
  op->tag = a.tag;
  op->exchange = a.exchange;
  op->compute = g.compute.load();
  STRATA_CUDA_CHECK(cudaEventCreateWithFlags(&op->start, cudaEventDefault));
  STRATA_CUDA_CHECK(cudaEventCreateWithFlags(&op->done, cudaEventDefault));
  const std::string what = g.describe(*op);
  const ncclDataType_t type = nccl::datatype(a.dtype);
  const bool reduces = a.kind == CommOp::all_reduce || a.kind == CommOp::reduce_scatter;
  const ncclRedOp_t red = reduces ? nccl::reduce_op(a.dtype, a.op) : ncclSum;
  const int peer_world = a.peer >= 0 && a.kind != CommOp::broadcast ? g.world_rank(a.peer) : -1;

  std::lock_guard<std::mutex> lock(g.mutex);
  g.throw_if_aborted(what);
  g.harvest();
  // The operation sees everything the compute stream did before this call.
  STRATA_CUDA_CHECK(cudaEventRecord(g.ready, op->compute));
  STRATA_CUDA_CHECK(cudaStreamWaitEvent(g.stream, g.ready, 0));
  STRATA_CUDA_CHECK(cudaEventRecord(op->start, g.stream));
  const Clock::time_point deadline = nccl::deadline_after(g.timeout_seconds.load());
  ncclResult_t r = ncclSuccess;
  const char* call = "";
  switch (a.kind) {
    case CommOp::all_reduce:
      call = "ncclAllReduce";
      r = ncclAllReduce(a.recv, a.recv, a.count, type, red, g.comm, g.stream);
      break;
    case CommOp::reduce_scatter:
      call = "ncclReduceScatter";
      r = ncclReduceScatter(a.send, a.recv, a.count, type, red, g.comm, g.stream);
      break;
    case CommOp::all_gather:
      call = "ncclAllGather";
      r = ncclAllGather(a.send, a.recv, a.count, type, g.comm, g.stream);
      break;
    case CommOp::broadcast:
      call = "ncclBroadcast";
      r = ncclBroadcast(a.recv, a.recv, a.count, type, a.peer, g.comm, g.stream);
      break;
    case CommOp::send:
    case CommOp::recv:
      if (a.exchange) {
        // Inside a group NCCL only records the calls; ncclGroupEnd launches (or reports) them,
        // and must be called whatever happened to the calls before it.
        call = "ncclGroupStart/ncclSend/ncclRecv/ncclGroupEnd";
        r = ncclGroupStart();
        if (r == ncclSuccess) {
          const ncclResult_t rs = ncclSend(a.send, a.count, type, a.peer, g.comm, g.stream);
          const ncclResult_t rr = ncclRecv(a.recv, a.count, type, a.peer, g.comm, g.stream);
          const ncclResult_t re = ncclGroupEnd();
          r = rs != ncclSuccess ? rs : rr != ncclSuccess ? rr : re;
          if (r == ncclSuccess || r == ncclInProgress) r = re;
        }
      } else if (a.kind == CommOp::send) {
        call = "ncclSend";
        r = ncclSend(a.send, a.count, type, a.peer, g.comm, g.stream);
      } else {
        call = "ncclRecv";
        r = ncclRecv(a.recv, a.count, type, a.peer, g.comm, g.stream);
      }
      break;
    case CommOp::barrier:
      call = "ncclAllReduce";
      r = ncclAllReduce(g.scratch, g.scratch, 1, ncclInt32, ncclSum, g.comm, g.stream);
      break;
    case CommOp::all_to_all: {
      // NCCL has no all-to-all-v: one group of a send and a receive per peer, which NCCL runs
      // as one operation (its documented all-to-all pattern). ncclGroupEnd must be called
      // whatever happened to the calls before it.
      call = "ncclGroupStart/ncclSend/ncclRecv/ncclGroupEnd (all_to_all)";
      const size_t elem = dtype_size(a.dtype);
      r = ncclGroupStart();
      if (r == ncclSuccess) {
        ncclResult_t first = ncclSuccess;
        size_t sent = 0, received = 0;
        for (int p = 0; p < size(); ++p) {
          const auto sc = static_cast<size_t>(a.send_counts[p]);
          const auto rc = static_cast<size_t>(a.recv_counts[p]);
          if (sc > 0 && first == ncclSuccess)
            first = ncclSend(static_cast<const char*>(a.send) + sent * elem, sc, type, p, g.comm,
                             g.stream);
          if (rc > 0 && first == ncclSuccess)
            first = ncclRecv(static_cast<char*>(a.recv) + received * elem, rc, type, p, g.comm,
                             g.stream);
          sent += sc;
          received += rc;
        }
        const ncclResult_t end = ncclGroupEnd();
        r = first != ncclSuccess ? first : end;
      }
      break;
    }
  }
  g.settle(r, call, what, a.bytes, peer_world, deadline);
  if (a.move_block_bytes > 0) {
    char* recv = static_cast<char*>(a.recv);
    STRATA_CUDA_CHECK(cudaMemcpyAsync(recv - a.move_block_bytes * static_cast<size_t>(rank()), recv,
                                      a.move_block_bytes, cudaMemcpyDeviceToDevice, g.stream));
  }
  STRATA_CUDA_CHECK(cudaEventRecord(op->done, g.stream));
  const auto count_issue = [&g, &a](CommOp kind) {
    CommOpStats& s = g.stats.ops[static_cast<int>(kind)];
    s.calls += 1;
    s.bytes += a.bytes;
  };
  count_issue(a.kind);
  if (a.exchange) count_issue(CommOp::recv);
  g.in_flight.push_back(op);
  return std::make_shared<NcclWork>(group_, std::move(op));
}

WorkHandle NcclComm::all_reduce(void* buf, int64_t count, DType dtype, ReduceOp op) {
  check_count(count, "all_reduce");
  nccl::reduce_op(dtype, op);  // throws for avg on integers, any reduction of u16
  if (count > 0) check_device_buffer(buf, "all_reduce");
  Args a = op_args(CommOp::all_reduce, nullptr, buf, count, dtype);
  a.op = op;
  return issue(a);
}

WorkHandle NcclComm::reduce_scatter(const void* send, void* recv, int64_t recv_count, DType dtype,
                                    ReduceOp op) {
  check_count(recv_count, "reduce_scatter");
  nccl::reduce_op(dtype, op);
  const int64_t block = recv_count * static_cast<int64_t>(dtype_size(dtype));
  const int64_t total = block * size();
  Args a = op_args(CommOp::reduce_scatter, send, recv, recv_count, dtype);
  a.op = op;
  a.bytes = total;
  if (recv_count > 0) {
    check_device_buffer(send, "reduce_scatter");
    check_device_buffer(recv, "reduce_scatter");
    const auto* s = static_cast<const char*>(send);
    auto* r = static_cast<char*>(recv);
    if (send == recv) {
      // NCCL's in place: recvbuff = sendbuff + rank * recv_count.
      a.recv = r + block * rank();
      if (rank() != 0) a.move_block_bytes = static_cast<size_t>(block);
    } else {
      STRATA_CHECK(s + total <= r || r + block <= s, "comm: reduce_scatter on group '", name(),
                   "': send and recv overlap (only send == recv, in place, is allowed)");
    }
  }
  return issue(a);
}

WorkHandle NcclComm::all_gather(const void* send, void* recv, int64_t send_count, DType dtype) {
  check_count(send_count, "all_gather");
  nccl::datatype(dtype);
  const int64_t block = send_count * static_cast<int64_t>(dtype_size(dtype));
  if (send_count > 0) {
    check_device_buffer(send, "all_gather");
    check_device_buffer(recv, "all_gather");
    const auto* s = static_cast<const char*>(send);
    const auto* r = static_cast<const char*>(recv);
    // In place (send is recv's own block) is NCCL's own convention; any other overlap is not.
    if (s != r + block * rank())
      STRATA_CHECK(s + block <= r || r + block * size() <= s, "comm: all_gather on group '", name(),
                   "': send overlaps recv but is not recv's block ", rank(), " (in place)");
  }
  return issue(op_args(CommOp::all_gather, send, recv, send_count, dtype));
}

WorkHandle NcclComm::broadcast(void* buf, int64_t count, DType dtype, int root) {
  check_count(count, "broadcast");
  check_peer(root, "broadcast root");
  nccl::datatype(dtype);
  if (count > 0) check_device_buffer(buf, "broadcast");
  Args a = op_args(CommOp::broadcast, nullptr, buf, count, dtype);
  a.peer = root;
  return issue(a);
}

namespace {
// The MPI backend's tag range, so that code moving between the backends keeps its tags valid.
void check_tag(int tag, const char* what, const std::string& group) {
  STRATA_CHECK(tag >= 0 && tag <= 32767, "comm: ", what, " on group '", group, "': tag ", tag,
               " is outside 0..32767 (the range MPI guarantees)");
}
}  // namespace

WorkHandle NcclComm::point_to_point(const char* what, CommOp kind, bool exchange,
                                    const void* send_buf, void* recv_buf, int64_t count,
                                    DType dtype, int peer, int tag) {
  check_count(count, what);
  check_peer(peer, what);
  check_tag(tag, what, name());
  nccl::datatype(dtype);
  Args a = op_args(kind, send_buf, recv_buf, count, dtype);
  a.exchange = exchange;
  a.peer = peer;
  a.tag = tag;
  if (count > 0) {
    if (send_buf) check_device_buffer(send_buf, what);
    if (recv_buf) check_device_buffer(recv_buf, what);
    if (exchange) {
      const auto* s = static_cast<const char*>(send_buf);
      const auto* r = static_cast<const char*>(recv_buf);
      STRATA_CHECK(s + a.bytes <= r || r + a.bytes <= s, "comm: send_recv on group '", name(),
                   "': send and recv buffers overlap");
    }
  }
  return issue(a);
}

WorkHandle NcclComm::send(const void* buf, int64_t count, DType dtype, int peer, int tag) {
  return point_to_point("send", CommOp::send, false, buf, nullptr, count, dtype, peer, tag);
}

WorkHandle NcclComm::recv(void* buf, int64_t count, DType dtype, int peer, int tag) {
  return point_to_point("recv", CommOp::recv, false, nullptr, buf, count, dtype, peer, tag);
}

WorkHandle NcclComm::send_recv(const void* send_buf, void* recv_buf, int64_t count, DType dtype,
                               int peer, int tag) {
  return point_to_point("send_recv", CommOp::send, true, send_buf, recv_buf, count, dtype, peer,
                        tag);
}

WorkHandle NcclComm::all_to_all_v(const void* send, const int64_t* send_counts, void* recv,
                                  const int64_t* recv_counts, DType dtype) {
  STRATA_CHECK(send_counts && recv_counts, "comm: all_to_all_v on group '", name(),
               "': null counts");
  nccl::datatype(dtype);
  int64_t sent = 0, received = 0;
  for (int p = 0; p < size(); ++p) {
    check_count(send_counts[p], "all_to_all_v");
    check_count(recv_counts[p], "all_to_all_v");
    sent += send_counts[p];
    received += recv_counts[p];
  }
  const auto elem = static_cast<int64_t>(dtype_size(dtype));
  if (sent > 0) check_device_buffer(send, "all_to_all_v");
  if (received > 0) check_device_buffer(recv, "all_to_all_v");
  const auto* s = static_cast<const char*>(send);
  const auto* r = static_cast<const char*>(recv);
  STRATA_CHECK(sent == 0 || received == 0 || s + sent * elem <= r || r + received * elem <= s,
               "comm: all_to_all_v on group '", name(), "': send and recv overlap");
  Args a = op_args(CommOp::all_to_all, send, recv, sent, dtype);
  a.send_counts = send_counts;
  a.recv_counts = recv_counts;
  return issue(a);
}

void NcclComm::barrier() {
  Args a;
  a.kind = CommOp::barrier;
  wait_host(issue(a));
}

void NcclComm::set_step(int64_t step) {
  group_->step.store(step);
}

void NcclComm::set_timeout(double seconds) {
  STRATA_CHECK(seconds > 0, "comm: timeout for group '", name(), "' must be positive (got ",
               seconds, " s)");
  group_->timeout_seconds.store(seconds);
}

double NcclComm::timeout() const {
  return group_->timeout_seconds.load();
}

CommStats NcclComm::stats() const {
  nccl::Group& g = *group_;
  DeviceGuard guard(g.device);
  std::lock_guard<std::mutex> lock(g.mutex);
  g.harvest();
  return g.stats;
}

void NcclComm::reset_stats() {
  nccl::Group& g = *group_;
  DeviceGuard guard(g.device);
  std::lock_guard<std::mutex> lock(g.mutex);
  g.harvest();  // operations issued before the reset do not count after it
  g.stats = CommStats{};
}

int local_device() {
  std::string why;
  const int devices = cuda::device_count(&why);
  STRATA_CHECK(devices > 0, "comm: no GPU for this rank: ", why);
  return detect_rank_env().local_rank % devices;
}

}  // namespace strata
