// How the planner writes quantities for people: bytes in binary units (device memory is sold in
// GiB: an "80 GB" A100 holds 80 GiB), times in the unit that keeps 3 significant digits.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>

namespace strata {

inline std::string format_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = 0;
  double v = bytes < 0 ? -bytes : bytes;
  while (v >= 1024 && u < 5) {
    v /= 1024;
    ++u;
  }
  char buf[48];
  std::snprintf(buf, sizeof buf, "%s%.*f %s", bytes < 0 ? "-" : "", v < 10 && u > 0 ? 2 : 1, v,
                units[u]);
  return buf;
}

inline std::string format_seconds(double s) {
  char buf[48];
  if (s >= 1)
    std::snprintf(buf, sizeof buf, "%.3g s", s);
  else if (s >= 1e-3)
    std::snprintf(buf, sizeof buf, "%.3g ms", s * 1e3);
  else
    std::snprintf(buf, sizeof buf, "%.3g us", s * 1e6);
  return buf;
}

// 1234567 -> "1.23M"
inline std::string format_count(double n) {
  const char* units[] = {"", "K", "M", "B", "T"};
  int u = 0;
  while (n >= 1000 && u < 4) {
    n /= 1000;
    ++u;
  }
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.3g%s", n, units[u]);
  return buf;
}

}  // namespace strata
