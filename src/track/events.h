// RUN_DIR/events.jsonl: what the detectors and the fault injector saw, one JSON object per line,
// appended by any rank ({"time", "rank", "kind", "step", ... details}). `strata diagnose` reads it
// beside the logs, heartbeats and metrics. Kinds: "nonfinite", "nonfinite_abort", "loss_spike",
// "straggler", "replica_divergence", "checkpoint_failed", "checkpoint_damaged", "fault".
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace strata {

std::string events_path(const std::string& run_dir);

// Appends one event (time and rank are added). One write(2) with O_APPEND, so lines from several
// ranks never interleave. Failures to write are logged, never thrown: an event log must not
// take a run down.
void append_event(const std::string& run_dir, int rank, const std::string& kind, int64_t step,
                  nlohmann::json details = nlohmann::json::object());

// Every event of a run, in file order (malformed lines are skipped).
std::vector<nlohmann::json> read_events(const std::string& run_dir);

}  // namespace strata
