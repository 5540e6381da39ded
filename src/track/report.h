// strata report: one self-contained HTML page for a run directory (inline SVG plots, no scripts,
// nothing fetched): loss and validation loss, learning rate, gradient norm, throughput, MFU,
// memory by category, the step-time breakdown and the communication share, with a summary, the
// run's config and the environment it ran in, the profiler's trace when there is one, and for a
// mixture-of-experts run the expert load per layer (report_moe.h).
#pragma once
#include <string>

namespace strata {

// The page for RUN_DIR (reads metrics.jsonl, config.json, environment.json, events.jsonl and
// trace/trace.json where present). Throws when metrics.jsonl is missing or has no step records.
std::string render_report(const std::string& run_dir);

// Writes render_report(run_dir) to `output` (default RUN_DIR/report.html); returns the path.
std::string write_report(const std::string& run_dir, const std::string& output = "");

}  // namespace strata
