// The profiler's cost on a training step: the tracer switched on and off step by step in one
// process (on-off-off-on, so that a drifting machine load affects both alike), medians compared.
// Also the A/A control (--control: the same schedule, never on), which shows the noise floor.
//
//   bench_trace [STEPS] [--control]                     # one process
//   mpirun -np 2 bench_trace 300                        # dp = world
// Prints: off and on median step time, their ratio, and events recorded per traced step.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "comm/mpi_runtime.h"
#include "core/trace.h"
#include "train/trainer.h"

using namespace strata;

namespace {
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}
}  // namespace

int main(int argc, char** argv) {
  int steps = 300;
  bool control = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--control") == 0)
      control = true;
    else
      steps = std::max(4, std::atoi(argv[i]));
  }
  const bool mpi = std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr;
  std::unique_ptr<MpiSession> session;
  std::unique_ptr<ProcessGroups> groups;
  if (mpi) {
    session = std::make_unique<MpiSession>(&argc, &argv);
    groups = std::make_unique<ProcessGroups>(
        ProcessGroups::create(resolve_layout(1, 1, 0, 0, mpi_world_size())));
  }
  // A 4-layer model; the profiler is set up (buffer allocated) but its own window never opens:
  // this program switches the tracer itself.
  const RunConfig config =
      parse_config(R"(
[model]
n_layer = 4
n_head = 4
d_model = 128
vocab_size = 2048
max_seq_len = 128
[train]
batch_size = 4
seq_len = 128
eval_every = 0
[data]
source = "synthetic"
[run]
dir = "runs/bench_trace"
resume = "none"
[track]
tensorboard = false
[profile]
enabled = true
start_step = 1000000000
max_events = 1000000
)",
                   "bench_trace", {"train.steps=" + std::to_string(steps + 5)});
  Trainer trainer(config, groups.get());
  for (int i = 0; i < 5; ++i) trainer.train_step();  // warm-up (the arena, first touches)
  std::vector<double> on, off;
  for (int i = 0; i < steps; ++i) {
    const bool traced = i % 4 == 0 || i % 4 == 3;  // the same on every rank
    trace::set_active(traced && !control);
    const StepResult r = trainer.train_step();
    trace::set_active(false);
    (traced ? on : off).push_back(r.seconds * 1e3);
  }
  if (!groups || groups->world().rank() == 0)
    std::printf(
        "%s%d steps: off median %.3f ms, on median %.3f ms, ratio %.4f; %.1f events per "
        "traced step\n",
        control ? "control (never on): " : "", steps, median(off), median(on),
        median(on) / median(off),
        static_cast<double>(trace::recorded()) / static_cast<double>(on.size()));
  return 0;
}
