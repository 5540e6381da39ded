#include "track/report.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "io/atomic_file.h"
#include "track/environment.h"
#include "track/report_moe.h"
#include "track/report_svg.h"

namespace strata {

namespace fs = std::filesystem;
using nlohmann::json;
using report::html_escape;
using report::palette;
using report::PlotOptions;
using report::Series;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// metrics.jsonl by step: a resumed or rolled-back run appends steps again, the last record wins.
std::map<int64_t, json> read_metrics(const fs::path& path, int64_t& bad_lines) {
  std::ifstream f(path);
  STRATA_CHECK(f.good(), "report: cannot read '", path.string(),
               "' (is this a run directory? `strata train` writes metrics.jsonl there)");
  std::map<int64_t, json> out;
  bad_lines = 0;
  for (std::string line; std::getline(f, line);) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || !j.contains("step") || !j["step"].is_number_integer()) {
      ++bad_lines;  // a line cut by a crash, or not a step record
      continue;
    }
    const int64_t step = j["step"].get<int64_t>();
    out[step] = std::move(j);
  }
  STRATA_CHECK(!out.empty(), "report: '", path.string(), "' has no step records");
  return out;
}

json read_json_file(const fs::path& path) {
  std::ifstream f(path);
  if (!f.good()) return nullptr;
  return json::parse(f, nullptr, /*allow_exceptions=*/false);
}

double number_at(const json& j, const std::string& pointer) {
  const json::json_pointer p(pointer);
  if (!j.contains(p)) return kNaN;
  const json& v = j.at(p);
  return v.is_number() ? v.get<double>() : kNaN;
}

// One series of (step, scale * value at pointer).
Series series_of(const std::map<int64_t, json>& m, const std::string& name,
                 const std::string& pointer, double scale, size_t color) {
  Series s;
  s.name = name;
  s.color = palette(color);
  for (const auto& [step, j] : m) {
    const double v = number_at(j, pointer);
    if (!std::isfinite(v)) continue;
    s.x.push_back(static_cast<double>(step));
    s.y.push_back(v * scale);
  }
  return s;
}

// The same steps for every series of a stacked plot (0 where a record lacks the key).
Series stacked_of(const std::map<int64_t, json>& m, const std::string& name,
                  const std::string& pointer, double scale, size_t color) {
  Series s;
  s.name = name;
  s.color = palette(color);
  for (const auto& [step, j] : m) {
    const double v = number_at(j, pointer);
    s.x.push_back(static_cast<double>(step));
    s.y.push_back(std::isfinite(v) ? v * scale : 0.0);
  }
  return s;
}

