#include "parallel/pipeline_executor.h"

#include <algorithm>
#include <chrono>
#include <map>

#include "core/error.h"
#include "core/trace.h"

namespace strata {

namespace {
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}
constexpr int kActivation = 0, kGradient = 1, kEvaluation = 2;
}  // namespace

std::vector<int> pipeline_slots_needed(const std::vector<PipelineAction>& actions, int v) {
  // The executor's slot rule: taken at a (mb, chunk)'s first action, freed after its backward
  // (after the gradient send, when there is one).
  std::vector<int> live(static_cast<size_t>(v), 0), peak(static_cast<size_t>(v), 1);
  std::map<std::pair<int, int>, bool> holding;
  std::map<std::pair<int, int>, bool> sends_grad;
  for (const PipelineAction& a : actions)
    if (a.kind == ActionKind::send_grad) sends_grad[{a.micro_batch, a.chunk}] = true;
  for (const PipelineAction& a : actions) {
    const std::pair<int, int> key{a.micro_batch, a.chunk};
    if (!holding[key] && (a.kind == ActionKind::recv_activation || a.kind == ActionKind::forward)) {
      holding[key] = true;
      peak[a.chunk] = std::max(peak[a.chunk], ++live[a.chunk]);
    }
    const bool done =
        (a.kind == ActionKind::backward && !sends_grad[key]) || a.kind == ActionKind::send_grad;
    if (done && holding[key]) {
      holding[key] = false;
      --live[a.chunk];
    }
  }
  return peak;
}

PipelineExecutor::PipelineExecutor(Decoder& model, Comm& pp, std::vector<PipelineAction> actions,
                                   int micro_batches, Arena& arena)
    : model_(model),
      pp_(pp),
      actions_(std::move(actions)),
      m_(micro_batches),
      v_(model.num_chunks()),
      stages_(pp.size()),
      boundary_(model.boundary_elements()) {
  const std::vector<int> slots = pipeline_slots_needed(actions_, v_);
  dout_.resize(static_cast<size_t>(v_));
  din_.resize(static_cast<size_t>(v_));
  slot_owner_.resize(static_cast<size_t>(v_));
  slot_sends_.resize(static_cast<size_t>(v_));
  for (int c = 0; c < v_; ++c) {
    for (int s = 0; s < slots[c]; ++s) {
      dout_[c].push_back(arena.alloc<float>(MemCategory::comm, boundary_, "pipeline grad recv"));
      din_[c].push_back(arena.alloc<float>(MemCategory::comm, boundary_, "pipeline grad send"));
    }
    slot_owner_[c].assign(static_cast<size_t>(slots[c]), -1);
    slot_sends_[c].resize(static_cast<size_t>(slots[c]));
    for (auto& sends : slot_sends_[c]) sends.reserve(4);
  }
  recv_act_.resize(static_cast<size_t>(v_ * m_));
  recv_grad_.resize(static_cast<size_t>(v_ * m_));
}

int PipelineExecutor::tag(int kind, int receiver_stage, int mb) const {
  return (kind * stages_ * v_ + receiver_stage) * m_ + mb;  // < 3 * G * m, checked by Comm
}

int PipelineExecutor::slot_of(int mb, int chunk) const {
  for (size_t s = 0; s < slot_owner_[chunk].size(); ++s)
    if (slot_owner_[chunk][s] == mb) return static_cast<int>(s);
  return -1;
}

int PipelineExecutor::acquire_slot(int mb, int chunk) {
  const int have = slot_of(mb, chunk);
  if (have >= 0) return have;
  for (size_t s = 0; s < slot_owner_[chunk].size(); ++s) {
    if (slot_owner_[chunk][s] >= 0) continue;
    // The slot's last sends (its output activation, its input gradient) must have left.
    wait_all(slot_sends_[chunk][s]);
    slot_sends_[chunk][s].clear();
    slot_owner_[chunk][s] = mb;
    return static_cast<int>(s);
  }
  fail("pipeline executor: no free activation slot for micro-batch ", mb, " chunk ", chunk,
       " (the Decoder was built with fewer slots than pipeline_slots_needed)");
}

void PipelineExecutor::release_slot(int mb, int chunk) {
  const int s = slot_of(mb, chunk);
  if (s >= 0) slot_owner_[chunk][s] = -1;
}

