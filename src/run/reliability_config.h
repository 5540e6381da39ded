// [fault] and [anomaly]: fault injection for tests and drills, and the detectors that watch a run.
#pragma once
#include <cstdint>
#include <string>

#include "core/enum_names.h"

namespace strata {

// anomaly.spike_action: what a loss spike does.
enum class SpikeAction { log, skip, rollback };
template <>
struct EnumNames<SpikeAction> {
  static constexpr std::string_view names[] = {"log", "skip", "rollback"};
};

// Faults a run inflicts on itself, so that every recovery path can be tested end to end. Also
// settable from the environment: STRATA_FAULT_<KEY>=value (e.g. STRATA_FAULT_CRASH_RANK=1), which
// `strata launch` forwards to every rank. Steps count from 1 (the step about to run); 0 and -1
// mean "never".
struct FaultConfig {
  int64_t crash_rank = -1;  // this world rank kills itself (SIGKILL) when step crash_step starts
  int64_t crash_step = 0;
  // Only on this `strata launch` attempt (1 = the first; 0 = every attempt), so that the restarted
  // job runs through.
  int64_t attempt = 1;
  int64_t hang_rank = -1;  // this rank stops (sleeps forever) when step hang_step starts
  int64_t hang_step = 0;
  int64_t slow_rank = -1;  // this rank sleeps slow_ms inside every step's compute
  int64_t slow_ms = 0;
  int64_t nan_rank = 0;  // this rank writes NaN into a gradient at step nan_step
  int64_t nan_step = 0;
  int64_t nan_steps = 1;      // ... and the nan_steps - 1 steps after it
  int64_t spike_step = 0;     // the loss of this step is reported 10x (a synthetic loss spike)
  int64_t diverge_rank = -1;  // this rank perturbs one parameter after step diverge_step
  int64_t diverge_step = 0;
  int64_t corrupt_step = 0;  // after committing the checkpoint of this step, flip a byte of it
  int64_t fail_save_step =
      0;  // the save of this step fails on rank 0 (its slices cannot be written)
};

struct AnomalyConfig {
  // Non-finite loss or gradients: the update is skipped; this many in a row abort the run.
  int64_t max_nonfinite = 3;
  // Loss spikes: a z-score over the last spike_window accepted losses (after spike_warmup steps).
  int64_t spike_window = 50;
  int64_t spike_warmup = 20;
  double spike_zscore = 6.0;
  // "log", "skip" (the update) or "rollback" (to the last committed checkpoint, then the
  // offending batch is skipped when its step comes again).
  SpikeAction spike_action = SpikeAction::log;
  // Diverging replicas: every this many steps the dp ranks compare parameter checksums (0: off).
  int64_t replica_check_every = 0;
  // Stragglers: a rank whose step compute time exceeds this factor times the median is named
  // (0: off).
  double straggler_factor = 2.0;
  // Slow links (comm/link_probe.h): when the world's communication wait jumps (straggler_factor x
  // the median of the last 20 steps; train/anomaly.h), every pair of ranks times an exchange of
  // link_probe_kib KiB each way and the ranks behind a slow link are named (0: no probes). Also
  // every link_probe_every steps (0: only on a jump), which finds a link that was slow from the
  // start. The probe takes world - 1 rounds: at scale, keep the periodic one rare.
  int64_t link_probe_kib = 256;
  int64_t link_probe_every = 0;
  // A collapsed router (MoE families): one expert takes more than router_collapse_fraction of a
  // layer's tokens for router_collapse_steps steps in a row (0: off). Off by itself where the
  // fraction is not above the fair share top_k / experts.
  double router_collapse_fraction = 0.5;
  int64_t router_collapse_steps = 20;
};

}  // namespace strata
