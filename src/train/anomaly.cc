#include "train/anomaly.h"

#include <algorithm>
#include <cmath>
#include <map>

namespace strata {

LossSpikeDetector::LossSpikeDetector(int64_t window, int64_t warmup, double zscore)
    : ring_(static_cast<size_t>(std::max<int64_t>(window, 2)), 0.0),
      warmup_(warmup),
      zscore_(zscore) {}

double LossSpikeDetector::mean() const {
  const int64_t n = std::min<int64_t>(count_, static_cast<int64_t>(ring_.size()));
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += ring_[static_cast<size_t>(i)];
  return n > 0 ? sum / static_cast<double>(n) : 0.0;
}

bool LossSpikeDetector::is_spike(double loss) {
  const int64_t n = std::min<int64_t>(count_, static_cast<int64_t>(ring_.size()));
  last_z_ = 0;
  if (count_ >= std::max<int64_t>(warmup_, 2) && n >= 2) {
    const double m = mean();
    double var = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double d = ring_[static_cast<size_t>(i)] - m;
      var += d * d;
    }
    // A floor on the deviation: a perfectly flat window must not turn noise into spikes.
    const double sd = std::max(std::sqrt(var / static_cast<double>(n - 1)), 1e-3 * std::abs(m));
    last_z_ = sd > 0 ? (loss - m) / sd : 0.0;
    if (!std::isfinite(loss) || last_z_ > zscore_) return true;
  }
  ring_[static_cast<size_t>(count_ % static_cast<int64_t>(ring_.size()))] = loss;
  ++count_;
  return false;
}

double lower_median(const std::vector<float>& values) {
  if (values.empty()) return 0.0;
  std::vector<float> sorted = values;
  std::sort(sorted.begin(), sorted.end());
  return sorted[(sorted.size() - 1) / 2];
}

std::vector<int> above_median(const std::vector<float>& seconds, double factor, double floor_s) {
  std::vector<int> out;
  if (factor <= 0 || seconds.size() < 2) return out;
  const double median = lower_median(seconds);
  for (size_t i = 0; i < seconds.size(); ++i)
    if (seconds[i] > factor * median && seconds[i] - median > floor_s)
      out.push_back(static_cast<int>(i));
  return out;
}

std::vector<int> stragglers(const std::vector<float>& seconds, double factor) {
  return above_median(seconds, factor, 0.05);
}

std::vector<int> slow_link_ranks(const std::vector<float>& scores, double factor) {
  return above_median(scores, factor, 0.01);
}

CommSlowdownDetector::CommSlowdownDetector(double factor, int64_t window)
    : factor_(factor), window_(static_cast<size_t>(std::max<int64_t>(window, 4))) {}

bool CommSlowdownDetector::is_slowdown(float wait_s) {
  const bool known = recent_.size() >= window_ / 4;
  median_ = lower_median(recent_);
  const bool slow = factor_ > 0 && known && wait_s > factor_ * median_ && wait_s - median_ > 0.02;
  if (recent_.size() < window_) {
    recent_.push_back(wait_s);
  } else {
    recent_[next_] = wait_s;
    next_ = (next_ + 1) % window_;
  }
  return slow;
}

std::vector<int> outliers(const std::vector<uint64_t>& values) {
  std::map<uint64_t, int> count;
  for (uint64_t v : values) ++count[v];
  uint64_t majority = 0;
  int best = -1;
  for (const auto& [v, c] : count)
    if (c > best) {
      best = c;
      majority = v;
    }
  int holders_of_best = 0;
  for (const auto& [v, c] : count) holders_of_best += c == best;
  std::vector<int> out;
  for (size_t i = 0; i < values.size(); ++i)
    if (values[i] != majority || (holders_of_best > 1 && count.size() > 1))
      out.push_back(static_cast<int>(i));
  return out;
}

RouterCollapseDetector::RouterCollapseDetector(double fraction, int64_t steps, int64_t experts,
                                               int64_t top_k)
    : fraction_(fraction),
      steps_(steps),
      top_k_(std::max<int64_t>(1, top_k)),
      active_(steps > 0 && experts > 0 &&
              fraction > static_cast<double>(top_k) / static_cast<double>(experts)) {}

std::vector<RouterCollapseDetector::Collapse> RouterCollapseDetector::check(
    const std::vector<std::vector<int64_t>>& tokens_per_expert) {
  std::vector<Collapse> found;
  if (!active_) return found;
  run_.resize(tokens_per_expert.size(), 0);
  for (size_t l = 0; l < tokens_per_expert.size(); ++l) {
    const std::vector<int64_t>& counts = tokens_per_expert[l];
    int64_t total = 0, top = 0;
    size_t top_expert = 0;
    for (size_t e = 0; e < counts.size(); ++e) {
      total += counts[e];
      if (counts[e] > top) top = counts[e], top_expert = e;
    }
    // Each token makes top_k assignments: the tokens are total / top_k.
    const double tokens = static_cast<double>(total) / static_cast<double>(top_k_);
    const double share = tokens > 0 ? static_cast<double>(top) / tokens : 0.0;
    run_[l] = share > fraction_ ? run_[l] + 1 : 0;
    if (run_[l] == steps_)
      found.push_back({static_cast<int64_t>(l), static_cast<int64_t>(top_expert), share});
  }
  return found;
}

}  // namespace strata
