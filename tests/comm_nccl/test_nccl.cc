// NcclComm on real GPUs, run under mpirun like the MPI tests (tests/comm/mpi_gtest_main.cc: every
// rank runs every test in the same order). Each rank uses device local_rank % device_count. A
// test that needs a GPU skips with the reason without one, or when the job has more ranks than
// the node has GPUs (NCCL cannot place two ranks of one communicator on one device).
// Inputs are small integers (comm_test_util.h), exact in bf16 and in their sums, so sum and max
// compare exactly; avg compares within the dtype's rounding.
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "comm/layout.h"
#include "comm/nccl/nccl_check.h"
#include "comm/nccl/nccl_comm.h"
#include "comm/nccl/nccl_groups.h"
#include "comm/process_groups.h"
#include "comm_test_util.h"
#include "gpu_test.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device.h"

namespace strata::testing {
namespace {

// Skips unless every rank of the job has a GPU of its own.
#define REQUIRE_NCCL()                                                                         \
  do {                                                                                         \
    REQUIRE_GPU();                                                                             \
    const int strata_gpus_ = ::strata::cuda::device_count();                                   \
    if (world().size() > strata_gpus_)                                                         \
      GTEST_SKIP() << "NCCL test skipped: " << world().size() << " ranks but " << strata_gpus_ \
                   << " GPU(s); NCCL cannot place two ranks of one "                           \
                   << "communicator on one device (run with -np <= the number of GPUs)";       \
  } while (0)

// A device buffer of `count` elements of `dtype`, filled from / read into a host Buffer.
class DeviceBuffer {
 public:
  DeviceBuffer(DType dtype, int64_t count) : dtype_(dtype), count_(count) {
    STRATA_CUDA_CHECK(cudaMalloc(&ptr_, bytes() + 16));
    STRATA_CUDA_CHECK(cudaMemset(ptr_, 0, bytes() + 16));
    STRATA_CUDA_CHECK(cudaDeviceSynchronize());
  }
  ~DeviceBuffer() { cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* data() { return ptr_; }
  char* at(int64_t i) { return static_cast<char*>(ptr_) + i * dtype_size(dtype_); }
  size_t bytes() const { return static_cast<size_t>(count_) * dtype_size(dtype_); }
  void upload(const Buffer& host) {
    STRATA_CUDA_CHECK(cudaMemcpy(ptr_, host.data(), bytes(), cudaMemcpyHostToDevice));
    // A pageable upload may still be in flight when cudaMemcpy returns; tests that use their own
    // non-blocking streams must not race it.
    STRATA_CUDA_CHECK(cudaDeviceSynchronize());
  }
  // Synchronous copy on the legacy default stream: ordered after whatever that stream waits on.
  Buffer download() const {
    Buffer host(dtype_, count_);
    STRATA_CUDA_CHECK(cudaMemcpy(host.data(), ptr_, bytes(), cudaMemcpyDeviceToHost));
    return host;
  }

 private:
  DType dtype_;
  int64_t count_;
  void* ptr_ = nullptr;
};

Buffer inputs(DType dtype, int64_t count, int rank) {
  Buffer b(dtype, count);
  for (int64_t i = 0; i < count; ++i) b.set(i, input_value(rank, i));
  return b;
}

// One NCCL group over the test world, shared by the tests (creating one takes a while).
class Nccl : public ::testing::Test {
 protected:
  static NcclComm& comm() {
    std::unique_ptr<NcclComm>& c = slot();
    if (!c) c = std::make_unique<NcclComm>(world(), local_device());
    return *c;
  }
  static void TearDownTestSuite() { slot().reset(); }
  void TearDown() override {
    if (slot()) slot()->set_compute_stream(nullptr);
  }

