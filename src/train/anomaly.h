// Detectors over what every step reports: loss spikes (a z-score over a moving window),
// stragglers (a rank's compute time against the median), diverging replicas (a checksum that
// disagrees with the others). Pure functions and small state; the trainer feeds them.
#pragma once
#include <cstdint>
#include <vector>

namespace strata {

class LossSpikeDetector {
 public:
  LossSpikeDetector(int64_t window, int64_t warmup, double zscore);
  // True when `loss` lies more than zscore standard deviations above the mean of the last
  // `window` accepted losses (never during the first `warmup` losses). Spikes are not added to
  // the window, so one outlier does not widen it; everything else is.
  bool is_spike(double loss);
  // The z-score of the last loss checked (0 during warm-up).
  double last_zscore() const { return last_z_; }
  double mean() const;

 private:
  std::vector<double> ring_;
  int64_t count_ = 0;  // losses accepted so far
  int64_t warmup_;
  double zscore_, last_z_ = 0;
};

// The lower median (with two values, the smaller): the reference a straggler is measured against.
double lower_median(const std::vector<float>& values);

// Ranks whose time exceeds factor x the (lower) median of all (factor <= 0: none).
std::vector<int> stragglers(const std::vector<float>& seconds, double factor);

// A collapsed router (MoE families): in some layer, one expert took more than `fraction` of the
// tokens for `steps` steps in a row. It reports each collapse once, when its run of steps reaches
// `steps`, and again only after that layer recovered. A fraction at or below the fair share
// top_k / experts would call a balanced router collapsed: the detector is then off (active()).
class RouterCollapseDetector {
 public:
  struct Collapse {
    int64_t layer = 0, expert = 0;
    double fraction = 0;  // of the step's tokens routed to that expert
  };
  RouterCollapseDetector(double fraction, int64_t steps, int64_t experts, int64_t top_k);
  bool active() const { return active_; }
  // One step's assignments per expert of every MoE layer (StepResult::moe_tokens_per_expert).
  std::vector<Collapse> check(const std::vector<std::vector<int64_t>>& tokens_per_expert);

 private:
  double fraction_;
  int64_t steps_, top_k_;
  bool active_;
  std::vector<int64_t> run_;  // per layer: steps in a row over the fraction
};

// Ranks whose value differs from the most common one; when no value holds a strict majority
// (two replicas that disagree), every rank.
std::vector<int> outliers(const std::vector<uint64_t>& values);

}  // namespace strata
