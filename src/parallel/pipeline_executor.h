// PipelineExecutor: runs one pp rank's action list (pipeline_schedule.h) for one optimizer step
// on a Decoder that holds this rank's model chunks. One executor runs any schedule: compute
// actions call the Decoder's chunk API; sends and receives are asynchronous point-to-point
// transfers with the neighbouring stages, issued where the list puts them and waited for only
// when their data is needed (a receive, before the compute that reads it) or their buffer is
// about to be reused (a send), so transfers overlap computation wherever the schedule allows.
//
// Buffers: activations travel straight between activation slots (a chunk's output is sent from
// the slot that saved it; a received activation lands in the next chunk's input slot); output
// gradients have a receive and a send buffer per slot. A (micro-batch, chunk) takes a slot at
// its first action and frees it after its backward (and the gradient send) is issued; the slots
// a schedule needs are counted by replaying its list (slots_needed), before anything is
// allocated.
#pragma once
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "comm/comm.h"
#include "core/arena.h"
#include "model/decoder.h"
#include "parallel/pipeline_schedule.h"

namespace strata {

struct PipelineStepStats {
  double loss_sum = 0;   // sum over micro-batches of their mean loss (last stage; 0 elsewhere)
  double wall_s = 0;     // the whole schedule
  double compute_s = 0;  // forward and backward actions
  double wait_s = 0;     // blocked on transfers (bubble plus exposed transfer time)
  double bubble_fraction() const { return wall_s > 0 ? 1.0 - compute_s / wall_s : 0.0; }
};

// Activation slots each chunk needs to run `actions` (v chunks).
std::vector<int> pipeline_slots_needed(const std::vector<PipelineAction>& actions, int v);

class PipelineExecutor {
 public:
  // `model` must have been built with at least pipeline_slots_needed(actions) slots per chunk.
  PipelineExecutor(Decoder& model, Comm& pp, std::vector<PipelineAction> actions, int micro_batches,
                   Arena& arena);

  // One step: inputs and targets hold micro_batches micro-batches of batch * seq_len tokens.
  // before_backward(mb, chunk) runs right before each backward (gradient-sync bookkeeping).
  // doc_starts: the micro-batches' document starts (Decoder::chunk_forward), doc_stride apart;
  // null without document masking.
  PipelineStepStats run(const int32_t* inputs, const int32_t* targets, float grad_scale,
                        const std::function<void(int mb, int chunk)>& before_backward,
                        const int32_t* doc_starts = nullptr, int64_t doc_stride = 0);

  // Forward only, one micro-batch through every stage in order (evaluation). Returns the mean
  // loss on every pp rank.
  double evaluate(const int32_t* inputs, const int32_t* targets,
                  const int32_t* doc_starts = nullptr);

  const std::vector<PipelineAction>& actions() const { return actions_; }

 private:
  int tag(int kind, int receiver_stage, int mb) const;
  int acquire_slot(int mb, int chunk);
  int slot_of(int mb, int chunk) const;
  void release_slot(int mb, int chunk);

  Decoder& model_;
  Comm& pp_;
  std::vector<PipelineAction> actions_;
  int m_, v_, stages_;
  int64_t boundary_;
  std::vector<std::vector<float*>> dout_, din_;                   // [chunk][slot]
  std::vector<std::vector<int>> slot_owner_;                      // [chunk][slot] -> mb or -1
  std::vector<std::vector<std::vector<WorkHandle>>> slot_sends_;  // pending sends from a slot
  // Pending receives, indexed chunk * micro_batches + mb (preallocated: no allocation per step).
  std::vector<WorkHandle> recv_act_, recv_grad_;
};

}  // namespace strata