 private:
  static std::unique_ptr<NcclComm>& slot() {
    static std::unique_ptr<NcclComm> c;
    return c;
  }
};

void check_all_reduce(NcclComm& c, DType dtype, ReduceOp op) {
  const int64_t n = 4099;  // odd: no assumption of aligned sizes
  const int size = c.size();
  DeviceBuffer buf(dtype, n);
  buf.upload(inputs(dtype, n, c.rank()));
  WorkHandle w = c.all_reduce(buf.data(), n, dtype, op);
  // Device-side wait: the legacy stream (the default compute stream) waits for the result, so the
  // synchronous copy below sees it without any host wait.
  w->wait();
  const Buffer got = buf.download();
  EXPECT_TRUE(w->test());
  const Buffer ref(dtype, 1);
  for (int64_t i = 0; i < n; ++i) {
    float sum = 0, max = -1e30f;
    for (int r = 0; r < size; ++r) {
      sum += input_value(r, i);
      max = std::max(max, input_value(r, i));
    }
    if (op == ReduceOp::sum) {
      ASSERT_EQ(got.get(i), sum) << "element " << i;
    } else if (op == ReduceOp::max) {
      ASSERT_EQ(got.get(i), max) << "element " << i;
    } else {
      const float want = ref.round(sum / static_cast<float>(size));
      const float tol = dtype == DType::bf16 ? 0.01f * std::fabs(want) + 1e-6f : 1e-5f;
      ASSERT_NEAR(got.get(i), want, tol) << "element " << i;
    }
  }
}

TEST_F(Nccl, AllReduceSumAvgMaxF32) {
  REQUIRE_NCCL();
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max})
    check_all_reduce(comm(), DType::f32, op);
}

TEST_F(Nccl, AllReduceSumAvgMaxBf16) {
  REQUIRE_NCCL();
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max})
    check_all_reduce(comm(), DType::bf16, op);
}

TEST_F(Nccl, ReduceScatterOutOfPlaceAndInPlace) {
  REQUIRE_NCCL();
  NcclComm& c = comm();
  const int64_t n = 257;  // per rank
  const int size = c.size();
  const Buffer in = inputs(DType::f32, n * size, c.rank());
  DeviceBuffer send(DType::f32, n * size), recv(DType::f32, n), both(DType::f32, n * size);
  send.upload(in);
  both.upload(in);
  wait_host(c.reduce_scatter(send.data(), recv.data(), n, DType::f32, ReduceOp::sum));
  // In place, MpiComm's convention: the result is the first block.
  wait_host(c.reduce_scatter(both.data(), both.data(), n, DType::f32, ReduceOp::sum));
  const Buffer got = recv.download(), got_in_place = both.download();
  for (int64_t i = 0; i < n; ++i) {
    float sum = 0;
    for (int r = 0; r < size; ++r) sum += input_value(r, c.rank() * n + i);
    ASSERT_EQ(got.get(i), sum) << "element " << i;
    ASSERT_EQ(got_in_place.get(i), sum) << "in place, element " << i;
  }
}

TEST_F(Nccl, AllGatherOutOfPlaceAndInPlace) {
  REQUIRE_NCCL();
  NcclComm& c = comm();
  const int64_t n = 1000;
  const int size = c.size();
  DeviceBuffer send(DType::bf16, n), recv(DType::bf16, n * size), both(DType::bf16, n * size);
  send.upload(inputs(DType::bf16, n, c.rank()));
  STRATA_CUDA_CHECK(
      cudaMemcpy(both.at(n * c.rank()), send.data(), send.bytes(), cudaMemcpyDeviceToDevice));
  wait_host(c.all_gather(send.data(), recv.data(), n, DType::bf16));
  wait_host(c.all_gather(both.at(n * c.rank()), both.data(), n, DType::bf16));
  const Buffer got = recv.download(), got_in_place = both.download();
  for (int r = 0; r < size; ++r)
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(got.get(r * n + i), input_value(r, i)) << "block " << r << " element " << i;
      ASSERT_EQ(got_in_place.get(r * n + i), input_value(r, i)) << "in place, block " << r;
    }
}

