// SelfComm: the Comm of a group of one rank, the groups of a process that runs alone (no MPI).
// Every collective over one rank is the identity: all_reduce and broadcast leave the buffer as it
// is, reduce_scatter and all_gather copy the one block when the buffers differ (memcpy: host
// buffers; a lone process on a GPU issues no copying collective, since one process has ZeRO
// stage 0 and neither tp nor pp), barrier returns.
// The Work is complete when it is returned. A one-rank group has no peer, so send and recv are
// errors. With it, a process that runs alone takes the same path as a rank of a job (the trainer,
// DataParallel) instead of a branch of its own.
#pragma once
#include <cstddef>
#include <string>

#include "comm/comm.h"

namespace strata {

class SelfComm final : public Comm {
 public:
  explicit SelfComm(std::string name) : name_(std::move(name)) {}

  int rank() const override { return 0; }
  int size() const override { return 1; }
  const std::string& name() const override { return name_; }
  int world_rank_of(int group_rank) const override;

  WorkHandle all_reduce(void* buf, int64_t count, DType dtype, ReduceOp op) override;
  WorkHandle reduce_scatter(const void* send, void* recv, int64_t recv_count, DType dtype,
                            ReduceOp op) override;
  WorkHandle all_gather(const void* send, void* recv, int64_t send_count, DType dtype) override;
  WorkHandle broadcast(void* buf, int64_t count, DType dtype, int root) override;
  WorkHandle send(const void* buf, int64_t count, DType dtype, int peer, int tag) override;
  WorkHandle recv(void* buf, int64_t count, DType dtype, int peer, int tag) override;
  WorkHandle all_to_all_v(const void* send, const int64_t* send_counts, void* recv,
                          const int64_t* recv_counts, DType dtype) override;
  void barrier() override {}

  void set_step(int64_t) override {}
  void set_timeout(double) override {}
  // Nothing travels: every count stays zero.
  CommStats stats() const override { return {}; }
  void reset_stats() override {}

 private:
  WorkHandle copy_block(const void* src, void* dst, int64_t count, DType dtype);
  std::string name_;
};

}  // namespace strata
