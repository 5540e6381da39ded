// Passes the launcher's stdout and stderr through to ours unchanged (rank 0's console output),
// appends both to RUN_DIR/launch.log, and keeps the lines that report failures (mpirun's and
// srun's summaries) for parse_failure: a long run's output is never held in memory.
#pragma once
#include <deque>
#include <string>
#include <vector>

namespace strata::launch {

class OutputTee {
 public:
  // log_fd: where everything is appended too (-1: nowhere). Not owned.
  explicit OutputTee(int log_fd) : log_fd_(log_fd) {}

  // Adds a pipe to read (owned by the caller) and the descriptor its bytes are copied to.
  void add(int from_fd, int to_fd);

  // Waits up to timeout_ms for output and copies what came. False once every pipe is closed.
  bool pump(int timeout_ms);

  // The failure report lines seen so far, joined with newlines.
  std::string report() const;

 private:
  struct Stream {
    int from = -1, to = -1;
    bool open = true;
    std::string partial;  // the line being assembled
  };
  void consume(Stream& s, const char* data, size_t size);
  void keep_line(const std::string& line);

  int log_fd_;
  std::vector<Stream> streams_;
  std::deque<std::string> report_;  // the latest kMaxReportLines
};

}  // namespace strata::launch