double median(std::vector<double> v) {
  v.erase(std::remove_if(v.begin(), v.end(), [](double x) { return !std::isfinite(x); }), v.end());
  if (v.empty()) return kNaN;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

double mean(const std::vector<double>& v) {
  double s = 0;
  size_t n = 0;
  for (double x : v)
    if (std::isfinite(x)) {
      s += x;
      ++n;
    }
  return n ? s / static_cast<double>(n) : kNaN;
}

// Fixed decimals, or 4 significant digits when decimals < 0; a dash for a missing value.
std::string fmt(double v, int decimals = -1) {
  if (!std::isfinite(v)) return "&ndash;";
  char buf[48];
  if (decimals < 0)
    std::snprintf(buf, sizeof buf, "%.4g", v);
  else
    std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

std::string row(const std::string& key, const std::string& value_html) {
  return "<tr><th>" + html_escape(key) + "</th><td>" + value_html + "</td></tr>\n";
}

std::string json_value_text(const json& v) {
  return v.is_string() ? v.get<std::string>() : v.dump();
}

// The step-time categories of metrics' "time", in stacking order, with their display names.
struct TimeKey {
  const char* key;
  const char* name;
};
constexpr TimeKey kTimeKeys[] = {{"compute_s", "compute"},
                                 {"data_s", "data"},
                                 {"tp_comm_s", "tp comm (exposed)"},
                                 {"ep_comm_s", "ep comm (exposed)"},
                                 {"cp_comm_s", "cp comm (exposed)"},
                                 {"comm_exposed_s", "dp comm (exposed)"},
                                 {"bubble_s", "pipeline bubble"},
                                 {"optimizer_s", "optimizer"},
                                 {"other_s", "other"}};

// Where the profiler's spans went: total milliseconds per (category, name), top entries.
std::string trace_summary(const fs::path& trace_path) {
  std::error_code ec;
  const auto size = fs::file_size(trace_path, ec);
  if (ec || size > (512u << 20)) return "";
  const json t = read_json_file(trace_path);
  if (!t.is_object() || !t.contains("traceEvents")) return "";
  std::map<std::pair<std::string, std::string>, std::pair<double, int64_t>> totals;
  std::map<int, bool> pids;
  for (const json& e : t["traceEvents"]) {
    if (e.value("ph", "") != "X") continue;
    std::string name = e.value("name", "");
    // "fwd layer 3" -> "fwd layer": one line per kind of span.
    const size_t sp = name.find_last_of(' ');
    if (sp != std::string::npos && sp + 1 < name.size() &&
        std::all_of(name.begin() + static_cast<std::ptrdiff_t>(sp + 1), name.end(), ::isdigit))
      name.resize(sp);
    auto& [ms, count] = totals[{e.value("cat", ""), name}];
    ms += e.value("dur", 0.0) / 1e3;
    ++count;
    pids[e.value("pid", 0)] = true;
  }
  std::vector<std::pair<double, std::string>> rows;
  for (const auto& [key, v] : totals)
    rows.emplace_back(v.first, "<tr><td>" + html_escape(key.first) + "</td><td>" +
                                   html_escape(key.second) + "</td><td>" +
                                   std::to_string(v.second) + "</td><td>" + fmt(v.first, 2) +
                                   "</td></tr>\n");
  std::sort(rows.rbegin(), rows.rend());
  std::string out = "<p>" + std::to_string(pids.size()) +
                    " rank(s). Total time per kind of span over all ranks (nested spans count "
                    "inside their parents too):</p>\n<table class=\"grid\"><tr><th>category</th>"
                    "<th>span</th><th>count</th><th>total ms</th></tr>\n";
  for (size_t i = 0; i < std::min<size_t>(rows.size(), 16); ++i) out += rows[i].second;
  return out + "</table>\n";
}

constexpr int kFromZero = 1, kStacked = 2;
PlotOptions options(const char* id, const char* title, const char* x_label, const char* y_label,
                    int flags) {
  PlotOptions o;
  o.id = id;
  o.title = title;
  o.x_label = x_label;
  o.y_label = y_label;
  o.y_from_zero = (flags & kFromZero) != 0;
  o.stacked = (flags & kStacked) != 0;
  return o;
}

const char* kStyle = R"(body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;
margin:24px auto;max-width:1320px;color:#222;padding:0 16px}
h1{font-size:22px;margin-bottom:4px}h2{font-size:18px;margin-top:28px;border-bottom:1px solid #ddd}
.sub{color:#666;margin-top:0}.plots{display:flex;flex-wrap:wrap;gap:12px}
svg.plot{border:1px solid #ddd;background:#fff;font-size:11px}
svg.plot text.title{font-size:14px;font-weight:600}svg.plot text.label{font-size:12px;fill:#333}
table{border-collapse:collapse;font-size:13px}th,td{padding:3px 10px;text-align:left;vertical-align:top}
table.kv th{color:#555;font-weight:500}table.grid td,table.grid th{border:1px solid #ddd}
pre{background:#f6f8fa;padding:10px;overflow:auto;font-size:12px;max-height:480px}
.empty{color:#a00})";

}  // namespace

std::string render_report(const std::string& run_dir) {
  const fs::path dir(run_dir);
  int64_t bad_lines = 0;
  const std::map<int64_t, json> m = read_metrics(dir / "metrics.jsonl", bad_lines);
  const json config = read_json_file(dir / "config.json");
  json env = read_json_file(dir / "environment.json");
  const bool env_recorded = env.is_object();
  if (!env_recorded) env = environment_facts();

  // Summary numbers.
  std::vector<double> tps, mfu, step_ms, val, comm_share;
  double peak_mem = 0;
  int64_t checkpoints = 0, anomalies = 0;
  for (const auto& [step, j] : m) {
    tps.push_back(number_at(j, "/tokens_per_s"));
    mfu.push_back(number_at(j, "/mfu"));
    step_ms.push_back(number_at(j, "/step_ms"));
    comm_share.push_back(number_at(j, "/comm_share"));
    val.push_back(number_at(j, "/val_loss"));
    peak_mem = std::max(
        peak_mem, std::isfinite(number_at(j, "/mem/total")) ? number_at(j, "/mem/total") : 0.0);
    checkpoints += j.contains("checkpoint");
    anomalies += j.contains("nonfinite") || j.contains("loss_spike") || j.contains("stragglers") ||
                 j.contains("diverged");
  }
  const json& last = m.rbegin()->second;
  double best_val = kNaN;
  for (double v : val)
    if (std::isfinite(v)) best_val = std::isfinite(best_val) ? std::min(best_val, v) : v;

  // Plots.
  std::string plots;
  int plot_count = 0;
  auto plot = [&](const PlotOptions& o, const std::vector<Series>& s) {
    plots += report::svg_plot(o, s);
    ++plot_count;
  };
  Series loss = series_of(m, "loss", "/loss", 1.0, 0);
  Series val_loss = series_of(m, "val_loss", "/val_loss", 1.0, 1);
  val_loss.markers = val_loss.x.size() <= 60;
  plot(options("loss", "Loss", "step", "cross-entropy (nats/token)", 0), {loss, val_loss});
  plot(options("lr", "Learning rate", "step", "lr", kFromZero),
       {series_of(m, "lr", "/lr", 1.0, 2)});
  plot(options("grad_norm", "Gradient norm (before clipping)", "step", "global L2 norm", kFromZero),
       {series_of(m, "grad_norm", "/grad_norm", 1.0, 3)});
  plot(options("throughput", "Throughput", "step", "tokens / s", kFromZero),
       {series_of(m, "tokens/s", "/tokens_per_s", 1.0, 4)});
  plot(
      options("mfu", "Model FLOPs utilisation", "step", "MFU (% of measured GEMM peak)", kFromZero),
      {series_of(m, "MFU %", "/mfu", 100.0, 5)});
  std::vector<Series> mem;
  if (last.contains("mem") && last["mem"].is_object())
    for (const auto& [key, v] : last["mem"].items()) {
      if (key == "total") continue;
      Series s = stacked_of(m, key, "/mem/" + key, 1.0 / (1 << 20), mem.size());
      if (std::any_of(s.y.begin(), s.y.end(), [](double y) { return y > 0; }))
        mem.push_back(std::move(s));
    }
  plot(options("memory", "Memory by category (arena)", "step", "MiB", kStacked), mem);
  std::vector<Series> time;
  std::string time_rows;
  // Means over the steps after the first (one-time costs) when there are enough of them.
  const size_t skip = m.size() >= 3 ? 1 : 0;
  auto steady_mean = [skip](const std::vector<double>& v) {
    return mean(std::vector<double>(
        v.begin() + static_cast<std::ptrdiff_t>(std::min(skip, v.size())), v.end()));
  };
  const double mean_step = steady_mean(step_ms);
  for (const TimeKey& k : kTimeKeys) {
    Series s = stacked_of(m, k.name, std::string("/time/") + k.key, 1e3, time.size());
    const double ms = steady_mean(s.y);
    if (!std::any_of(s.y.begin(), s.y.end(), [](double y) { return y > 0; })) continue;
    time_rows += "<tr><td><span style=\"color:" + s.color + "\">&#9632;</span> " + k.name +
                 "</td><td>" + fmt(ms, 2) + "</td><td>" + fmt(100.0 * ms / mean_step, 1) +
                 "%</td></tr>\n";
    time.push_back(std::move(s));
  }
  // The first step pays one-time costs (first touches, oneDNN's kernel generation): with enough
  // steps it is left off the scale and out of the means.
  PlotOptions time_plot = options("time", "Step time breakdown", "step", "ms per step", kStacked);
  if (m.size() >= 3 && !time.empty()) {
    double later = 0, first = 0;
    for (size_t k = 0; k < time[0].y.size(); ++k) {
      double total = 0;
      for (const Series& s : time) total += s.y[k];
      (k == 0 ? first : later) = std::max(k == 0 ? first : later, total);
    }
    if (first > 1.25 * later && later > 0) {
      time_plot.y_max = 1.1 * later;
      time_plot.title += " (step " + std::to_string(m.begin()->first) + " off scale)";
    }
  }
  plot(time_plot, time);
  plot(options("comm_share", "Exposed communication share", "step", "% of step time", kFromZero),
       {series_of(m, "comm share %", "/comm_share", 100.0, 9)});

  // The page.
  std::string h =
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>strata "
      "report: " +
      html_escape(run_dir) + "</title>\n<style>" + kStyle + "</style></head><body>\n";
  h += "<h1>strata report: " + html_escape(run_dir) + "</h1>\n";
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  char when[32];
  std::tm tm{};
  gmtime_r(&now, &tm);
  std::strftime(when, sizeof when, "%Y-%m-%d %H:%M UTC", &tm);
  h += "<p class=\"sub\">generated " + std::string(when) + " by <code>strata report</code> from " +
       "metrics.jsonl (" + std::to_string(m.size()) + " steps" +
       (bad_lines ? ", " + std::to_string(bad_lines) + " unreadable line(s) skipped" : "") +
       ")</p>\n";
  h += "<h2>Summary</h2>\n<table class=\"kv\">\n";
  h += row("steps",
           std::to_string(m.begin()->first) + " &ndash; " + std::to_string(m.rbegin()->first));
  h += row("final loss", fmt(number_at(last, "/loss")));
  h += row("best val_loss", fmt(best_val));
  h += row("tokens / s (median)", fmt(median(tps), 0));
  h += row("MFU (median)", fmt(100 * median(mfu), 2) + "%");
  h += row("step time (median)", fmt(median(step_ms), 1) + " ms");
  h += row("peak arena memory", fmt(peak_mem / (1 << 20), 1) + " MiB");
  h += row("checkpoints committed", std::to_string(checkpoints));
  h += row("steps with anomalies", std::to_string(anomalies));
  if (config.is_object()) {
    const json model = config.value("model", json::object());
    const json par = config.value("parallel", json::object());
    const json train = config.value("train", json::object());
    h += row("model", html_escape(cat(json_value_text(model.value("family", json("?"))), ", ",
                                      model.value("n_layer", 0), " layers, d_model ",
                                      model.value("d_model", 0), ", ", model.value("n_head", 0),
                                      " heads, vocab ", model.value("vocab_size", 0))));
    h += row("layout",
             html_escape(cat("tp ", par.value("tp", 1), ", pp ", par.value("pp", 1), ", dp ",
                             par.value("dp", 0), " (0: derived), zero ", par.value("zero", 0))));
    h += row("batch",
             html_escape(cat(train.value("batch_size", 0), " x ", train.value("seq_len", 0),
                             " tokens, ", train.value("grad_accum", 1), " accumulation, precision ",
                             train.value("precision", std::string("f32")))));
  }
  h += "</table>\n<h2>Training</h2>\n<div class=\"plots\">\n" + plots + "</div>\n";
  h += report::moe_section(m);  // "" for a dense run
  if (!time_rows.empty())
    h += "<h2>Where a step's time goes</h2>\n<p>Mean over " +
         (skip ? "the steps after the first (which pays one-time costs)"
               : std::string("all steps")) +
         "; exposed communication is " + fmt(100 * steady_mean(comm_share), 1) +
         "% of the step.</p>\n<table class=\"grid\"><tr><th>category</th><th>ms</th><th>share</th>"
         "</tr>\n" +
         time_rows + "</table>\n";
  const fs::path trace = dir / "trace" / "trace.json";
  if (fs::exists(trace)) {
    h += "<h2>Profiler trace</h2>\n<p><a href=\"trace/trace.json\">trace/trace.json</a>: open it "
         "in <a href=\"https://ui.perfetto.dev\">ui.perfetto.dev</a> or chrome://tracing.</p>\n";
    h += trace_summary(trace);
  }
  h += "<h2>Environment</h2>\n";
  if (!env_recorded)
    h += "<p class=\"empty\">The run did not record environment.json; this is the machine that "
         "wrote the report.</p>\n";
  h += "<table class=\"kv\">\n";
  for (const auto& [key, v] : env.items())
    if (key != "env") h += row(key, html_escape(json_value_text(v)));
  if (env.contains("env"))
    for (const auto& [key, v] : env["env"].items()) h += row(key, html_escape(json_value_text(v)));
  h += "</table>\n<h2>Config</h2>\n";
  h += config.is_object() ? "<pre>" + html_escape(config.dump(2)) + "</pre>\n"
                          : "<p class=\"empty\">no config.json in the run directory</p>\n";
  h += "<!-- plots: " + std::to_string(plot_count) + " -->\n</body></html>\n";
  return h;
}

std::string write_report(const std::string& run_dir, const std::string& output) {
  const std::string path = output.empty() ? (fs::path(run_dir) / "report.html").string() : output;
  io::write_file_atomic(path, render_report(run_dir));
  return path;
}

}  // namespace strata
