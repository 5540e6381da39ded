#include "track/report_moe.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "track/report_svg.h"

namespace strata::report {

using nlohmann::json;

namespace {

// Each layer's map has at most kMaxColumns columns (beyond that, consecutive steps are summed in
// equal bins), and the section at most kMaxCells cells in all: a cell is ~100 bytes of HTML, so a
// model with many layers and experts (Qwen3-30B-A3B: 48 x 128) gets fewer, wider columns rather
// than a page of tens of megabytes.
constexpr size_t kMaxColumns = 100, kMinColumns = 10, kMaxCells = 120000;
// The same frame as the line plots (report_svg.cc), so the maps line up with them on the page.
constexpr double kWidth = 640, kLeft = 72, kRight = 160, kTop = 34, kBottom = 46;

// ColorBrewer's RdBu reversed (blue low, white, red high) at t = -1, -2/3, ..., 1: a diverging
// scale, because both directions matter (a starved expert is as much a sign of a bad router as a
// crowded one), and one that reads in greyscale and to the common colour-blindnesses.
constexpr unsigned kStops[] = {0x2166ac, 0x67a9cf, 0xd1e5f0, 0xf7f7f7,
                               0xfddbc7, 0xef8a62, 0xb2182b};
constexpr size_t kNumStops = sizeof kStops / sizeof kStops[0];

std::string hex(unsigned rgb) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "#%06x", rgb & 0xffffffu);
  return buf;
}

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

std::string pct(double share) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g%%", 100.0 * share);
  return buf;
}