TEST_F(Nccl, BroadcastFromLastRank) {
  REQUIRE_NCCL();
  NcclComm& c = comm();
  const int64_t n = 333;
  const int root = c.size() - 1;
  DeviceBuffer buf(DType::i32, n);
  buf.upload(inputs(DType::i32, n, c.rank()));
  wait_host(c.broadcast(buf.data(), n, DType::i32, root));
  const Buffer got = buf.download();
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got.get(i), input_value(root, i)) << "element " << i;
}

TEST_F(Nccl, SendRecvRing) {
  REQUIRE_NCCL();
  NcclComm& c = comm();
  const int64_t n = 4096;
  const int size = c.size(), rank = c.rank();
  const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
  DeviceBuffer out(DType::f32, n), in(DType::f32, n);
  out.upload(inputs(DType::f32, n, rank));
  if (size == 1) {
    // Both directions as one NCCL group, here with itself (a plain send to itself would wait
    // forever for the recv queued behind it on the same stream).
    wait_host(c.send_recv(out.data(), in.data(), n, DType::f32, 0, 3));
  } else {
    // Plain calls in an order that matches on every rank: even ranks send first, odd ranks
    // receive first.
    if (rank % 2 == 0) {
      WorkHandle s = c.send(out.data(), n, DType::f32, next, 3);
      WorkHandle r = c.recv(in.data(), n, DType::f32, prev, 3);
      wait_host(s);
      wait_host(r);
    } else {
      WorkHandle r = c.recv(in.data(), n, DType::f32, prev, 3);
      WorkHandle s = c.send(out.data(), n, DType::f32, next, 3);
      wait_host(r);
      wait_host(s);
    }
  }
  const Buffer got = in.download();
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got.get(i), input_value(prev, i)) << "element " << i;
}

TEST_F(Nccl, SendRecvPairExchange) {
  REQUIRE_NCCL();
  NcclComm& c = comm();
  const int64_t n = 1000;
  const int peer = c.rank() ^ 1;  // pairs 0-1, 2-3, ...; a rank without a partner: itself
  const int partner = peer < c.size() ? peer : c.rank();
  DeviceBuffer out(DType::bf16, n), in(DType::bf16, n);
  out.upload(inputs(DType::bf16, n, c.rank()));
  // Both ranks "send first": fine as one NCCL group.
  wait_host(c.send_recv(out.data(), in.data(), n, DType::bf16, partner, 9));
  const Buffer got = in.download();
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got.get(i), input_value(partner, i)) << "element " << i;
  const CommStats s = c.stats();
  EXPECT_GE(s[CommOp::send].calls, 1);
  EXPECT_GE(s[CommOp::recv].calls, 1);
}

// Rank r sends (r + p) % 3 * 100 + 7 f32 elements to rank p, each naming (r, p, i); every rank
// checks each block it received (the MPI test's pattern, on device buffers).
TEST_F(Nccl, AllToAllVMovesEachBlockToItsRank) {
  REQUIRE_NCCL();
  NcclComm& c = comm();
  const int n = c.size(), me = c.rank();
  auto count = [](int from, int to) -> int64_t { return (from + to) % 3 * 100 + 7; };
  auto value = [](int from, int to, int64_t i) {
    return static_cast<float>(from * 100000 + to * 1000 + i);
  };
  std::vector<int64_t> sc(n), rc(n);
  int64_t sent = 0, received = 0;
  for (int p = 0; p < n; ++p) {
    sc[p] = count(me, p);
    rc[p] = count(p, me);
    sent += sc[p];
    received += rc[p];
  }
  Buffer host(DType::f32, sent);
  int64_t at = 0;
  for (int p = 0; p < n; ++p)
    for (int64_t i = 0; i < sc[p]; ++i) host.set(at++, value(me, p, i));
  DeviceBuffer out(DType::f32, sent), in(DType::f32, received);
  out.upload(host);
  wait_host(c.all_to_all_v(out.data(), sc.data(), in.data(), rc.data(), DType::f32));
  const Buffer got = in.download();
  at = 0;
  for (int p = 0; p < n; ++p)
    for (int64_t i = 0; i < rc[p]; ++i, ++at)
      ASSERT_EQ(got.get(at), value(p, me, i)) << "from rank " << p << " element " << i;
  EXPECT_GE(c.stats()[CommOp::all_to_all].calls, 1);
}

