#include "train/diagnose.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>

#include "core/error.h"
#include "launch/heartbeat.h"
#include "track/events.h"

namespace strata {

namespace fs = std::filesystem;

namespace {

struct Line {
  std::string file;
  int number = 0;
  std::string text;
  std::string cite() const {
    return cat(fs::path(file).filename().string(), ":", number, ": ", text);
  }
};

std::vector<Line> read_lines(const std::string& path) {
  std::vector<Line> out;
  std::ifstream in(path);
  std::string text;
  int n = 0;
  while (std::getline(in, text)) out.push_back(Line{path, ++n, text});
  return out;
}

// Every line of the logs a run keeps: launch.log (the supervisor and every rank's output) and
// logs/rank_N.log (each rank's own log when it ran under mpirun/srun directly).
std::vector<Line> all_log_lines(const std::string& run_dir) {
  std::vector<Line> lines = read_lines((fs::path(run_dir) / "launch.log").string());
  const fs::path logs = fs::path(run_dir) / "logs";
  std::error_code ec;
  if (fs::is_directory(logs, ec)) {
    std::vector<std::string> files;
    for (const auto& e : fs::directory_iterator(logs)) files.push_back(e.path().string());
    std::sort(files.begin(), files.end());
    for (const std::string& f : files) {
      std::vector<Line> more = read_lines(f);
      lines.insert(lines.end(), more.begin(), more.end());
    }
  }
  return lines;
}

std::string join(const std::vector<std::string>& parts, const std::string& sep) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? sep : "") + parts[i];
  return out;
}

std::string short_json(const nlohmann::json& j) {
  nlohmann::json copy = j;
  copy.erase("time");
  return copy.dump();
}

