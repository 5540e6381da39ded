#include "train/profiler.h"

#include <algorithm>
#include <filesystem>

#include "core/error.h"
#include "core/log.h"
#include "core/trace.h"

namespace strata {

namespace fs = std::filesystem;

void StepProfiler::setup(const ProfileConfig& config, const std::string& run_dir,
                         ProcessGroups& groups) {
  enabled_ = config.enabled;
  if (!enabled_) return;
  first_ = config.start_step;
  last_ = config.start_step + config.steps - 1;
  run_dir_ = run_dir;
  groups_ = &groups;
  trace::Options o;
  o.max_events = config.max_events;
  rank_ = groups_->world().rank();
  world_ = groups_->world().size();
  const Layout::Coord c = groups_->coord();
  o.process_name = cat("rank ", rank_, " (tp ", c.tp, ", pp ", c.pp, ", dp ", c.dp, ")");
  o.pid = rank_;
  // The barrier lines the ranks' clocks up: each trace starts at its exit (to within the
  // barrier's skew, microseconds on one node).
  groups_->world().barrier();
  trace::start(o);
  log::info("profiler: tracing steps ", first_, "-", last_, " into ", trace_dir());
}

std::string StepProfiler::trace_dir() const {
  return (fs::path(run_dir_) / "trace").string();
}

std::string StepProfiler::merged_path() const {
  return (fs::path(trace_dir()) / "trace.json").string();
}

void StepProfiler::begin_step(int64_t step) {
  if (!enabled_ || done_ || step < first_ || step > last_) return;
  if (!open_) {
    open_ = true;
    first_traced_ = step;
    trace::set_active(true);
  }
  last_traced_ = step;
  step_begin_ns_ = trace::now_ns();
}

void StepProfiler::end_step(int64_t step) {
  if (!open_) return;
  if (trace::Event* e = trace::begin_at("step", "step", step_begin_ns_, static_cast<int32_t>(step)))
    trace::finish(e, trace::now_ns());
  if (step >= last_) close();
}

void StepProfiler::finish() {
  if (open_) close();
}

void StepProfiler::close() {
  trace::set_active(false);
  open_ = false;
  done_ = true;
  const std::string path = (fs::path(trace_dir()) / cat("rank_", rank_, ".json")).string();
  nlohmann::json meta = {
      {"first_step", first_traced_}, {"last_step", last_traced_}, {"world_size", world_}};
  const Layout& l = groups_->layout();
  meta["layout"] = {{"tp", l.tp}, {"pp", l.pp}, {"dp", l.dp}};
  trace::write_chrome_json(path, meta);
  if (trace::dropped() > 0)
    log::warn("profiler: ", trace::dropped(),
              " events did not fit in the buffer; raise profile.max_events (now ",
              trace::recorded(), " kept)");
  groups_->world().barrier();  // every rank's file is complete
  if (rank_ != 0) return;
  const int64_t n = merge_run_trace(run_dir_, world_);
  log::info("profiler: steps ", first_traced_, "-", last_traced_, ", ", n, " events from ", world_,
            " rank(s) in ", merged_path(),
            " (open in https://ui.perfetto.dev or chrome://tracing)");
}

int64_t merge_run_trace(const std::string& run_dir, int world) {
  const fs::path dir = fs::path(run_dir) / "trace";
  std::vector<std::pair<int, std::string>> files;
  if (fs::is_directory(dir)) {
    for (const auto& e : fs::directory_iterator(dir)) {
      const std::string name = e.path().filename().string();
      if (name.rfind("rank_", 0) != 0 || e.path().extension() != ".json") continue;
      const std::string digits = name.substr(5, name.size() - 5 - 5);
      if (digits.empty() || !std::all_of(digits.begin(), digits.end(), ::isdigit)) continue;
      const int rank = std::stoi(digits);
      if (world == 0 || rank < world) files.emplace_back(rank, e.path().string());
    }
  }
  STRATA_CHECK(!files.empty(), "trace: no rank_N.json files in '", dir.string(),
               "' (was the run started with [profile] enabled = true?)");
  std::sort(files.begin(), files.end());
  std::vector<std::string> inputs;
  for (const auto& f : files) inputs.push_back(f.second);
  return trace::merge_chrome_json(inputs, (dir / "trace.json").string());
}

}  // namespace strata