// 4 significant digits, or a dash for a missing value.
std::string fmt(double v) {
  if (!std::isfinite(v)) return "&ndash;";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

double number_at(const json& j, const std::string& pointer) {
  const json::json_pointer p(pointer);
  if (!j.contains(p)) return std::nan("");
  const json& v = j.at(p);
  return v.is_number() ? v.get<double>() : std::nan("");
}

// The record's moe.tokens_per_expert (one array per MoE layer), or null.
const json* tokens_per_expert(const json& record) {
  const json::json_pointer p("/moe/tokens_per_expert");
  if (!record.contains(p)) return nullptr;
  const json& t = record.at(p);
  return t.is_array() && !t.empty() ? &t : nullptr;
}

// Layer `layer`'s counts per expert in `record`; empty when the record has none or they are not
// all numbers.
std::vector<double> counts_at(const json& record, size_t layer) {
  const json* t = tokens_per_expert(record);
  if (!t || layer >= t->size() || !(*t)[layer].is_array()) return {};
  std::vector<double> out;
  for (const json& v : (*t)[layer]) {
    if (!v.is_number()) return {};
    out.push_back(v.get<double>());
  }
  return out;
}

// One MoE layer's counts per expert at each step that recorded as many experts as its last
// record (a resumed run with another expert count keeps the later rows only).
struct LayerLoad {
  std::vector<int64_t> steps;
  std::vector<std::vector<double>> counts;  // [step][expert]
  size_t experts() const { return counts.empty() ? 0 : counts.back().size(); }
};

LayerLoad layer_load(const std::map<int64_t, json>& metrics, size_t layer, size_t experts) {
  LayerLoad load;
  for (const auto& [step, j] : metrics) {
    std::vector<double> c = counts_at(j, layer);
    if (c.size() != experts) continue;
    load.steps.push_back(step);
    load.counts.push_back(std::move(c));
  }
  return load;
}

// The colour scale beside a map: a gradient with the scale's stops (SVG interpolates in sRGB as
// share_color does, so the bar and the cells agree) and five ticks, the fair share among them.
std::string legend(size_t layer, size_t experts, double x, double ph) {
  const std::string id = "moe-scale-" + std::to_string(layer);
  std::string s = "<g class=\"legend\">\n<defs><linearGradient id=\"" + id +
                  "\" x1=\"0\" y1=\"1\" x2=\"0\" y2=\"0\">";
  for (size_t i = 0; i < kNumStops; ++i)
    s += "<stop offset=\"" + fmt(static_cast<double>(i) / (kNumStops - 1)) + "\" stop-color=\"" +
         hex(kStops[i]) + "\"/>";
  s += "</linearGradient></defs>\n<rect x=\"" + num(x) + "\" y=\"" + num(kTop) +
       "\" width=\"14\" height=\"" + num(ph) + "\" fill=\"url(#" + id +
       ")\" stroke=\"#444\" stroke-width=\"0.5\"/>\n";
  const double e = static_cast<double>(experts);
  for (const double t : {1.0, 0.5, 0.0, -0.5, -1.0}) {
    const double y = kTop + (1.0 - (t + 1.0) / 2.0) * ph;
    const double share = std::pow(e, t) / e;
    std::string label = pct(share);
    if (t == 0.0) label += " fair (1/" + std::to_string(experts) + ")";
    if (t == -1.0) label = "&le; " + label;
    s += "<line x1=\"" + num(x + 14) + "\" x2=\"" + num(x + 18) + "\" y1=\"" + num(y) + "\" y2=\"" +
         num(y) + "\" stroke=\"#444\"/><text x=\"" + num(x + 21) + "\" y=\"" + num(y) +
         "\" dy=\"4\">" + label + "</text>\n";
  }
  return s + "</g>\n";
}

// One layer's map: columns of steps (bins of `per` consecutive recorded steps, their counts
// summed), a row per expert, expert 0 at the top.
std::string heat_map(size_t layer, const LayerLoad& load, size_t max_columns) {
  const size_t n = load.steps.size(), experts = load.experts();
  const size_t per = (n + max_columns - 1) / max_columns;
  const size_t columns = (n + per - 1) / per;
  // Rows tall enough to see with few experts, thin enough that 128 still fit on a screen.
  const double row_h = std::clamp(192.0 / static_cast<double>(experts), 2.0, 30.0);
  const double pw = kWidth - kLeft - kRight, ph = row_h * static_cast<double>(experts);
  const int height = static_cast<int>(std::ceil(kTop + ph + kBottom));
  auto col_x = [&](size_t c) {
    return kLeft + pw * static_cast<double>(c) / static_cast<double>(columns);
  };
  auto row_y = [&](size_t e) { return kTop + row_h * static_cast<double>(e); };

  std::string title = "MoE layer " + std::to_string(layer) + ": expert load";
  if (per > 1) title += " (" + std::to_string(per) + " steps per column)";
  std::string s = "<svg class=\"plot heatmap\" data-heatmap=\"moe-layer-" + std::to_string(layer) +
                  "\" data-columns=\"" + std::to_string(columns) + "\" data-experts=\"" +
                  std::to_string(experts) + "\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" +
                  num(kWidth) + "\" height=\"" + std::to_string(height) + "\" viewBox=\"0 0 " +
                  num(kWidth) + " " + std::to_string(height) + "\">\n<title>" + title +
                  "</title>\n<rect x=\"0\" y=\"0\" width=\"" + num(kWidth) + "\" height=\"" +
                  std::to_string(height) + "\" fill=\"#ffffff\"/>\n<text class=\"title\" x=\"" +
                  num(kLeft) + "\" y=\"20\">" + title + "</text>\n";
  // The cells, a group per column whose tooltip names its steps. crispEdges: no hairline seams
  // between neighbouring cells.
  s += "<g class=\"cells\" shape-rendering=\"crispEdges\">\n";
  for (size_t c = 0; c < columns; ++c) {
    const size_t first = c * per, end = std::min(n, first + per);
    std::vector<double> sum(experts, 0.0);
    double total = 0;
    for (size_t k = first; k < end; ++k)
      for (size_t e = 0; e < experts; ++e) {
        sum[e] += load.counts[k][e];
        total += load.counts[k][e];
      }
    const std::string steps = end - first == 1
                                  ? "step " + std::to_string(load.steps[first])
                                  : "steps " + std::to_string(load.steps[first]) + "&ndash;" +
                                        std::to_string(load.steps[end - 1]);
    s += "<g class=\"column\"><title>" + steps + "</title>";
    const std::string x = num(col_x(c)), w = num(col_x(c + 1) - col_x(c));
    for (size_t e = 0; e < experts; ++e) {
      const double share = total > 0 ? sum[e] / total : std::nan("");
      char data[24];
      std::snprintf(data, sizeof data, "%.4f", share);
      s += "<rect class=\"cell\" x=\"" + x + "\" y=\"" + num(row_y(e)) + "\" width=\"" + w +
           "\" height=\"" + num(row_h) + "\" fill=\"" +
           share_color(share, static_cast<int64_t>(experts)) + "\" data-share=\"" +
           (std::isfinite(share) ? data : "none") + "\"/>";
    }
    s += "</g>\n";
  }
  s += "</g>\n<rect x=\"" + num(kLeft) + "\" y=\"" + num(kTop) + "\" width=\"" + num(pw) +
       "\" height=\"" + num(ph) + "\" fill=\"none\" stroke=\"#444\"/>\n";
  // Expert labels on the left (every one up to 16 experts, then every k-th), the first step of up
  // to six columns below: the bins are equal counts of recorded steps, not equal step ranges.
  s += "<g class=\"axis y\">\n";
  const size_t every = (experts + 15) / 16;
  for (size_t e = 0; e < experts; e += every)
    s += "<text x=\"" + num(kLeft - 6) + "\" y=\"" + num(row_y(e) + row_h / 2) +
         "\" dy=\"4\" text-anchor=\"end\">" + std::to_string(e) + "</text>\n";
  s += "</g>\n<g class=\"axis x\">\n";
  size_t last_tick = columns;
  for (size_t i = 0; i < 6; ++i) {
    const size_t c = columns == 1 ? 0 : (i * (columns - 1) + 2) / 5;
    if (c >= columns || c == last_tick) continue;
    last_tick = c;
    const std::string cx = num((col_x(c) + col_x(c + 1)) / 2);
    s += "<line x1=\"" + cx + "\" x2=\"" + cx + "\" y1=\"" + num(kTop + ph) + "\" y2=\"" +
         num(kTop + ph + 5) + "\" stroke=\"#444\"/><text x=\"" + cx + "\" y=\"" +
         num(kTop + ph + 18) + "\" text-anchor=\"middle\">" + std::to_string(load.steps[c * per]) +
         "</text>\n";
  }
  s += "</g>\n<text class=\"label\" x=\"" + num(kLeft + pw / 2) + "\" y=\"" +
       std::to_string(height - 8) + "\" text-anchor=\"middle\">step</text>\n";
  s += "<text class=\"label\" transform=\"translate(16," + num(kTop + ph / 2) +
       ") rotate(-90)\" text-anchor=\"middle\">expert</text>\n";
  return s + legend(layer, experts, kLeft + pw + 12, ph) + "</svg>\n";
}

}  // namespace