void add_event_findings(const std::vector<nlohmann::json>& events, std::vector<Finding>& out) {
  std::map<std::string, std::vector<nlohmann::json>> by_kind;
  for (const nlohmann::json& e : events) by_kind[e.value("kind", "")].push_back(e);
  auto evidence = [](const std::vector<nlohmann::json>& list) {
    std::vector<std::string> ev;
    for (size_t i = 0; i < list.size() && i < 5; ++i)
      ev.push_back("events.jsonl: " + short_json(list[i]));
    if (list.size() > 5) ev.push_back(cat("events.jsonl: ... ", list.size() - 5, " more"));
    return ev;
  };
  if (auto it = by_kind.find("nonfinite"); it != by_kind.end()) {
    std::vector<std::string> steps, where;
    for (const auto& e : it->second) {
      steps.push_back(std::to_string(e.value("step", 0)));
      where.push_back(e.value("data_position", "?"));
    }
    const bool aborted = by_kind.count("nonfinite_abort") > 0;
    out.push_back(
        Finding{"nonfinite",
                cat("non-finite loss or gradients at step(s) ", join(steps, ", "),
                    " (data position(s) ", join(where, "; "), ")",
                    aborted ? "; the run stopped after anomaly.max_nonfinite in a row"
                            : "; those updates were skipped",
                    ". Lower optim.lr or raise optim.warmup_steps, and inspect the data there"),
                evidence(it->second)});
  }
  if (auto it = by_kind.find("loss_spike"); it != by_kind.end()) {
    std::vector<std::string> steps;
    for (const auto& e : it->second)
      steps.push_back(cat(e.value("step", 0), " (loss ", e.value("loss", 0.0), ", z ",
                          e.value("zscore", 0.0), ", at ", e.value("data_position", "?"), ")"));
    out.push_back(Finding{"loss_spike",
                          cat("loss spike(s) at step ", join(steps, ", "),
                              "; action: ", it->second.front().value("action", "log"),
                              ". Check the batches at those data positions; anomaly.spike_action "
                              "= \"skip\" drops their updates"),
                          evidence(it->second)});
  }
  if (auto it = by_kind.find("replica_divergence"); it != by_kind.end()) {
    const nlohmann::json& first = it->second.front();
    out.push_back(Finding{
        "diverging_replica",
        cat("data-parallel replicas diverged from step ", first.value("step", 0),
            ": world rank(s) ", first.value("ranks", nlohmann::json::array()).dump(),
            " hold different parameters. Suspect that rank's host (memory or CPU errors) or a "
            "non-deterministic kernel; restart from the last checkpoint without it"),
        evidence(it->second)});
  }
  if (auto it = by_kind.find("straggler"); it != by_kind.end()) {
    std::map<int, int> count;
    std::map<int, double> worst;
    for (const auto& e : it->second) {
      const auto ranks = e.value("ranks", std::vector<int>{});
      const auto secs = e.value("seconds", std::vector<double>{});
      for (size_t i = 0; i < ranks.size(); ++i) {
        ++count[ranks[i]];
        if (i < secs.size()) worst[ranks[i]] = std::max(worst[ranks[i]], secs[i]);
      }
    }
    std::vector<std::string> named;
    for (const auto& [rank, n] : count)
      named.push_back(cat("rank ", rank, " (", n, " step(s), up to ", worst[rank], " s)"));
    out.push_back(Finding{"straggler",
                          cat("straggler(s): ", join(named, ", "), " against a median of ",
                              it->second.back().value("median_s", 0.0),
                              " s. Check that rank's host (load, thermal throttling, a noisy "
                              "neighbour) or move it"),
                          evidence(it->second)});
  }
  if (auto it = by_kind.find("slow_link"); it != by_kind.end()) {
    // Per host: the steps its probes named it, its worst exchange time, and whether its ranks'
    // compute stayed at the median (the network) or was slow too (the host itself).
    struct Host {
      std::set<int> ranks;
      int64_t first_step = 0;
      double worst = 0, median = 0, compute_ratio = 0;
    };
    std::map<std::string, Host> hosts;
    for (const auto& e : it->second) {
      const auto names = e.value("hosts", std::vector<std::string>{});
      const auto ranks = e.value("ranks", std::vector<int>{});
      const auto secs = e.value("seconds", std::vector<double>{});
      const auto compute = e.value("compute_s", std::vector<double>{});
      const double median_compute = e.value("median_compute_s", 0.0);
      for (const std::string& name : names) {
        Host& h = hosts[name];
        if (h.first_step == 0) h.first_step = e.value("step", int64_t{0});
        h.median = e.value("median_s", 0.0);
        for (size_t i = 0; i < ranks.size(); ++i) h.ranks.insert(ranks[i]);
        for (double x : secs) h.worst = std::max(h.worst, x);
        for (double x : compute)
          if (median_compute > 0) h.compute_ratio = std::max(h.compute_ratio, x / median_compute);
      }
    }
    std::vector<std::string> named;
    bool compute_too = false;
    for (const auto& [name, h] : hosts) {
      std::vector<std::string> ranks;
      for (int r : h.ranks) ranks.push_back(std::to_string(r));
      named.push_back(cat("host ", name, " (rank(s) ", join(ranks, ", "), ", from step ",
                          h.first_step, ": up to ", h.worst,
                          " s for an exchange that took a median of ", h.median, " s)"));
      compute_too = compute_too || h.compute_ratio > 2.0;
    }
    out.push_back(Finding{
        "slow_link",
        cat("slow link(s): ", join(named, "; "), ". ",
            compute_too ? "Their compute was slow too, so suspect the host itself (load, "
                          "throttling) as well as its link"
                        : "Their compute times stayed at the median: this is the network, not "
                          "compute",
            ". Check that host's link (ip -s link or ethtool error and drop counters, its cable "
            "and switch port, traffic shaping), or run without the host (a --hostfile without it, "
            "or --elastic)"),
        evidence(it->second)});
  }
  if (auto it = by_kind.find("router_collapse"); it != by_kind.end()) {
    std::vector<std::string> layers;
    for (const auto& e : it->second)
      layers.push_back(cat("layer ", e.value("layer", 0), " (expert ", e.value("expert", 0), ", ",
                           static_cast<int>(100.0 * e.value("fraction", 0.0) + 0.5),
                           "% of the tokens, from step ", e.value("step", 0), ")"));
    out.push_back(Finding{
        "router_collapse",
        cat("collapsed MoE router(s): ", join(layers, ", "), ", each for at least ",
            it->second.front().value("steps", 0),
            " steps in a row. Most tokens go to one expert, so the others stop learning. Raise "
            "model.moe.aux_loss_coeff, add model.moe.z_loss_coeff (1e-3), lower optim.lr or "
            "lengthen optim.warmup_steps; model.moe.capacity_factor caps an expert's tokens"),
        evidence(it->second)});
  }
  for (const char* kind : {"checkpoint_failed", "checkpoint_damaged"}) {
    if (auto it = by_kind.find(kind); it != by_kind.end()) {
      const bool damaged = std::string(kind) == "checkpoint_damaged";
      out.push_back(Finding{
          "checkpoint",
          damaged ? cat("a damaged checkpoint was found: ", it->second.front().value("file", "?"),
                        "; the resume fell back to an older one (work since then was redone)")
                  : cat("the checkpoint save of step ", it->second.front().value("step", 0),
                        " failed and was abandoned; the previous checkpoint was kept. Check the "
                        "disk (space, permissions) under run.dir"),
          evidence(it->second)});
    }
  }
}

}  // namespace

