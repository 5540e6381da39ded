// StepProfiler: the trainer's side of [profile]. It starts the tracer (core/trace.h) on every rank
// after a barrier (so the ranks' timelines line up), switches it on for the window of steps
// [start_step, start_step + steps), records one "step N" span per step, and when the window closes
// writes RUN_DIR/trace/rank_N.json on every rank and, after a barrier, rank 0 merges them into
// RUN_DIR/trace/trace.json (open it in https://ui.perfetto.dev or chrome://tracing).
#pragma once
#include <cstdint>
#include <string>

#include "comm/process_groups.h"
#include "run/config.h"

namespace strata {

class StepProfiler {
 public:
  // Nothing happens (and nothing is allocated) unless config.enabled. Collective: every rank of
  // the groups (one, for a process that runs alone) calls it at the same point.
  void setup(const ProfileConfig& config, const std::string& run_dir, ProcessGroups& groups);
  // Around each step (1-based step numbers); end_step follows the step's metrics, evaluation and
  // checkpoint, and is collective on the step that closes the window.
  void begin_step(int64_t step);
  void end_step(int64_t step);
  // At the end of the run: closes a window still open (collective).
  void finish();

  bool enabled() const { return enabled_; }
  std::string trace_dir() const;
  std::string merged_path() const;  // RUN_DIR/trace/trace.json

 private:
  void close();

  bool enabled_ = false, open_ = false, done_ = false;
  int64_t first_ = 0, last_ = 0;  // the window, inclusive
  int64_t first_traced_ = 0, last_traced_ = 0;
  int64_t step_begin_ns_ = 0;
  std::string run_dir_;
  ProcessGroups* groups_ = nullptr;
  int rank_ = 0, world_ = 1;
};

// Merges RUN_DIR/trace/rank_*.json (ranks 0 .. world-1, or every rank file when world is 0) into
// RUN_DIR/trace/trace.json; returns the number of events merged.
int64_t merge_run_trace(const std::string& run_dir, int world = 0);

}  // namespace strata
