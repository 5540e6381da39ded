#include "comm/nccl/nccl_groups.h"

namespace strata {

NcclGroups make_nccl_groups(ProcessGroups& groups, int device) {
  NcclGroups g;
  g.world = std::make_unique<NcclComm>(groups.mpi_world(), device);
  g.tp = std::make_unique<NcclComm>(groups.mpi_tp(), device);
  g.dp = std::make_unique<NcclComm>(groups.mpi_dp(), device);
  g.pp = std::make_unique<NcclComm>(groups.mpi_pp(), device);
  g.cp = std::make_unique<NcclComm>(groups.mpi_cp(), device);
  return g;
}

void NcclGroups::set_step(int64_t step) {
  for (NcclComm* c : {world.get(), dp.get(), tp.get(), pp.get(), cp.get()})
    if (c) c->set_step(step);
}

void NcclGroups::set_timeout(double seconds) {
  for (NcclComm* c : {world.get(), dp.get(), tp.get(), pp.get(), cp.get()})
    if (c) c->set_timeout(seconds);
}

void NcclGroups::set_compute_stream(cudaStream_t stream) {
  for (NcclComm* c : {world.get(), dp.get(), tp.get(), pp.get(), cp.get()})
    if (c) c->set_compute_stream(stream);
}

CommStats NcclGroups::stats() const {
  CommStats total;
  for (const NcclComm* c : {world.get(), dp.get(), tp.get(), pp.get(), cp.get()})
    if (c) total += c->stats();
  return total;
}

void NcclGroups::reset_stats() {
  for (NcclComm* c : {world.get(), dp.get(), tp.get(), pp.get(), cp.get()})
    if (c) c->reset_stats();
}

}  // namespace strata
