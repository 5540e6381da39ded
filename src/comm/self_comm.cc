#include "comm/self_comm.h"

#include <cstring>

#include "core/error.h"

namespace strata {

namespace {

class DoneWork final : public Work {
 public:
  bool test() override { return true; }
  void wait() override {}
};

WorkHandle done() {
  static const WorkHandle work = std::make_shared<DoneWork>();
  return work;
}

}  // namespace

int SelfComm::world_rank_of(int group_rank) const {
  STRATA_CHECK(group_rank == 0, "comm ", name_, ": group rank ", group_rank,
               " does not exist (a group of one rank)");
  return 0;
}

WorkHandle SelfComm::copy_block(const void* src, void* dst, int64_t count, DType dtype) {
  STRATA_CHECK(count >= 0, "comm ", name_, ": negative count ", count);
  if (src != dst && count > 0)
    std::memcpy(dst, src, static_cast<size_t>(count) * dtype_size(dtype));
  return done();
}

WorkHandle SelfComm::all_reduce(void* /*buf*/, int64_t count, DType /*dtype*/, ReduceOp /*op*/) {
  STRATA_CHECK(count >= 0, "comm ", name_, ": negative count ", count);
  return done();  // sum, average and max over one rank are the value itself
}

WorkHandle SelfComm::reduce_scatter(const void* send, void* recv, int64_t recv_count, DType dtype,
                                    ReduceOp /*op*/) {
  return copy_block(send, recv, recv_count, dtype);
}

WorkHandle SelfComm::all_gather(const void* send, void* recv, int64_t send_count, DType dtype) {
  return copy_block(send, recv, send_count, dtype);
}

WorkHandle SelfComm::all_to_all_v(const void* send, const int64_t* send_counts, void* recv,
                                  const int64_t* recv_counts, DType dtype) {
  STRATA_CHECK(send_counts && recv_counts && send_counts[0] == recv_counts[0], "comm ", name_,
               ": all_to_all_v sends ", send_counts ? send_counts[0] : -1, " and receives ",
               recv_counts ? recv_counts[0] : -1, " elements, but the group has one rank");
  return copy_block(send, recv, send_counts[0], dtype);
}

WorkHandle SelfComm::broadcast(void* /*buf*/, int64_t count, DType /*dtype*/, int root) {
  STRATA_CHECK(root == 0, "comm ", name_, ": broadcast from rank ", root,
               ", but the group has one rank");
  STRATA_CHECK(count >= 0, "comm ", name_, ": negative count ", count);
  return done();
}

WorkHandle SelfComm::send(const void*, int64_t, DType, int peer, int) {
  fail("comm ", name_, ": send to rank ", peer, " in a group of one rank (there is no peer)");
}

WorkHandle SelfComm::recv(void*, int64_t, DType, int peer, int) {
  fail("comm ", name_, ": recv from rank ", peer, " in a group of one rank (there is no peer)");
}

}  // namespace strata
