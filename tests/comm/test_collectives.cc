// Every collective against a serial reference computed here from the rank-dependent inputs of all
// ranks, for f32, bf16 and f16, sum / avg / max, on odd sizes (MPI's algorithms switch on size).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>

#include "comm_test_util.h"
#include "core/error.h"

namespace strata::testing {
namespace {

const char* op_label(ReduceOp op) {
  return op == ReduceOp::sum ? "sum" : op == ReduceOp::avg ? "avg" : "max";
}

// The reduction over ranks of input_value(r, i), rounded to dtype as the comm layer does.
float reference(const Buffer& like, ReduceOp op, int64_t i, int size) {
  float acc = op == ReduceOp::max ? -1e30f : 0.0f;
  for (int r = 0; r < size; ++r) {
    const float v = like.round(input_value(r, i));
    acc = op == ReduceOp::max ? std::max(acc, v) : acc + v;
  }
  if (op == ReduceOp::avg) acc /= static_cast<float>(size);
  return like.round(acc);
}

// Compares whole buffers and reports only the first few mismatches.
template <typename Expected>
void expect_buffer(const Buffer& got, int64_t count, Expected expected, const std::string& what) {
  int64_t bad = 0;
  for (int64_t i = 0; i < count; ++i) {
    const float want = expected(i);
    if (got.get(i) != want && bad++ < 3)
      ADD_FAILURE() << what << ": element " << i << " is " << got.get(i) << ", expected " << want;
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << count << " elements differ";
}

using Case = std::tuple<DType, ReduceOp, int64_t>;

// The reference lambdas take the structured bindings they use by copy (`op = op`): clang 14 (the
// TSan build) cannot capture a structured binding, which C++20 allows and GCC does.
class Reduce : public ::testing::TestWithParam<Case> {};

TEST_P(Reduce, AllReduceMatchesSerialReference) {
  const auto [dtype, op, count] = GetParam();
  MpiComm& comm = world();
  Buffer buf(dtype, count);
  for (int64_t i = 0; i < count; ++i) buf.set(i, input_value(comm.rank(), i));
  comm.all_reduce(buf.data(), count, dtype, op)->wait();
  expect_buffer(
      buf, count, [&, op = op](int64_t i) { return reference(buf, op, i, comm.size()); },
      "all_reduce");
}

TEST_P(Reduce, ReduceScatterMatchesSerialReference) {
  const auto [dtype, op, count] = GetParam();
  MpiComm& comm = world();
  const int n = comm.size();
  Buffer send(dtype, count * n), recv(dtype, count);
  for (int64_t i = 0; i < count * n; ++i) send.set(i, input_value(comm.rank(), i));
  comm.reduce_scatter(send.data(), recv.data(), count, dtype, op)->wait();
  const int64_t offset = count * comm.rank();
  expect_buffer(
      recv, count, [&, op = op](int64_t i) { return reference(send, op, offset + i, n); },
      "reduce_scatter");
}

TEST_P(Reduce, ReduceScatterInPlaceLeavesResultInFirstBlock) {
  const auto [dtype, op, count] = GetParam();
  MpiComm& comm = world();
  const int n = comm.size();
  Buffer buf(dtype, count * n);
  for (int64_t i = 0; i < count * n; ++i) buf.set(i, input_value(comm.rank(), i));
  comm.reduce_scatter(buf.data(), buf.data(), count, dtype, op)->wait();
  const int64_t offset = count * comm.rank();
  expect_buffer(
      buf, count, [&, op = op](int64_t i) { return reference(buf, op, offset + i, n); },
      "reduce_scatter in place");
}

INSTANTIATE_TEST_SUITE_P(Comm, Reduce,
                         ::testing::Combine(::testing::Values(DType::f32, DType::bf16, DType::f16),
                                            ::testing::Values(ReduceOp::sum, ReduceOp::avg,
                                                              ReduceOp::max),
                                            ::testing::Values<int64_t>(1, 7, 1000, 1000003)),
                         [](const ::testing::TestParamInfo<Case>& p) {
                           return cat(dtype_name(std::get<0>(p.param)), "_",
                                      op_label(std::get<1>(p.param)), "_", std::get<2>(p.param));
                         });

using MoveCase = std::tuple<DType, int64_t>;
class Move : public ::testing::TestWithParam<MoveCase> {};

TEST_P(Move, AllGatherPutsBlockRFromRankR) {
  const auto [dtype, count] = GetParam();
  MpiComm& comm = world();
  const int n = comm.size();
  Buffer send(dtype, count), recv(dtype, count * n);
  for (int64_t i = 0; i < count; ++i) send.set(i, input_value(comm.rank(), i));
  comm.all_gather(send.data(), recv.data(), count, dtype)->wait();
  expect_buffer(
      recv, count * n,
      [&, count = count](int64_t i) {
        return send.round(input_value(static_cast<int>(i / count), i % count));
      },
      "all_gather");
}

TEST_P(Move, AllGatherInPlace) {
  const auto [dtype, count] = GetParam();
  MpiComm& comm = world();
  const int n = comm.size();
  Buffer buf(dtype, count * n);
  for (int64_t i = 0; i < count * n; ++i) buf.set(i, -99);  // other blocks: overwritten
  for (int64_t i = 0; i < count; ++i) buf.set(count * comm.rank() + i, input_value(comm.rank(), i));
  comm.all_gather(buf.at(count * comm.rank()), buf.data(), count, dtype)->wait();
  expect_buffer(
      buf, count * n,
      [&, count = count](int64_t i) {
        return buf.round(input_value(static_cast<int>(i / count), i % count));
      },
      "all_gather in place");
}

TEST_P(Move, BroadcastFromEachRoot) {
  const auto [dtype, count] = GetParam();
  MpiComm& comm = world();
  for (int root = 0; root < comm.size(); ++root) {
    Buffer buf(dtype, count);
    for (int64_t i = 0; i < count; ++i) buf.set(i, input_value(comm.rank(), i));
    comm.broadcast(buf.data(), count, dtype, root)->wait();
    expect_buffer(
        buf, count, [&](int64_t i) { return buf.round(input_value(root, i)); },
        cat("broadcast from root ", root));
  }
}

INSTANTIATE_TEST_SUITE_P(Comm, Move,
                         ::testing::Combine(::testing::Values(DType::f32, DType::bf16, DType::f16,
                                                              DType::i32),
                                            ::testing::Values<int64_t>(1, 7, 1000003)),
                         [](const ::testing::TestParamInfo<MoveCase>& p) {
                           return cat(dtype_name(std::get<0>(p.param)), "_", std::get<1>(p.param));
                         });

TEST(Collectives, IntegerSumAndMax) {
  MpiComm& comm = world();
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::max}) {
    Buffer buf(DType::i32, 1001);
    for (int64_t i = 0; i < 1001; ++i) buf.set(i, input_value(comm.rank(), i) * 1000);
    comm.all_reduce(buf.data(), 1001, DType::i32, op)->wait();
    expect_buffer(
        buf, 1001,
        [&](int64_t i) {
          float acc = op == ReduceOp::max ? -1e30f : 0.0f;
          for (int r = 0; r < comm.size(); ++r) {
            const float v = input_value(r, i) * 1000;
            acc = op == ReduceOp::max ? std::max(acc, v) : acc + v;
          }
          return acc;
        },
        cat("i32 all_reduce ", op_label(op)));
  }
}

TEST(Collectives, BF16SumRoundsToNearestEven) {
  // 1 + 2^-8 is halfway between the bf16 neighbours 1 and 1 + 2^-7: the tie goes to the even one
  // (1.0); 1 + 3 * 2^-8 ties up to 1 + 2^-6. Rank 0 holds 1, rank 1 the small part, other ranks
  // 0, so every reduction order meets the same single tie. Round-to-zero or round-half-up would
  // give other answers.
  MpiComm& comm = world();
  if (comm.size() < 2) GTEST_SKIP() << "needs 2 ranks";
  Buffer buf(DType::bf16, 2);
  const int r = comm.rank();
  buf.set(0, r == 0 ? 1.0f : r == 1 ? 0x1p-8f : 0.0f);
  buf.set(1, r == 0 ? 1.0f : r == 1 ? 3 * 0x1p-8f : 0.0f);
  comm.all_reduce(buf.data(), 2, DType::bf16, ReduceOp::sum)->wait();
  EXPECT_EQ(buf.get(0), 1.0f);
  EXPECT_EQ(buf.get(1), 1.0f + 0x1p-6f);
}

TEST(Collectives, RandomValuesWithinRoundingOfDoubleReference) {
  // Non-integer inputs: bf16 and f16 sums round at every step of MPI's reduction tree, so the
  // bound is one rounding per rank on the magnitude of the partial sums.
  MpiComm& comm = world();
  const int64_t count = 4099;
  for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    Buffer buf(dtype, count);
    auto value = [](int r, int64_t i) {
      return std::sin(static_cast<float>(i) * 0.37f + static_cast<float>(r) * 1.3f) * 3.0f;
    };
    for (int64_t i = 0; i < count; ++i) buf.set(i, value(comm.rank(), i));
    comm.all_reduce(buf.data(), count, dtype, ReduceOp::sum)->wait();
    const double eps = dtype == DType::f32 ? 0x1p-23 : dtype == DType::bf16 ? 0x1p-8 : 0x1p-11;
    int64_t bad = 0;
    for (int64_t i = 0; i < count; ++i) {
      double ref = 0, mag = 0;
      for (int r = 0; r < comm.size(); ++r) {
        ref += buf.round(value(r, i));
        mag += std::abs(buf.round(value(r, i)));
      }
      if (std::abs(buf.get(i) - ref) > eps * mag * comm.size() + 1e-30 && bad++ < 3)
        ADD_FAILURE() << dtype_name(dtype) << " element " << i << ": " << buf.get(i) << " vs "
                      << ref;
    }
    EXPECT_EQ(bad, 0) << dtype_name(dtype);
  }
}

