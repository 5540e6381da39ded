// NcclGroups: the NCCL twins of a ProcessGroups (world, dp, tp, pp, cp), each built over its MPI
// group (which carries the NCCL unique id), on this rank's device. The trainer keeps both: MPI for
// host buffers and control, NCCL for device buffers (gradients, parameters, activations).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>

#include "comm/nccl/nccl_comm.h"
#include "comm/process_groups.h"

namespace strata {

struct NcclGroups {
  std::unique_ptr<NcclComm> world, dp, tp, pp, cp;

  // Forwarded to every group.
  void set_step(int64_t step);
  void set_timeout(double seconds);
  void set_compute_stream(cudaStream_t stream);
  // The stats of all groups, summed.
  CommStats stats() const;
  void reset_stats();
};

// Collective over every rank of `groups` (each rank creates its groups in the same order: world,
// tp, dp, pp, cp). `device`: this rank's GPU (local_device() for one rank per GPU). Size-1 groups
// get an NCCL communicator too (NCCL handles one rank without moving data), so that callers never
// special-case them. Non-const: the id broadcasts are operations of the MPI groups.
NcclGroups make_nccl_groups(ProcessGroups& groups, int device);

}  // namespace strata
