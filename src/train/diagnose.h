// `strata diagnose RUN_DIR`: the root cause of a run's trouble, with the evidence, from what the
// run left behind: events.jsonl (detectors, fault injection, fatal errors), launch.log (the
// supervisor's failure lines, and every rank's output), logs/rank_N.log, heartbeat/rank_N.json
// and metrics.jsonl. No guessing beyond those files: each finding quotes where it came from.
#pragma once
#include <string>
#include <vector>

namespace strata {

struct Finding {
  // "oom", "hang", "crash", "nonfinite", "loss_spike", "diverging_replica", "straggler",
  // "slow_link", "router_collapse", "checkpoint", "error"
  std::string kind;
  std::string summary;                // one line: what happened, where, and what to do
  std::vector<std::string> evidence;  // the lines it rests on, each naming its file
};

// Most important first (what ended the run, then what degraded it).
std::vector<Finding> diagnose_run(const std::string& run_dir);

// The report `strata diagnose` prints.
std::string format_diagnosis(const std::string& run_dir, const std::vector<Finding>& findings);

}  // namespace strata
