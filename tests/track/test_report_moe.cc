// strata report's expert-load section: heat maps of each expert's share per MoE layer, binned to
// at most 100 columns, with the fair share white and a collapsed expert the darkest red; none for
// a dense run.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>

#include "core/error.h"
#include "track/report.h"
#include "track/report_moe.h"
#include "track/report_test_util.h"

namespace strata {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

fs::path fresh_dir(const std::string& name) {
  return testing::fresh_report_dir("report_moe", name);
}

int count(const std::string& text, const std::string& what) {
  return testing::count_of(text, what);
}

// The <svg> of layer `layer`'s heat map, or "".
std::string heat_map(const std::string& html, int layer) {
  const size_t begin = html.find(cat("data-heatmap=\"moe-layer-", layer, "\""));
  if (begin == std::string::npos) return "";
  return html.substr(begin, html.find("</svg>", begin) - begin);
}

// (share, fill) of every cell of a map, in document order (column by column, expert 0 first).
std::vector<std::pair<std::string, std::string>> cells(const std::string& svg) {
  std::vector<std::pair<std::string, std::string>> out;
  const std::regex re("<rect class=\"cell\"[^>]* fill=\"(#[0-9a-f]{6})\" data-share=\"([^\"]*)\"");
  for (std::sregex_iterator it(svg.begin(), svg.end(), re), end; it != end; ++it)
    out.emplace_back((*it)[2], (*it)[1]);
  return out;
}

json record(int step) {
  return {{"step", step}, {"loss", 5.0}, {"lr", 1e-3}, {"tokens_per_s", 1000.0}, {"step_ms", 10.0}};
}

std::string render(const fs::path& dir, const std::vector<json>& records) {
  std::ofstream m(dir / "metrics.jsonl");
  for (const json& j : records) m << j.dump() << "\n";
  m.close();
  return render_report(dir.string());
}

// 2 MoE layers of 4 experts, top-2 of 64 tokens per step: layer 0 balanced (32 each), layer 1
// balanced up to step 100 and then collapsed onto expert 2 (every assignment).
std::vector<json> moe_run(int steps) {
  std::vector<json> out;
  for (int s = 1; s <= steps; ++s) {
    const bool collapsed = s > 100;
    json layer1 = collapsed ? json{0, 0, 128, 0} : json{32, 32, 32, 32};
    json j = record(s);
    j["moe"] = {{"aux_loss", 2.0 + 0.001 * s},
                {"z_loss", 0.5},
                {"dropped", 0},
                {"tokens_per_expert", {{32, 32, 32, 32}, layer1}},
                {"layers",
                 {{"0", {{"aux_loss", 1.0}, {"z_loss", 0.25}, {"dropped", 0}}},
                  {"1", {{"aux_loss", collapsed ? 4.0 : 1.0}, {"z_loss", 0.25}, {"dropped", 3}}}}},
                {"collapsed", collapsed && s > 120 ? json{1} : json::array()}};
    out.push_back(j);
  }
  return out;
}

}  // namespace

TEST(ReportMoe, HeatMapPerLayerBinnedToAtMostAHundredColumns) {
  const fs::path dir = fresh_dir("binned");
  const std::string html = render(dir, moe_run(150));
  EXPECT_NE(html.find("<h2>Mixture of experts: expert load</h2>"), std::string::npos);
  EXPECT_EQ(count(html, "data-heatmap=\"moe-layer-"), 2);
  EXPECT_EQ(count(html, "<script"), 0);
  // 150 steps in bins of 2: 75 columns of 4 experts per layer.
  for (int layer : {0, 1}) {
    const std::string svg = heat_map(html, layer);
    ASSERT_FALSE(svg.empty()) << layer;
    EXPECT_NE(svg.find("data-columns=\"75\""), std::string::npos) << layer;
    EXPECT_NE(svg.find("(2 steps per column)"), std::string::npos) << layer;
    EXPECT_EQ(cells(svg).size(), 300u) << layer;
    EXPECT_EQ(count(svg, "<g class=\"column\">"), 75) << layer;
    EXPECT_NE(svg.find("<title>steps 149&ndash;150</title>"), std::string::npos) << layer;
    EXPECT_NE(svg.find("linearGradient"), std::string::npos) << layer;  // the colour scale
    EXPECT_NE(svg.find("25% fair (1/4)"), std::string::npos) << layer;
  }
  // Layer 0 is balanced: every cell at the fair share, the neutral colour.
  for (const auto& [share, fill] : cells(heat_map(html, 0))) {
    EXPECT_EQ(share, "0.2500");
    EXPECT_EQ(fill, "#f7f7f7");
  }
  // Layer 1: the 25 columns of steps 101-150 have expert 2 at share 1 (the darkest red) and the
  // others at 0 (the darkest blue); the 50 before are balanced.
  const auto c1 = cells(heat_map(html, 1));
  ASSERT_EQ(c1.size(), 300u);
  int darkest_red = 0;
  for (size_t k = 0; k < c1.size(); ++k) {
    const size_t column = k / 4, expert = k % 4;
    if (column < 50) {
      EXPECT_EQ(c1[k].second, "#f7f7f7") << k;
    } else if (expert == 2) {
      EXPECT_EQ(c1[k].first, "1.0000") << k;
      EXPECT_EQ(c1[k].second, "#b2182b") << k;
      ++darkest_red;
    } else {
      EXPECT_EQ(c1[k].first, "0.0000") << k;
      EXPECT_EQ(c1[k].second, "#2166ac") << k;
    }
  }
  EXPECT_EQ(darkest_red, 25);
  // The last step's table: layer 1's 128 assignments on one expert, its own losses.
  EXPECT_NE(html.find("<tr><td>0</td><td>4</td><td>32</td><td>32</td><td>32</td><td>25%</td>"
                      "<td>1</td><td>0.25</td><td>0</td></tr>"),
            std::string::npos);
  EXPECT_NE(html.find("<tr><td>1</td><td>4</td><td>0</td><td>32</td><td>128</td><td>100%</td>"
                      "<td>4</td><td>0.25</td><td>3</td></tr>"),
            std::string::npos);
  EXPECT_NE(html.find("The collapsed-router detector fired: layer 1 at 30 step(s)."),
            std::string::npos);
}