// Rank r sends send_count(r, p) int32 elements to rank p, each naming (r, p, i): every rank checks
// that block p of what it received is exactly what p sent it, in order. Counts differ per pair,
// one pair sends nothing (as a rank whose tokens chose no expert of another), and the exchange is
// repeated with issue-order completion against a second operation.
TEST(Collectives, AllToAllVMovesEachBlockToItsRank) {
  MpiComm& comm = world();
  const int n = comm.size(), me = comm.rank();
  auto send_count = [n](int from, int to) -> int64_t {
    return (from + to) % n == 1 ? 0 : 1 + 37 * ((from * 7 + to * 3) % 5);
  };
  auto value = [](int from, int to, int64_t i) {
    return static_cast<int32_t>(from * 1000000 + to * 10000 + i);
  };
  std::vector<int64_t> sc(n), rc(n);
  std::vector<int32_t> send;
  int64_t received = 0;
  for (int p = 0; p < n; ++p) {
    sc[p] = send_count(me, p);
    rc[p] = send_count(p, me);
    for (int64_t i = 0; i < sc[p]; ++i) send.push_back(value(me, p, i));
    received += rc[p];
  }
  for (int round = 0; round < 3; ++round) {
    std::vector<int32_t> recv(static_cast<size_t>(received), -1);
    std::vector<float> other(5, 1.0f);
    WorkHandle a2a = comm.all_to_all_v(send.data(), sc.data(), recv.data(), rc.data(), DType::i32);
    WorkHandle sum = comm.all_reduce(other.data(), 5, DType::f32, ReduceOp::sum);
    sum->wait();
    EXPECT_TRUE(a2a->test());  // completed in issue order
    int64_t at = 0, bad = 0;
    for (int p = 0; p < n; ++p)
      for (int64_t i = 0; i < rc[p]; ++i, ++at)
        if (recv[static_cast<size_t>(at)] != value(p, me, i) && bad++ < 3)
          ADD_FAILURE() << "from rank " << p << " element " << i << ": "
                        << recv[static_cast<size_t>(at)];
    EXPECT_EQ(bad, 0);
  }
  EXPECT_EQ(comm.stats()[CommOp::all_to_all].calls, 3);
  // Counts that do not fit MPI's ints, and overlapping buffers, are refused before anything moves.
  std::vector<int64_t> huge(n, int64_t{1} << 32);
  EXPECT_THROW(comm.all_to_all_v(send.data(), huge.data(), send.data(), huge.data(), DType::i32),
               Error);
}

TEST(Collectives, ZeroElementsComplete) {
  MpiComm& comm = world();
  Buffer a(DType::f32, 0), b(DType::f32, 0);
  comm.all_reduce(a.data(), 0, DType::f32, ReduceOp::sum)->wait();
  comm.reduce_scatter(a.data(), b.data(), 0, DType::f32, ReduceOp::sum)->wait();
  comm.all_gather(a.data(), b.data(), 0, DType::f32)->wait();
  comm.broadcast(a.data(), 0, DType::f32, 0)->wait();
}

}  // namespace
}  // namespace strata::testing
