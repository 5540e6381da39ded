#include "launch/output_tee.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>

#include "io/fd.h"
#include "launch/failure.h"

namespace strata::launch {

namespace {
constexpr size_t kMaxLine = 64 * 1024;     // a longer "line" is no launcher report
constexpr size_t kMaxReportLines = 10000;  // bounded even if a rank prints report-like text
}  // namespace

void OutputTee::add(int from_fd, int to_fd) {
  Stream s;
  s.from = from_fd;
  s.to = to_fd;
  streams_.push_back(std::move(s));
}

bool OutputTee::pump(int timeout_ms) {
  std::vector<pollfd> fds;
  std::vector<Stream*> owners;
  for (Stream& s : streams_)
    if (s.open) {
      fds.push_back({s.from, POLLIN, 0});
      owners.push_back(&s);
    }
  if (fds.empty()) return false;
  const int n = ::poll(fds.data(), fds.size(), timeout_ms);
  if (n <= 0) return true;  // timeout, or EINTR from a signal the caller will look at
  char buf[1 << 16];
  for (size_t i = 0; i < fds.size(); ++i) {
    if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
    const ssize_t got = ::read(fds[i].fd, buf, sizeof buf);
    if (got > 0) {
      consume(*owners[i], buf, static_cast<size_t>(got));
    } else if (got == 0 || (errno != EINTR && errno != EAGAIN)) {
      Stream& s = *owners[i];
      s.open = false;
      if (!s.partial.empty()) keep_line(s.partial);
      s.partial.clear();
    }
  }
  for (const Stream& s : streams_)
    if (s.open) return true;
  return false;
}

void OutputTee::consume(Stream& s, const char* data, size_t size) {
  // Write errors (a closed console, a full disk) must not stop supervision: ignored.
  (void)io::write_all(s.to, data, size);
  if (log_fd_ >= 0) (void)io::write_all(log_fd_, data, size);
  for (size_t i = 0; i < size; ++i) {
    if (data[i] == '\n') {
      keep_line(s.partial);
      s.partial.clear();
    } else if (s.partial.size() < kMaxLine) {
      s.partial += data[i];
    }
  }
}

void OutputTee::keep_line(const std::string& line) {
  if (!is_failure_report_line(line)) return;
  report_.push_back(line);
  if (report_.size() > kMaxReportLines) report_.pop_front();
}

std::string OutputTee::report() const {
  std::string out;
  for (const std::string& line : report_) out += line + "\n";
  return out;
}

}  // namespace strata::launch