TEST_F(Nccl, StatsCountCallsBytesAndSeconds) {
  REQUIRE_NCCL();
  NcclComm& c = comm();
  c.reset_stats();
  const int64_t n = 1 << 20;
  DeviceBuffer buf(DType::f32, n), gathered(DType::f32, n * c.size());
  std::vector<WorkHandle> works;
  for (int i = 0; i < 3; ++i)
    works.push_back(c.all_reduce(buf.data(), n, DType::f32, ReduceOp::sum));
  works.push_back(c.all_gather(buf.data(), gathered.data(), n, DType::f32));
  wait_host(works.back());  // completion is in issue order: the earlier ones are done too
  for (const WorkHandle& w : works) EXPECT_TRUE(w->test());
  c.barrier();
  const CommStats s = c.stats();
  EXPECT_EQ(s[CommOp::all_reduce].calls, 3);
  EXPECT_EQ(s[CommOp::all_reduce].bytes, 3 * n * 4);
  // With one rank NCCL's in-place all-reduce moves nothing: its GPU interval may read 0.
  EXPECT_GE(s[CommOp::all_reduce].seconds, 0.0);
  EXPECT_EQ(s[CommOp::all_gather].calls, 1);
  EXPECT_EQ(s[CommOp::all_gather].bytes, n * 4);
  EXPECT_GT(s[CommOp::all_gather].seconds, 0.0);  // out of place: at least a 4 MB copy
  EXPECT_EQ(s[CommOp::barrier].calls, 1);
  EXPECT_GE(s.total_wait_seconds(), 0.0);
  // Rejected calls are not counted.
  EXPECT_THROW(c.all_reduce(buf.data(), -1, DType::f32, ReduceOp::sum), Error);
  EXPECT_EQ(c.stats()[CommOp::all_reduce].calls, 3);
  c.reset_stats();
  EXPECT_EQ(c.stats().total_bytes(), 0);
}

// Host callback that keeps a stream busy: the compute stream's write lands late.
void CUDART_CB sleep_300ms(void*) {
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
}

TEST_F(Nccl, ComputeStreamWriteIsOrderedBeforeTheCollective) {
  REQUIRE_NCCL();
  NcclComm& c = comm();
  cuda::Stream compute;
  c.set_compute_stream(compute.get());
  const int64_t n = 1 << 16;
  DeviceBuffer src(DType::f32, n), send(DType::f32, n), recv(DType::f32, n * c.size());
  src.upload(inputs(DType::f32, n, c.rank()));  // send stays zero until the compute stream runs
  // The compute stream writes `send` 300 ms from now; the all-gather is issued at once and must
  // read the written values (the comm stream waits on the compute stream's event), not zeros.
  STRATA_CUDA_CHECK(cudaLaunchHostFunc(compute.get(), sleep_300ms, nullptr));
  STRATA_CUDA_CHECK(cudaMemcpyAsync(send.data(), src.data(), send.bytes(), cudaMemcpyDeviceToDevice,
                                    compute.get()));
  WorkHandle w = c.all_gather(send.data(), recv.data(), n, DType::f32);
  EXPECT_FALSE(w->test()) << "the all-gather finished before the compute stream's write";
  // The other direction: the compute stream reads the result after a device-side wait.
  w->wait();
  std::vector<float> host(static_cast<size_t>(n * c.size()));
  STRATA_CUDA_CHECK(cudaMemcpyAsync(host.data(), recv.data(), recv.bytes(), cudaMemcpyDeviceToHost,
                                    compute.get()));
  compute.synchronize();
  EXPECT_TRUE(w->test());
  for (int r = 0; r < c.size(); ++r)
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(host[static_cast<size_t>(r * n + i)], input_value(r, i))
          << "block " << r << " element " << i;
}

