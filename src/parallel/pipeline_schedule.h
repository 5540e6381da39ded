// Pipeline schedules as data: the ordered list of actions one pipeline-parallel rank executes for
// one optimizer step, so the executor, the simulator (pipeline_sim.h) and the planner share one
// definition of GPipe, 1F1B and interleaved 1F1B.
//
// Model chunks (Megatron's interleaved assignment): with p ranks and v virtual stages, rank s holds
// chunks c = 0..v-1, which are the global virtual stages g = s + c*p of G = p*v. Activations flow
// g -> g+1, gradients g+1 -> g; consecutive global stages always live on different ranks when
// p > 1, and on the same rank when p == 1 (then nothing is sent: the data stays local).
//
// A forward of (mb, chunk) at global stage g > 0 needs recv_activation from g-1 and is followed by
// send_activation to g+1 (unless last); a backward needs recv_grad from g+1 (unless last) and is
// followed by send_grad to g-1 (unless first). Compute order per rank: GPipe all forwards then all
// backwards; 1F1B and interleaved exactly Megatron-LM's (see pipeline_schedule.cc).
//
// Communication placement and the deadlock-freedom rule: make_schedules runs all ranks once on a
// global clock (compute order fixed as above, each compute as early as its input allows). A send
// goes right after the compute producing it; at that same instant, as ONE event, the matching
// receive is appended to the receiver's list wherever the receiver is (behind the compute it is
// running, or before whatever it starts next), i.e. receives are posted as early as possible, like
// Megatron posting recv_prev/recv_next a step ahead. Every rank's list is thus the restriction of
// one global event sequence in which each send is adjacent to its receive. An executor whose sends
// block until the peer has posted the receive (unbuffered, NCCL-like) therefore cannot deadlock:
// the first unexecuted event of that sequence is always executable on every rank it involves.
// Buffered sends only remove waits. The simulator checks both modes for every tested schedule.
// (Posting each receive right before its compute instead deadlocks interleaved p=2 m=4 v=2 in
// rendezvous mode: two ranks each block in a send the other receives only later.)
#pragma once
#include <string>
#include <vector>

#include "core/enum_names.h"

namespace strata {

enum class ActionKind { forward, backward, send_activation, recv_activation, send_grad, recv_grad };

struct PipelineAction {
  ActionKind kind;
  int micro_batch;
  int chunk;            // virtual stage index on this rank, 0..v-1
  int peer_stage = -1;  // send/recv: the global virtual stage on the other side; -1 otherwise

  bool operator==(const PipelineAction&) const = default;
};

enum class ScheduleKind { gpipe, one_f_one_b, interleaved };
template <>
struct EnumNames<ScheduleKind> {
  static constexpr std::string_view names[] = {"gpipe", "1f1b",
                                               "interleaved"};  // parallel.schedule
};
inline const char* to_string(ScheduleKind kind) {
  return enum_name(kind).data();
}
const char* to_string(ActionKind kind);
std::string to_string(const PipelineAction& action);  // "forward mb=3 chunk=1", "+ peer=5"

inline bool is_compute(ActionKind kind) {
  return kind == ActionKind::forward || kind == ActionKind::backward;
}
// Global virtual stage of chunk `chunk` on pp rank `stage`.
inline int global_stage(int stage, int chunk, int stages) {
  return stage + chunk * stages;
}

// Throws Error naming the parallel.* key at fault: pp >= 1, micro_batches >= 1, vpp >= 1,
// vpp > 1 only with the interleaved schedule, and interleaved needs micro_batches % pp == 0.
void validate_pipeline_config(ScheduleKind kind, int stages, int micro_batches, int virtual_stages);

// The actions pp rank `stage` (0..stages-1) executes for one optimizer step. The compute order does
// not depend on `backward_ratio` (t_backward / t_forward); only where receives are posted does:
// they are placed for that ratio, and an executor whose real ratio differs may wait on a receive
// posted ahead of an unrelated compute (never deadlock). With the matching ratio and free
// transfers, every schedule reaches bubble_formula exactly (tests/pipeline).
std::vector<PipelineAction> make_schedule(ScheduleKind kind, int stages, int micro_batches,
                                          int virtual_stages, int stage,
                                          double backward_ratio = 2.0);
// All ranks at once (index = pp rank); make_schedule(..., s) == make_schedules(...)[s].
std::vector<std::vector<PipelineAction>> make_schedules(ScheduleKind kind, int stages,
                                                        int micro_batches, int virtual_stages,
                                                        double backward_ratio = 2.0);

// Idle fraction of the ideal schedule with no communication cost: (p-1)/(m+p-1) for GPipe and 1F1B,
// (p-1)/(v*m+p-1) for interleaved (Narayanan et al. 2021, section 2.2).
double bubble_formula(ScheduleKind kind, int stages, int micro_batches, int virtual_stages);

}  // namespace strata