std::vector<Finding> diagnose_run(const std::string& run_dir) {
  STRATA_CHECK(fs::is_directory(run_dir), "strata diagnose: '", run_dir,
               "' is not a directory (give the run directory, e.g. runs/tiny)");
  std::vector<Finding> fatal, other;
  const std::vector<Line> lines = all_log_lines(run_dir);
  const std::vector<nlohmann::json> events = read_events(run_dir);

  // Out of memory: the arena's message names the category and the allocation; what fits
  // depends on which category overflowed.
  static const std::regex oom(R"(out of memory: .*category '?([a-z]+)'?)");
  auto oom_finding = [](const std::string& category, std::string evidence) {
    const std::map<std::string, std::string> remedy = {
        {"params",
         "shard the parameters (parallel.zero = 3) or split them (parallel.tp, parallel.pp)"},
        {"grads",
         "shard the gradients (parallel.zero >= 2) or split the model (parallel.tp, parallel.pp)"},
        {"optimizer",
         "shard the optimizer state (parallel.zero >= 1) or offload it (optim.offload = \"nvme\")"},
        {"master",
         "shard the master weights and optimizer state (parallel.zero >= 1) or offload them "
         "(optim.offload = \"nvme\")"},
        {"activations",
         "recompute activations (train.recompute = \"selective\" or \"full\"), lower "
         "train.batch_size (raise train.grad_accum to keep the global batch), or split them "
         "(parallel.tp with parallel.sp, parallel.pp)"},
    };
    const auto it = remedy.find(category);
    return Finding{
        "oom",
        cat("out of memory in category '", category, "'. What fits: ",
            it != remedy.end() ? it->second
                               : std::string("lower parallel.bucket_mb or train.batch_size")),
        {std::move(evidence)}};
  };
  for (const Line& l : lines) {
    std::smatch m;
    if (std::regex_search(l.text, m, oom)) {
      fatal.push_back(oom_finding(m[1].str(), l.cite()));
      break;
    }
  }
  for (const nlohmann::json& e : events) {
    const std::string msg = e.value("message", "");
    std::smatch m;
    if (fatal.empty() && e.value("kind", "") == "error" && std::regex_search(msg, m, oom))
      fatal.push_back(oom_finding(m[1].str(), "events.jsonl: " + short_json(e)));
  }

  // Hangs: the ranks that waited name the operation, the group and the step; the heartbeats
  // name the rank that went silent.
  static const std::regex timeout(R"(comm timeout: (.*) at step (\d+) did not complete)");
  std::vector<std::string> hang_evidence;
  std::string hang_what;
  for (const Line& l : lines) {
    std::smatch m;
    if (std::regex_search(l.text, m, timeout)) {
      if (hang_what.empty()) hang_what = cat(m[1].str(), " at step ", m[2].str());
      if (hang_evidence.size() < 4) hang_evidence.push_back(l.cite());
    }
    const bool injected_hang = l.text.find("fault injection") != std::string::npos &&
                               l.text.find("hangs") != std::string::npos;
    if (l.text.find("strata launch: hung:") != std::string::npos || injected_hang)
      hang_evidence.push_back(l.cite());
  }
  // The silent rank: the one that did not time out beside the others (their heartbeats say
  // "comm timeout: OPERATION"), else the one whose heartbeat is furthest behind.
  std::string silent;
  {
    std::vector<launch::Heartbeat> beats;
    for (int r = 0; r < 4096; ++r) {
      auto hb = launch::read_heartbeat(run_dir, r);
      if (!hb) break;
      beats.push_back(*hb);
    }
    const auto timed_out = [](const launch::Heartbeat& b) {
      return b.phase.rfind("comm timeout", 0) == 0;
    };
    const bool timeouts = std::any_of(beats.begin(), beats.end(), timed_out);
    std::vector<const launch::Heartbeat*> quiet;
    int64_t max_step = 0;
    for (const auto& b : beats) max_step = std::max(max_step, b.step);
    for (const auto& b : beats)
      if (timeouts ? !timed_out(b) : b.step < max_step) quiet.push_back(&b);
    if (beats.size() > 1 && !quiet.empty() && quiet.size() < beats.size()) {
      for (const launch::Heartbeat* b : quiet) {
        silent += cat(silent.empty() ? "" : ", ", "rank ", b->rank, " (pid ", b->pid, " on ",
                      b->host, ", last heartbeat at step ", b->step, ", phase ", b->phase, ")");
        hang_evidence.push_back(cat("heartbeat/rank_", b->rank, ".json: step ", b->step, ", phase ",
                                    b->phase,
                                    timeouts ? " (the other ranks: comm timeout)"
                                             : cat(" (others reached step ", max_step, ")")));
      }
    }
  }
  if (!hang_what.empty() ||
      std::any_of(hang_evidence.begin(), hang_evidence.end(),
                  [](const std::string& s) { return s.find("hung:") != std::string::npos; })) {
    fatal.push_back(Finding{
        "hang",
        cat("hang: ", hang_what.empty() ? std::string("ranks stopped heartbeating") : hang_what,
            silent.empty() ? "" : cat("; the silent rank is ", silent),
            ". The supervisor restarts from the last checkpoint; if it repeats, check that rank's "
            "host and lower parallel.comm_timeout_s to detect it sooner"),
        hang_evidence});
  }

  // Crashes: the supervisor's line names the rank and the signal or exit status.
  static const std::regex crash(
      R"(strata launch: (rank (\d+) (was killed by signal (\d+)[^;]*|failed with exit status (\d+)[^;]*)))");
  for (const Line& l : lines) {
    std::smatch m;
    if (!std::regex_search(l.text, m, crash)) continue;
    if (!m[5].str().empty() && (m[5].str() == "124" || !fatal.empty())) continue;  // a hang's echo
    fatal.push_back(Finding{"crash",
                            cat("crash: ", m[1].str(),
                                m[4].str() == "9" ? " (SIGKILL: the OOM killer, a node failure "
                                                    "or an operator; see the host's kernel log)"
                                                  : ""),
                            {l.cite()}});
    break;
  }
  // A fatal error a rank reported itself (bad config, data, a non-finite abort, ...).
  if (fatal.empty()) {
    for (const nlohmann::json& e : events)
      if (e.value("kind", "") == "error")
        fatal.push_back(Finding{"error",
                                cat("the run stopped with an error: ", e.value("message", "")),
                                {"events.jsonl: " + short_json(e)}});
  }
  add_event_findings(events, other);
  // A non-finite abort is what ended the run: first.
  std::stable_sort(other.begin(), other.end(), [](const Finding& a, const Finding& b) {
    return a.kind == "nonfinite" && b.kind != "nonfinite";
  });
  fatal.insert(fatal.end(), other.begin(), other.end());
  return fatal;
}

std::string format_diagnosis(const std::string& run_dir, const std::vector<Finding>& findings) {
  std::ostringstream out;
  if (findings.empty()) {
    out << "strata diagnose " << run_dir
        << ": nothing wrong found (no failure in launch.log or the rank logs, no anomaly in "
           "events.jsonl)\n";
    return out.str();
  }
  out << "strata diagnose " << run_dir << ": " << findings.size() << " finding"
      << (findings.size() == 1 ? "" : "s") << "\n";
  for (size_t i = 0; i < findings.size(); ++i) {
    out << "\n" << i + 1 << ". [" << findings[i].kind << "] " << findings[i].summary << "\n";
    for (const std::string& e : findings[i].evidence) out << "     " << e << "\n";
  }
  return out.str();
}

}  // namespace strata
