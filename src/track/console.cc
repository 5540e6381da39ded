#include "track/console.h"

#include <unistd.h>

#include <cstdio>

#include "core/error.h"

namespace strata {

std::string format_duration(double seconds) {
  if (seconds < 0) seconds = 0;
  const auto s = static_cast<int64_t>(seconds + 0.5);
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%lldh%02lldm", static_cast<long long>(s / 3600),
                  static_cast<long long>((s / 60) % 60));
  else
    std::snprintf(buf, sizeof buf, "%lldm%02llds", static_cast<long long>(s / 60),
                  static_cast<long long>(s % 60));
  return buf;
}

ConsoleProgress::ConsoleProgress(int64_t every)
    : tty_(isatty(fileno(stderr)) != 0), every_(every < 1 ? 1 : every) {}

std::string ConsoleProgress::format(const ProgressInfo& i) const {
  const double eta = i.seconds_per_step * static_cast<double>(i.total_steps - i.step);
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "step %5lld/%lld | loss %.4f | lr %.2e | norm %.3f | %.0f tok/s | mfu %.1f%% | "
                "eta %s",
                static_cast<long long>(i.step), static_cast<long long>(i.total_steps), i.loss, i.lr,
                i.grad_norm, i.tokens_per_s, 100.0 * i.mfu, format_duration(eta).c_str());
  return buf;
}

void ConsoleProgress::update(const ProgressInfo& info) {
  if (tty_) {
    const int width = 28;
    const int filled = static_cast<int>(width * info.step / std::max<int64_t>(1, info.total_steps));
    std::string bar(static_cast<size_t>(filled), '#');
    bar.resize(width, '.');
    std::fprintf(stderr, "\r[%s] %s\033[K", bar.c_str(), format(info).c_str());
    std::fflush(stderr);
    line_open_ = true;
  } else if (info.step % every_ == 0 || info.step == info.total_steps || info.step == 1) {
    std::fprintf(stderr, "%s\n", format(info).c_str());
  }
}

void ConsoleProgress::message(const std::string& line) {
  if (line_open_) std::fprintf(stderr, "\n");
  line_open_ = false;
  std::fprintf(stderr, "%s\n", line.c_str());
}

void ConsoleProgress::finish() {
  if (line_open_) std::fprintf(stderr, "\n");
  line_open_ = false;
}

}  // namespace strata
