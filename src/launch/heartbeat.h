// Heartbeats: each rank of a job started by `strata launch` says, in a small JSON file of its own,
// that it is alive and how far it got; the supervisor reads them every second and kills a job
// whose ranks fall silent (a hang that no exit status would ever report).
//
// The file is RUN_DIR/heartbeat/rank_XXX.json (rank zero-padded to 3 digits, more when needed):
//
//   {"rank":1,"step":42,"time":1764400000.125,"phase":"step","pid":12345,"host":"node7"}
//
// rank, step (the last step started or finished, 0 before the first), time (Unix seconds, from
// the rank's clock; informative: the supervisor measures silence with its own clock, from when it
// saw the file change), phase (free text; "done" means the rank finished and is no longer
// expected to beat), pid and host (for the message that names a silent rank).
#pragma once
#include <cstdint>
#include <optional>
#include <string>

namespace strata::launch {

struct Heartbeat {
  int rank = 0;
  int64_t step = 0;
  double time = 0;
  std::string phase;
  int64_t pid = 0;
  std::string host;
};

// The phase a rank writes last, after its final step: it then stops beating without being hung.
inline constexpr const char* kPhaseDone = "done";

std::string heartbeat_dir(const std::string& run_dir);
std::string heartbeat_path(const std::string& run_dir, int rank);

// What the trainer calls: at start-up ("init"), at every step ("step"), around long phases
// ("eval", "checkpoint") and at the end ("done"). Atomic (temporary file + rename, so a reader
// never sees half a file) but not fsynced: a heartbeat only needs to be whole, not durable, and
// an fsync per step would cost more than the step on a slow filesystem. Creates the directory.
// Throws strata::Error naming the path when the file cannot be written.
void write_heartbeat(const std::string& run_dir, int rank, int64_t step, const std::string& phase);

// The same with every field given (tests; tools).
void write_heartbeat(const std::string& run_dir, const Heartbeat& beat);

// The rank's last heartbeat, or nothing when the file is missing or not a heartbeat.
std::optional<Heartbeat> read_heartbeat(const std::string& run_dir, int rank);

// Text <-> Heartbeat; parse returns nothing for anything that is not a heartbeat object.
std::string format_heartbeat(const Heartbeat& beat);
std::optional<Heartbeat> parse_heartbeat(const std::string& text);

// Removes every rank_*.json under RUN_DIR/heartbeat, so that a new job attempt is not judged by
// the beats of the previous one.
void clear_heartbeats(const std::string& run_dir);

}  // namespace strata::launch