PipelineStepStats PipelineExecutor::run(
    const int32_t* inputs, const int32_t* targets, float grad_scale,
    const std::function<void(int mb, int chunk)>& before_backward, const int32_t* doc_starts,
    int64_t doc_stride) {
  PipelineStepStats st;
  const auto t_start = Clock::now();
  const int64_t tokens = model_.batch() * model_.seq_len();
  const ModelShard& sh = model_.shard();
  model_.set_grad_scale(grad_scale);  // every stage's MoE layers weigh their balancing losses
  // A wait on a transfer, traced with what it waits for (the bubble shows as these spans).
  auto wait_timed = [&](WorkHandle& w, const char* what, int mb, int chunk) {
    TraceSpan span(what, "pipeline");
    span.arg("micro_batch", mb).arg("chunk", chunk);
    const auto t0 = Clock::now();
    w->wait();
    st.wait_s += since(t0);
  };
  for (const PipelineAction& a : actions_) {
    const int mb = a.micro_batch, c = a.chunk;
    switch (a.kind) {
      case ActionKind::recv_activation: {
        const int s = acquire_slot(mb, c);
        recv_act_[c * m_ + mb] =
            pp_.recv(model_.chunk_input(c, s), boundary_, DType::f32, a.peer_stage % stages_,
                     tag(kActivation, sh.global_stage(c), mb));
        break;
      }
      case ActionKind::forward: {
        const int s = acquire_slot(mb, c);
        if (!sh.chunk_has_embedding(c)) {
          WorkHandle& w = recv_act_[c * m_ + mb];
          STRATA_CHECK(w != nullptr, "pipeline executor: forward of micro-batch ", mb, " chunk ", c,
                       " before its activation was received");
          wait_timed(w, "pipeline wait activation", mb, c);
          w.reset();
        }
        TraceSpan span("pipeline forward", "pipeline");
        span.arg("micro_batch", mb).arg("chunk", c);
        const auto t0 = Clock::now();
        model_.chunk_forward(c, s, inputs + mb * tokens,
                             doc_starts ? doc_starts + mb * doc_stride : nullptr);
        if (sh.chunk_has_head(c))
          st.loss_sum += model_.chunk_loss(c, s, targets + mb * tokens, true, grad_scale);
        st.compute_s += since(t0);
        break;
      }
      case ActionKind::send_activation: {
        const int s = slot_of(mb, c);
        slot_sends_[c][s].push_back(pp_.send(model_.chunk_output(c, s), boundary_, DType::f32,
                                             a.peer_stage % stages_,
                                             tag(kActivation, a.peer_stage, mb)));
        break;
      }
      case ActionKind::recv_grad: {
        const int s = slot_of(mb, c);
        STRATA_CHECK(s >= 0, "pipeline executor: gradient for micro-batch ", mb, " chunk ", c,
                     " before its forward");
        recv_grad_[c * m_ + mb] =
            pp_.recv(dout_[c][s], boundary_, DType::f32, a.peer_stage % stages_,
                     tag(kGradient, sh.global_stage(c), mb));
        break;
      }
      case ActionKind::backward: {
        const int s = slot_of(mb, c);
        if (!sh.chunk_has_head(c)) {
          WorkHandle& w = recv_grad_[c * m_ + mb];
          STRATA_CHECK(w != nullptr, "pipeline executor: backward of micro-batch ", mb, " chunk ",
                       c, " before its gradient was received");
          wait_timed(w, "pipeline wait grad", mb, c);
          w.reset();
        }
        if (before_backward) before_backward(mb, c);
        TraceSpan span("pipeline backward", "pipeline");
        span.arg("micro_batch", mb).arg("chunk", c);
        const auto t0 = Clock::now();
        model_.chunk_backward(c, s, dout_[c][s], din_[c][s]);
        st.compute_s += since(t0);
        if (sh.chunk_has_embedding(c)) release_slot(mb, c);
        break;
      }
      case ActionKind::send_grad: {
        const int s = slot_of(mb, c);
        slot_sends_[c][s].push_back(pp_.send(din_[c][s], boundary_, DType::f32,
                                             a.peer_stage % stages_,
                                             tag(kGradient, a.peer_stage, mb)));
        release_slot(mb, c);
        break;
      }
    }
  }
  // Every transfer of the step completes before the optimizer touches parameters.
  for (auto& per_chunk : slot_sends_)
    for (auto& sends : per_chunk) {
      for (WorkHandle& w : sends) wait_timed(w, "pipeline wait sends", -1, -1);
      sends.clear();
    }
  auto pending = [](const std::vector<WorkHandle>& v) {
    return std::any_of(v.begin(), v.end(), [](const WorkHandle& w) { return w != nullptr; });
  };
  STRATA_CHECK(!pending(recv_act_) && !pending(recv_grad_),
               "pipeline executor: receives left unmatched at the end of the step");
  st.wall_s = since(t_start);
  return st;
}

double PipelineExecutor::evaluate(const int32_t* inputs, const int32_t* targets,
                                  const int32_t* doc_starts) {
  const ModelShard& sh = model_.shard();
  double loss = 0;
  for (int c = 0; c < v_; ++c) {
    const int g = sh.global_stage(c);
    if (!sh.chunk_has_embedding(c))
      pp_.recv(model_.chunk_input(c, 0), boundary_, DType::f32, (g - 1) % stages_,
               tag(kEvaluation, g, 0))
          ->wait();
    model_.chunk_forward(c, 0, inputs, doc_starts);
    if (sh.chunk_has_head(c))
      loss = model_.chunk_loss(c, 0, targets, /*backward=*/false, 0.0f);
    else
      pp_.send(model_.chunk_output(c, 0), boundary_, DType::f32, (g + 1) % stages_,
               tag(kEvaluation, g + 1, 0))
          ->wait();
  }
  // The last stage has the loss; everyone returns it.
  float value = static_cast<float>(loss);
  pp_.broadcast(&value, 1, DType::f32, stages_ - 1)->wait();
  return static_cast<double>(value);
}

}  // namespace strata
