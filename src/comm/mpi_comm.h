// MpiComm: the MPI backend of Comm. One MPI communicator (owned), a group name for messages, and
// the group -> world rank map. Every operation is validated on the caller's thread (bad arguments
// throw at once, before anything is issued), then queued to the progress engine, which issues it
// with MPI's nonblocking call and completes the returned Work (see progress_engine.h).
#pragma once
#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

#include "comm/comm.h"

namespace strata {

namespace comm {
struct GroupState;
struct OpArgs;
}  // namespace comm

class MpiComm final : public Comm {
 public:
  // Adopts comm (freed once this object and the last Work it issued are gone).
  MpiComm(MPI_Comm comm, std::string name);
  ~MpiComm() override;
  MpiComm(const MpiComm&) = delete;
  MpiComm& operator=(const MpiComm&) = delete;

  // A duplicate of MPI_COMM_WORLD (its own message space), made with MPI_Comm_idup and waited
  // for with the default timeout, so that a rank that never arrives is reported, not waited on.
  static std::unique_ptr<MpiComm> dup_world(const std::string& name = "world");

  int rank() const override;
  int size() const override;
  const std::string& name() const override;
  int world_rank_of(int group_rank) const override;
  const std::vector<int>& world_ranks() const;
  MPI_Comm handle() const;

  WorkHandle all_reduce(void* buf, int64_t count, DType dtype, ReduceOp op) override;
  // send == recv means in place: recv holds the size() blocks and block rank() is the result.
  WorkHandle reduce_scatter(const void* send, void* recv, int64_t recv_count, DType dtype,
                            ReduceOp op) override;
  WorkHandle all_gather(const void* send, void* recv, int64_t send_count, DType dtype) override;
  WorkHandle broadcast(void* buf, int64_t count, DType dtype, int root) override;
  WorkHandle send(const void* buf, int64_t count, DType dtype, int peer, int tag) override;
  WorkHandle recv(void* buf, int64_t count, DType dtype, int peer, int tag) override;
  WorkHandle all_to_all_v(const void* send, const int64_t* send_counts, void* recv,
                          const int64_t* recv_counts, DType dtype) override;
  void barrier() override;

  void set_step(int64_t step) override;
  void set_timeout(double seconds) override;
  double timeout() const;

  CommStats stats() const override;
  void reset_stats() override;

 private:
  WorkHandle submit(const comm::OpArgs& args);
  int checked_count(int64_t count, DType dtype, const char* what) const;
  void check_peer(int peer, const char* what) const;

  std::shared_ptr<comm::GroupState> group_;
};

}  // namespace strata
