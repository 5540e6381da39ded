// strata report: the page from a run directory's files, and the SVG plots it is made of.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "core/error.h"
#include "track/report.h"
#include "track/report_svg.h"
#include "track/report_test_util.h"

namespace strata {

namespace {

namespace fs = std::filesystem;

fs::path fresh_dir(const std::string& name) {
  return testing::fresh_report_dir("report", name);
}

int count(const std::string& text, const std::string& what) {
  return testing::count_of(text, what);
}

// The data-points of each series path in the svg of plot `id`.
std::vector<int> series_points(const std::string& html, const std::string& id) {
  const size_t begin = html.find("data-plot=\"" + id + "\"");
  if (begin == std::string::npos) return {};
  const std::string svg = html.substr(begin, html.find("</svg>", begin) - begin);
  std::vector<int> out;
  const std::regex re("class=\"series\"[^>]*data-points=\"([0-9]+)\"");
  for (std::sregex_iterator it(svg.begin(), svg.end(), re), end; it != end; ++it)
    out.push_back(std::stoi((*it)[1]));
  return out;
}

void write_run(const fs::path& dir, int steps) {
  std::ofstream m(dir / "metrics.jsonl");
  for (int s = 1; s <= steps; ++s) {
    nlohmann::json j = {{"step", s},
                        {"loss", 6.0 - 0.1 * s},
                        {"lr", 1e-3 * s / steps},
                        {"grad_norm", 1.0 + 0.01 * s},
                        {"tokens_per_s", 5000.0 + s},
                        {"mfu", 0.2},
                        {"step_ms", 30.0},
                        {"comm_share", 0.1},
                        {"mem", {{"params", 4 << 20}, {"grads", 4 << 20}, {"total", 8 << 20}}},
                        {"time",
                         {{"data_s", 0.001},
                          {"compute_s", 0.02},
                          {"comm_exposed_s", 0.003},
                          {"optimizer_s", 0.004},
                          {"bubble_s", 0.0},
                          {"other_s", 0.002}}}};
    if (s % 5 == 0) j["val_loss"] = 6.5 - 0.1 * s;
    m << j.dump() << "\n";
    if (s == 3) m << "{\"step\": 4, \"loss\": \n";  // a line cut short by a crash
  }
  std::ofstream(dir / "config.json")
      << nlohmann::json{{"model", {{"family", "gpt2"}, {"n_layer", 2}, {"d_model", 64}}},
                        {"train", {{"batch_size", 4}, {"seq_len", 32}}}}
             .dump(2);
}

}  // namespace

TEST(Report, PageHasEveryPlotWithItsSeries) {
  const fs::path dir = fresh_dir("page");
  write_run(dir, 20);
  const std::string path = write_report(dir.string());
  EXPECT_EQ(path, (dir / "report.html").string());
  std::ifstream f(path);
  std::ostringstream text;
  text << f.rdbuf();
  const std::string html = text.str();
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  // Self-contained: no scripts, no external resources.
  EXPECT_EQ(count(html, "<script"), 0);
  EXPECT_EQ(count(html, "src=\"http"), 0);
  EXPECT_EQ(series_points(html, "loss"), (std::vector<int>{20, 4}));  // loss, val_loss
  for (const char* id : {"lr", "grad_norm", "throughput", "mfu", "comm_share"})
    EXPECT_EQ(series_points(html, id), std::vector<int>{20}) << id;
  EXPECT_EQ(series_points(html, "memory").size(), 2u);  // params, grads (not total)
  EXPECT_EQ(series_points(html, "time").size(), 5u);    // the zero bubble is left out
  EXPECT_NE(html.find("1 unreadable line(s) skipped"), std::string::npos);
  EXPECT_NE(html.find("&quot;family&quot;: &quot;gpt2&quot;"), std::string::npos);  // config
  EXPECT_NE(html.find("logical_cores"), std::string::npos);  // environment (of this machine)
  EXPECT_EQ(count(html, "<svg class=\"plot\""), 8);
}

TEST(Report, MissingOrEmptyMetricsIsAClearError) {
  const fs::path dir = fresh_dir("empty");
  EXPECT_THROW(render_report(dir.string()), Error);
  std::ofstream(dir / "metrics.jsonl") << "not json\n";
  try {
    render_report(dir.string());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no step records"), std::string::npos) << e.what();
  }
}

TEST(ReportSvg, GapsMarkersAndEmptyPlots) {
  report::PlotOptions o;
  o.id = "p";
  o.title = "T <&>";
  report::Series s;
  s.name = "a";
  s.color = "#000";
  s.x = {1, 2, 3, 4};
  s.y = {1, NAN, 3, 4};
  s.markers = true;
  const std::string svg = report::svg_plot(o, {s});
  EXPECT_NE(svg.find("T &lt;&amp;&gt;"), std::string::npos);
  EXPECT_NE(svg.find("data-points=\"3\""), std::string::npos);
  EXPECT_EQ(count(svg, "<circle class=\"marker\""), 3);
  EXPECT_EQ(count(svg, " M"), 1);  // the NaN breaks the line once
  report::Series none = s;
  none.y = {NAN, NAN, NAN, NAN};
  EXPECT_NE(report::svg_plot(o, {none}).find("no data"), std::string::npos);
  // A constant series and a single point still get a drawable range.
  report::Series flat = s;
  flat.y = {2, 2, 2, 2};
  EXPECT_NE(report::svg_plot(o, {flat}).find("data-points=\"4\""), std::string::npos);
  report::Series one = s;
  one.x = {7};
  one.y = {0.5};
  EXPECT_NE(report::svg_plot(o, {one}).find("data-points=\"1\""), std::string::npos);
}

TEST(ReportSvg, LongSeriesAreAveragedDown) {
  report::PlotOptions o;
  o.id = "long";
  o.max_points = 100;
  report::Series s;
  s.name = "x";
  s.color = "#000";
  for (int i = 0; i < 10000; ++i) {
    s.x.push_back(i);
    s.y.push_back(std::sin(i * 0.01));
  }
  EXPECT_NE(report::svg_plot(o, {s}).find("data-points=\"100\""), std::string::npos);
}

}  // namespace strata
