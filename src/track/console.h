// Console progress for rank 0: on a terminal, one line rewritten in place (step, loss, lr,
// tokens/s, MFU, ETA); otherwise plain lines every `every` steps, suitable for CI logs and files.
#pragma once
#include <cstdint>
#include <string>

namespace strata {

struct ProgressInfo {
  int64_t step = 0;  // 1-based step just finished
  int64_t total_steps = 0;
  double loss = 0, lr = 0, grad_norm = 0, tokens_per_s = 0, mfu = 0;
  double seconds_per_step = 0;  // smoothed
};

class ConsoleProgress {
 public:
  explicit ConsoleProgress(int64_t every);
  void update(const ProgressInfo& info);
  // Prints a full line (e.g. an evaluation result) without breaking the progress line.
  void message(const std::string& line);
  void finish();

 private:
  std::string format(const ProgressInfo& info) const;
  bool tty_;
  int64_t every_;
  bool line_open_ = false;
};

std::string format_duration(double seconds);

}  // namespace strata