std::string share_color(double share, int64_t experts) {
  if (!std::isfinite(share)) return "#cccccc";
  if (experts < 2) return hex(kStops[kNumStops / 2]);  // one expert: always its fair share
  // t = log(share / fair) / log(experts): 0 at the fair share, 1 at share 1, -1 at fair/experts.
  // A log scale, because a router's imbalance is a ratio: with 64 experts, twice the fair share
  // (3%) is a sixth of the way to red, where a linear scale from 1/64 to 1 would leave it at 2%.
  const double e = static_cast<double>(experts);
  const double t = share <= 0 ? -1.0 : std::clamp(std::log(share * e) / std::log(e), -1.0, 1.0);
  const double pos = (t + 1.0) / 2.0 * static_cast<double>(kNumStops - 1);
  const size_t i = std::min(static_cast<size_t>(pos), kNumStops - 2);
  const double f = pos - static_cast<double>(i);
  unsigned rgb = 0;
  for (int shift = 16; shift >= 0; shift -= 8) {
    const double a = (kStops[i] >> shift) & 0xff, b = (kStops[i + 1] >> shift) & 0xff;
    rgb |= static_cast<unsigned>(std::lround(a + (b - a) * f)) << shift;
  }
  return hex(rgb);
}

std::string moe_section(const std::map<int64_t, json>& metrics) {
  // The layers and expert counts of the last record that has tokens per expert.
  const json* last = nullptr;
  int64_t last_step = 0;
  for (auto it = metrics.rbegin(); it != metrics.rend() && !last; ++it)
    if (tokens_per_expert(it->second)) {
      last = &it->second;
      last_step = it->first;
    }
  if (!last) return "";
  std::vector<LayerLoad> layers;
  size_t rows = 0;
  for (size_t l = 0; l < tokens_per_expert(*last)->size(); ++l) {
    layers.push_back(layer_load(metrics, l, counts_at(*last, l).size()));
    rows += layers.back().experts();
  }
  const size_t max_columns =
      std::clamp(kMaxCells / std::max<size_t>(rows, 1), kMinColumns, kMaxColumns);

  std::string maps, table;
  for (size_t l = 0; l < layers.size(); ++l) {
    const LayerLoad& load = layers[l];
    if (load.experts() == 0) continue;
    maps += heat_map(l, load, max_columns);
    const std::vector<double>& c = load.counts.back();
    double total = 0;
    for (double v : c) total += v;
    const double hi = *std::max_element(c.begin(), c.end());
    const std::string key = "/moe/layers/" + std::to_string(l) + "/";
    const json& rec = metrics.at(load.steps.back());
    table += "<tr><td>" + std::to_string(l) + "</td><td>" + std::to_string(c.size()) + "</td><td>" +
             fmt(*std::min_element(c.begin(), c.end())) + "</td><td>" +
             fmt(total / static_cast<double>(c.size())) + "</td><td>" + fmt(hi) + "</td><td>" +
             (total > 0 ? pct(hi / total) : "&ndash;") + "</td><td>" +
             fmt(number_at(rec, key + "aux_loss")) + "</td><td>" +
             fmt(number_at(rec, key + "z_loss")) + "</td><td>" +
             fmt(number_at(rec, key + "dropped")) + "</td></tr>\n";
  }
  // Steps where the collapsed-router detector fired (moe.collapsed: the layers it found).
  std::map<int64_t, int64_t> collapsed;  // layer -> steps flagged
  for (const auto& [step, j] : metrics) {
    const json::json_pointer p("/moe/collapsed");
    if (!j.contains(p) || !j.at(p).is_array()) continue;
    for (const json& l : j.at(p))
      if (l.is_number_integer()) ++collapsed[l.get<int64_t>()];
  }
  std::string h =
      "<h2>Mixture of experts: expert load</h2>\n<p>Each cell is an expert's share of its layer's "
      "assignments (tokens &times; top-k) in the step(s) of its column (each step's global batch: "
      "its micro-batches and data-parallel ranks together), on a log scale around the fair share "
      "1/experts: white is balanced, red is more (darkest: every assignment on that expert), blue "
      "is less (darkest: 1/experts of the fair share or none). A column's tooltip names its "
      "steps.</p>\n";
  if (!collapsed.empty()) {
    h += "<p class=\"empty\">The collapsed-router detector fired:";
    for (const auto& [l, n] : collapsed)
      h += " layer " + std::to_string(l) + " at " + std::to_string(n) + " step(s);";
    h.back() = '.';
    h += " See <code>strata diagnose</code>.</p>\n";
  }
  h += "<div class=\"plots\">\n" + maps + "</div>\n";
  h += "<p>Step " + std::to_string(last_step) +
       ", per MoE layer: tokens per expert (the step's global batch) and the step's balancing "
       "losses and dropped assignments.</p>\n<table class=\"grid\" data-table=\"moe\"><tr><th>MoE "
       "layer</th>"
       "<th>experts</th><th>tokens min</th><th>mean</th><th>max</th><th>max share</th>"
       "<th>aux loss</th><th>z loss</th><th>dropped</th></tr>\n" +
       table + "</table>\n";
  return h;
}

}  // namespace strata::report
