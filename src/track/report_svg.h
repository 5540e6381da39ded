// Line and stacked-area plots as inline SVG (no scripts, no network): axes with "nice" ticks,
// tick labels, axis labels, a legend, and one <path class="series"> per series, so the page a
// report writes is self-contained and a test can count what was drawn.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace strata::report {

struct Series {
  std::string name;
  std::string color;         // CSS color
  std::vector<double> x, y;  // the same length; a non-finite y leaves a gap
  bool markers = false;      // a dot at each point (sparse series, such as val_loss)
};

struct PlotOptions {
  std::string id;  // the svg's data-plot attribute
  std::string title, x_label, y_label;
  bool stacked = false;      // stacked areas, first series at the bottom (x shared by all)
  bool y_from_zero = false;  // the y axis includes 0
  int width = 640, height = 300;
  int max_points = 1500;  // longer series are averaged in buckets down to this many points
  bool integer_x = true;  // x ticks at whole numbers (steps)
  double y_max = 0;       // > 0: the y axis ends here; higher values are cut at the plot's edge
};

// The SVG element; a short note instead when no series has a finite point.
std::string svg_plot(const PlotOptions& options, const std::vector<Series>& series);

// Text for HTML (and SVG) element content and attribute values.
std::string html_escape(std::string_view text);

// A palette of distinguishable colors, cycled by index.
const char* palette(size_t index);

}  // namespace strata::report