TEST_F(Nccl, BadArgumentsThrowBeforeIssue) {
  REQUIRE_NCCL();
  NcclComm& c = comm();
  std::vector<float> host(16);
  DeviceBuffer buf(DType::i32, 16);
  const auto message = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_NE(message([&] {
              c.all_reduce(host.data(), 16, DType::f32, ReduceOp::sum);
            }).find("'world': buffer"),
            std::string::npos);
  EXPECT_NE(message([&] {
              c.all_reduce(host.data(), 16, DType::f32, ReduceOp::sum);
            }).find("is host memory"),
            std::string::npos);
  EXPECT_NE(message([&] {
              c.all_reduce(buf.data(), 16, DType::i32, ReduceOp::avg);
            }).find("avg needs a floating dtype"),
            std::string::npos);
  EXPECT_NE(message([&] {
              c.broadcast(buf.data(), 16, DType::i32, c.size());
            }).find("is not in the group"),
            std::string::npos);
  EXPECT_NE(message([&] { c.send(buf.data(), 16, DType::i32, 0, 40000); }).find("tag 40000"),
            std::string::npos);
}

TEST_F(Nccl, GroupsMirrorProcessGroups) {
  REQUIRE_NCCL();
  ProcessGroups groups = ProcessGroups::create(resolve_layout(1, 1, 0, 0, world().size()));
  NcclGroups nccl = make_nccl_groups(groups, local_device());
  EXPECT_EQ(nccl.dp->name(), "dp");
  EXPECT_EQ(nccl.dp->size(), groups.dp().size());
  EXPECT_EQ(nccl.tp->size(), 1);
  EXPECT_EQ(nccl.world->world_rank_of(nccl.world->rank()),
            groups.world().world_rank_of(groups.world().rank()));
  const int64_t n = 64;
  DeviceBuffer buf(DType::f32, n);
  buf.upload(inputs(DType::f32, n, nccl.dp->rank()));
  wait_host(nccl.dp->all_reduce(buf.data(), n, DType::f32, ReduceOp::sum));
  const Buffer got = buf.download();
  float sum = 0;
  for (int r = 0; r < nccl.dp->size(); ++r) sum += input_value(r, 5);
  EXPECT_EQ(got.get(5), sum);
  nccl.set_step(3);
  EXPECT_EQ(nccl.stats()[CommOp::all_reduce].calls, 1);
}

// No GPU needed: the check macro's message and the dtype mapping.
TEST(NcclCheck, ErrorNamesCallPlaceAndNcclReason) {
  std::string what;
  try {
    STRATA_NCCL_CHECK(ncclGroupEnd());  // not inside ncclGroupStart: invalid usage
  } catch (const Error& e) {
    what = e.what();
  }
  EXPECT_NE(what.find("NCCL error at "), std::string::npos) << what;
  EXPECT_NE(what.find("test_nccl.cc:"), std::string::npos) << what;
  EXPECT_NE(what.find("ncclGroupEnd() failed: invalid usage"), std::string::npos) << what;
  EXPECT_NE(what.find("(ncclInvalidUsage)"), std::string::npos) << what;
  EXPECT_NE(what.find("last NCCL error: ncclGroupEnd: not in a group call"), std::string::npos)
      << what;
}

TEST(NcclCheck, DtypesAndReduceOps) {
  EXPECT_EQ(nccl::datatype(DType::f32), ncclFloat32);
  EXPECT_EQ(nccl::datatype(DType::bf16), ncclBfloat16);
  EXPECT_EQ(nccl::datatype(DType::f16), ncclFloat16);
  EXPECT_EQ(nccl::datatype(DType::i32), ncclInt32);
  EXPECT_EQ(nccl::reduce_op(DType::bf16, ReduceOp::avg), ncclAvg);
  EXPECT_EQ(nccl::reduce_op(DType::i32, ReduceOp::max), ncclMax);
  EXPECT_THROW(nccl::reduce_op(DType::i32, ReduceOp::avg), Error);
  EXPECT_THROW(nccl::reduce_op(DType::u16, ReduceOp::sum), Error);
}

}  // namespace
}  // namespace strata::testing
