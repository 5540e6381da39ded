// Detectors over what every step reports: loss spikes (a z-score over a moving window),
// stragglers (a rank's compute time against the median), diverging replicas (a checksum that
// disagrees with the others). Pure functions and small state; the trainer feeds them.
#pragma once
#include <cstddef>
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

// Ranks whose time exceeds factor x the (lower) median of all and the median by more than
// `floor_s` (factor <= 0: none).
std::vector<int> above_median(const std::vector<float>& seconds, double factor, double floor_s);
// Stragglers: compute times above_median with a floor of 50 ms, which keeps scheduling noise on
// tiny steps from naming anyone.
std::vector<int> stragglers(const std::vector<float>& seconds, double factor);
// Ranks behind a slow link: link probe scores (comm/link_probe.h) above_median with a floor of
// 10 ms (a 256 KiB exchange takes well under 1 ms on any working link).
std::vector<int> slow_link_ranks(const std::vector<float>& scores, double factor);

// A step whose communication suddenly takes longer: the world's longest wait (exposed
// communication, pipeline bubble and optimizer, all of which a slow link stretches while compute
// stays put) above factor x the lower median of the last `window` steps' and 20 ms above it,
// once `window / 4` steps are known. A slow link slows every rank's wait alike, so this says only
// that something in the network changed; a link probe (comm/link_probe.h) then says where.
// Every step joins the window, so a link that stays slow becomes the new normal after about
// window / 2 steps instead of probing for ever.
class CommSlowdownDetector {
 public:
  CommSlowdownDetector(double factor, int64_t window);
  bool is_slowdown(float wait_s);
  double median() const { return median_; }  // of the window before the last step checked

 private:
  double factor_;
  size_t window_;
  std::vector<float> recent_;  // a ring of the last `window` waits
  size_t next_ = 0;
  double median_ = 0;
};

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
