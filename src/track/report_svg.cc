#include "track/report_svg.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

namespace strata::report {

namespace {

constexpr int kLeft = 72, kRight = 160, kTop = 34, kBottom = 46;  // margins around the plot area

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

// 1, 2 or 5 times a power of ten, near range / target.
double nice_step(double range, int target) {
  const double raw = range / std::max(1, target);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double f = raw / mag;
  return (f < 1.5 ? 1.0 : f < 3.5 ? 2.0 : f < 7.5 ? 5.0 : 10.0) * mag;
}

std::string tick_label(double v, double step) {
  char buf[32];
  const double a = std::fabs(v);
  if (a < step * 1e-6) return "0";
  if (a >= 1e9) {
    std::snprintf(buf, sizeof buf, "%gG", v / 1e9);
  } else if (a >= 1e6) {
    std::snprintf(buf, sizeof buf, "%gM", v / 1e6);
  } else if (a >= 1e4) {
    std::snprintf(buf, sizeof buf, "%gk", v / 1e3);
  } else if (a < 1e-3) {
    std::snprintf(buf, sizeof buf, "%.2g", v);
  } else {
    const int decimals = std::max(0, static_cast<int>(-std::floor(std::log10(step) + 1e-9)));
    std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  }
  return buf;
}

struct Range {
  double lo = std::numeric_limits<double>::infinity();
  double hi = -std::numeric_limits<double>::infinity();
  void add(double v) {
    if (!std::isfinite(v)) return;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  bool empty() const { return !(lo <= hi); }
};

// Bucket means of (x, y) down to at most max_points points (NaNs ignored within a bucket).
void decimate(std::vector<double>& x, std::vector<double>& y, int max_points) {
  const size_t n = std::min(x.size(), y.size());
  x.resize(n);
  y.resize(n);
  if (max_points < 2 || n <= static_cast<size_t>(max_points)) return;
  const size_t k = (n + static_cast<size_t>(max_points) - 1) / static_cast<size_t>(max_points);
  std::vector<double> xs, ys;
  for (size_t b = 0; b < n; b += k) {
    double sx = 0, sy = 0;
    size_t cx = 0, cy = 0;
    for (size_t i = b; i < std::min(n, b + k); ++i) {
      sx += x[i];
      ++cx;
      if (std::isfinite(y[i])) {
        sy += y[i];
        ++cy;
      }
    }
    xs.push_back(sx / static_cast<double>(cx));
    ys.push_back(cy ? sy / static_cast<double>(cy) : std::numeric_limits<double>::quiet_NaN());
  }
  x.swap(xs);
  y.swap(ys);
}

}  // namespace

const char* palette(size_t index) {
  static const char* const kColors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                        "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
  return kColors[index % (sizeof kColors / sizeof kColors[0])];
}

std::string html_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string svg_plot(const PlotOptions& o, const std::vector<Series>& input) {
  std::vector<Series> series = input;
  for (Series& s : series) decimate(s.x, s.y, o.max_points);
  // Stacked: each series' y becomes the running sum (x is shared; missing values count as 0).
  std::vector<std::vector<double>> lower(series.size());
  if (o.stacked) {
    std::vector<double> sum;
    for (size_t i = 0; i < series.size(); ++i) {
      Series& s = series[i];
      sum.resize(std::max(sum.size(), s.y.size()), 0.0);
      lower[i].assign(sum.begin(), sum.begin() + static_cast<std::ptrdiff_t>(s.y.size()));
      for (size_t k = 0; k < s.y.size(); ++k) {
        sum[k] += std::isfinite(s.y[k]) ? s.y[k] : 0.0;
        s.y[k] = sum[k];
      }
    }
  }
  Range xr, yr;
  for (const Series& s : series)
    for (size_t k = 0; k < s.x.size(); ++k)
      if (std::isfinite(s.y[k])) {
        xr.add(s.x[k]);
        yr.add(s.y[k]);
      }
  if (xr.empty())
    return "<p class=\"empty\" data-plot=\"" + html_escape(o.id) + "\">" + html_escape(o.title) +
           ": no data</p>\n";
  if (o.y_from_zero || o.stacked) yr.add(0.0);
  if (o.y_max > 0 && o.y_max > yr.lo) yr.hi = std::min(yr.hi, o.y_max);
  if (xr.hi - xr.lo <= 0) {
    xr.lo -= 1;
    xr.hi += 1;
  }
  if (yr.hi - yr.lo <= std::fabs(yr.hi) * 1e-9) {
    const double pad = yr.hi == 0 ? 1.0 : std::fabs(yr.hi) * 0.1;
    yr.lo -= pad;
    yr.hi += pad;
  }
  const double xstep = std::max(o.integer_x ? 1.0 : 0.0, nice_step(xr.hi - xr.lo, 6));
  const double ystep = nice_step(yr.hi - yr.lo, 5);
  // The y axis extends to whole ticks; x stays at the data.
  const double y0 = std::floor(yr.lo / ystep + 1e-9) * ystep;
  const double y1 = std::ceil(yr.hi / ystep - 1e-9) * ystep;
  const double pw = o.width - kLeft - kRight, ph = o.height - kTop - kBottom;
  auto px = [&](double x) { return kLeft + (x - xr.lo) / (xr.hi - xr.lo) * pw; };
  auto py = [&](double y) { return kTop + (1.0 - (y - y0) / (y1 - y0)) * ph; };

  std::string s = "<svg class=\"plot\" data-plot=\"" + html_escape(o.id) +
                  "\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" + std::to_string(o.width) +
                  "\" height=\"" + std::to_string(o.height) + "\" viewBox=\"0 0 " +
                  std::to_string(o.width) + " " + std::to_string(o.height) + "\">\n";
  s += "<title>" + html_escape(o.title) + "</title>\n";
  s += "<rect x=\"0\" y=\"0\" width=\"" + std::to_string(o.width) + "\" height=\"" +
       std::to_string(o.height) + "\" fill=\"#ffffff\"/>\n";
  s += "<text class=\"title\" x=\"" + std::to_string(kLeft) + "\" y=\"20\">" +
       html_escape(o.title) + "</text>\n";
  // Grid, ticks and tick labels.
  s += "<g class=\"axis y\">\n";
  for (double v = y0; v <= y1 + ystep * 1e-6; v += ystep) {
    const std::string y = num(py(v));
    s += "<line x1=\"" + num(kLeft) + "\" x2=\"" + num(kLeft + pw) + "\" y1=\"" + y + "\" y2=\"" +
         y + "\" stroke=\"#e5e5e5\"/><text x=\"" + num(kLeft - 6) + "\" y=\"" + y +
         "\" dy=\"4\" text-anchor=\"end\">" + tick_label(v, ystep) + "</text>\n";
  }
  s += "</g>\n<g class=\"axis x\">\n";
  for (double v = std::ceil(xr.lo / xstep - 1e-9) * xstep; v <= xr.hi + xstep * 1e-6; v += xstep) {
    const std::string x = num(px(v));
    s += "<line x1=\"" + x + "\" x2=\"" + x + "\" y1=\"" + num(kTop + ph) + "\" y2=\"" +
         num(kTop + ph + 5) + "\" stroke=\"#444\"/><text x=\"" + x + "\" y=\"" +
         num(kTop + ph + 18) + "\" text-anchor=\"middle\">" + tick_label(v, xstep) + "</text>\n";
  }
  s += "</g>\n";
  s += "<rect x=\"" + num(kLeft) + "\" y=\"" + num(kTop) + "\" width=\"" + num(pw) +
       "\" height=\"" + num(ph) + "\" fill=\"none\" stroke=\"#444\"/>\n";
  s += "<text class=\"label\" x=\"" + num(kLeft + pw / 2) + "\" y=\"" + num(o.height - 8) +
       "\" text-anchor=\"middle\">" + html_escape(o.x_label) + "</text>\n";
  s += "<text class=\"label\" transform=\"translate(16," + num(kTop + ph / 2) +
       ") rotate(-90)\" text-anchor=\"middle\">" + html_escape(o.y_label) + "</text>\n";
  // The series: one path each (stacked: a closed area between its bounds), drawn back to front,
  // cut at the plot area.
  const std::string clip = "clip-" + html_escape(o.id);
  s += "<clipPath id=\"" + clip + "\"><rect x=\"" + num(kLeft) + "\" y=\"" + num(kTop) +
       "\" width=\"" + num(pw) + "\" height=\"" + num(ph) +
       "\"/></clipPath>\n<g clip-path=\"url(#" + clip + ")\">\n";
  for (size_t i = 0; i < series.size(); ++i) {
    const Series& se = series[i];
    std::string d;
    size_t points = 0;
    if (o.stacked) {
      for (size_t k = 0; k < se.x.size(); ++k) {
        d += (k == 0 ? "M" : " L") + num(px(se.x[k])) + "," + num(py(se.y[k]));
        ++points;
      }
      for (size_t k = se.x.size(); k-- > 0;)
        d += " L" + num(px(se.x[k])) + "," + num(py(lower[i][k]));
      if (!d.empty()) d += " Z";
    } else {
      bool pen_down = false;
      for (size_t k = 0; k < se.x.size(); ++k) {
        if (!std::isfinite(se.y[k])) {
          pen_down = false;
          continue;
        }
        d += (pen_down ? " L" : (d.empty() ? "M" : " M")) + num(px(se.x[k])) + "," +
             num(py(se.y[k]));
        pen_down = true;
        ++points;
      }
    }
    if (points == 0) continue;
    const std::string style =
        o.stacked ? "fill=\"" + se.color + "\" fill-opacity=\"0.85\" stroke=\"" + se.color + "\""
                  : "fill=\"none\" stroke=\"" + se.color + "\" stroke-width=\"1.8\"";
    s += "<path class=\"series\" data-series=\"" + html_escape(se.name) + "\" data-points=\"" +
         std::to_string(points) + "\" " + style + " d=\"" + d + "\"/>\n";
    if (se.markers)
      for (size_t k = 0; k < se.x.size(); ++k)
        if (std::isfinite(se.y[k]))
          s += "<circle class=\"marker\" cx=\"" + num(px(se.x[k])) + "\" cy=\"" + num(py(se.y[k])) +
               "\" r=\"3.5\" fill=\"" + se.color + "\"/>\n";
  }
  // Legend, in the right margin (stacked: top entry = top area).
  s += "</g>\n<g class=\"legend\">\n";
  for (size_t n = 0; n < series.size(); ++n) {
    const size_t i = o.stacked ? series.size() - 1 - n : n;
    const double y = kTop + 8 + 18.0 * static_cast<double>(n);
    s += "<rect x=\"" + num(kLeft + pw + 12) + "\" y=\"" + num(y - 8) +
         "\" width=\"12\" height=\"10\" fill=\"" + series[i].color + "\"/><text x=\"" +
         num(kLeft + pw + 28) + "\" y=\"" + num(y + 1) + "\">" + html_escape(series[i].name) +
         "</text>\n";
  }
  s += "</g>\n</svg>\n";
  return s;
}

}  // namespace strata::report