TEST(ReportMoe, FewStepsGetAColumnEach) {
  const fs::path dir = fresh_dir("few");
  std::vector<json> run = moe_run(30);
  run.erase(run.begin() + 10);  // a step without the record (a line lost) is no column
  const std::string html = render(dir, run);
  const std::string svg = heat_map(html, 0);
  EXPECT_NE(svg.find("data-columns=\"29\""), std::string::npos);
  EXPECT_EQ(cells(svg).size(), 29u * 4u);
  EXPECT_EQ(svg.find("steps per column"), std::string::npos);
  EXPECT_NE(svg.find("<title>step 12</title>"), std::string::npos);
  EXPECT_EQ(html.find("collapsed-router detector fired"), std::string::npos);
}

TEST(ReportMoe, ManyLayersAndExpertsGetFewerColumns) {
  // 24 layers x 128 experts: the section's cell budget (120000) leaves 39 columns per map, so
  // 100 steps go in bins of 3 (34 columns) rather than a page of 100 x 3072 cells.
  const fs::path dir = fresh_dir("budget");
  std::vector<json> run;
  for (int s = 1; s <= 100; ++s) {
    json j = record(s);
    j["moe"] = {{"tokens_per_expert", json::array()}};
    for (int l = 0; l < 24; ++l) j["moe"]["tokens_per_expert"].push_back(std::vector<int>(128, 2));
    run.push_back(j);
  }
  const std::string html = render(dir, run);
  EXPECT_EQ(count(html, "data-heatmap=\"moe-layer-"), 24);
  EXPECT_NE(heat_map(html, 23).find("data-columns=\"34\""), std::string::npos);
  EXPECT_EQ(count(html, "<rect class=\"cell\""), 24 * 34 * 128);
}

TEST(ReportMoe, DenseRunHasNoSection) {
  const fs::path dir = fresh_dir("dense");
  std::vector<json> run;
  for (int s = 1; s <= 20; ++s) run.push_back(record(s));
  const std::string html = render(dir, run);
  EXPECT_NE(html.find("<h2>Training</h2>"), std::string::npos);
  EXPECT_EQ(html.find("expert load"), std::string::npos);
  EXPECT_EQ(html.find("data-heatmap"), std::string::npos);
  EXPECT_EQ(report::moe_section({{1, record(1)}}), "");
}

TEST(ReportMoe, ShareColourScale) {
  using report::share_color;
  EXPECT_EQ(share_color(0.25, 4), "#f7f7f7");      // fair share: neutral
  EXPECT_EQ(share_color(1.0, 4), "#b2182b");       // everything on one expert: darkest red
  EXPECT_EQ(share_color(0.0, 4), "#2166ac");       // none: darkest blue
  EXPECT_EQ(share_color(1.0 / 16, 4), "#2166ac");  // 1/experts of the fair share
  EXPECT_EQ(share_color(1.0 / 64, 64), "#f7f7f7");
  EXPECT_EQ(share_color(1.0, 64), "#b2182b");
  EXPECT_EQ(share_color(NAN, 4), "#cccccc");
  EXPECT_EQ(share_color(0.7, 1), "#f7f7f7");  // one expert is always at its fair share
  EXPECT_NE(share_color(0.5, 4), "#f7f7f7");  // in between: neither end
  EXPECT_NE(share_color(0.5, 4), "#b2182b");
  // Red grows with the share: the green channel falls monotonically above the fair share.
  int last_green = 256;
  for (double s = 0.25; s <= 1.0; s += 0.05) {
    const int green = std::stoi(share_color(s, 4).substr(3, 2), nullptr, 16);
    EXPECT_LE(green, last_green) << s;
    last_green = green;
  }
}

}  // namespace strata
