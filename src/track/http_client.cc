#include "track/http_client.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <vector>

#include "core/error.h"

namespace strata::http {

namespace {

using Clock = std::chrono::steady_clock;

class Socket {
 public:
  explicit Socket(int fd) : fd_(fd) {}
  ~Socket() {
    if (fd_ >= 0) ::close(fd_);
  }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  int fd() const { return fd_; }

 private:
  int fd_;
};

// Milliseconds left before `deadline` (at least 0).
int ms_left(Clock::time_point deadline) {
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left > 0 ? static_cast<int>(left) : 0;
}

void wait_for(int fd, short events, Clock::time_point deadline, const std::string& what) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int rc = ::poll(&p, 1, ms_left(deadline));
    if (rc > 0) return;
    if (rc == 0) fail(what, ": timed out");
    if (errno != EINTR) fail(what, ": poll: ", std::strerror(errno));
  }
}

int connect_to(const Url& url, Clock::time_point deadline) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(url.port);
  const int rc = ::getaddrinfo(url.host.c_str(), port.c_str(), &hints, &found);
  if (rc != 0) fail("cannot resolve '", url.host, "': ", ::gai_strerror(rc));
  std::string last_error = "no address";
  for (addrinfo* a = found; a; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) continue;
    if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0 || errno == EINPROGRESS) {
      try {
        wait_for(fd, POLLOUT, deadline, "connect");
        int err = 0;
        socklen_t len = sizeof err;
        ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
        if (err == 0) {
          ::freeaddrinfo(found);
          return fd;
        }
        last_error = std::strerror(err);
      } catch (const Error& e) {
        last_error = e.what();
      }
    } else {
      last_error = std::strerror(errno);
    }
    ::close(fd);
  }
  ::freeaddrinfo(found);
  fail("cannot connect to ", url.host, ":", url.port, ": ", last_error);
}

void send_all(int fd, const char* data, size_t size, Clock::time_point deadline) {
  while (size > 0) {
    const ssize_t n = ::send(fd, data, size, MSG_NOSIGNAL);
    if (n > 0) {
      data += n;
      size -= static_cast<size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      wait_for(fd, POLLOUT, deadline, "send");
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      fail("send: ", std::strerror(errno));
    }
  }
}

std::string receive_all(int fd, Clock::time_point deadline) {
  std::string in;
  char buf[16384];
  for (;;) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n > 0) {
      in.append(buf, static_cast<size_t>(n));
    } else if (n == 0) {
      return in;
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      wait_for(fd, POLLIN, deadline, "waiting for the response");
    } else if (errno != EINTR) {
      fail("recv: ", std::strerror(errno));
    }
  }
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string dechunk(const std::string& body) {
  std::string out;
  size_t at = 0;
  for (;;) {
    const size_t eol = body.find("\r\n", at);
    STRATA_CHECK(eol != std::string::npos, "malformed chunked response (no chunk size line)");
    const size_t size = std::stoul(body.substr(at, eol - at), nullptr, 16);
    at = eol + 2;
    if (size == 0) return out;
    STRATA_CHECK(at + size <= body.size(), "truncated chunked response");
    out.append(body, at, size);
    at += size + 2;  // the chunk's CRLF
  }
}

Response parse_response(const std::string& raw) {
  const size_t head_end = raw.find("\r\n\r\n");
  STRATA_CHECK(head_end != std::string::npos && raw.rfind("HTTP/1.", 0) == 0,
               "not an HTTP response (", raw.size(), " bytes)");
  Response r;
  r.status = std::atoi(raw.c_str() + raw.find(' ') + 1);
  bool chunked = false;
  long length = -1;
  size_t at = raw.find("\r\n") + 2;
  while (at < head_end) {
    const size_t eol = raw.find("\r\n", at);
    const std::string line = raw.substr(at, eol - at);
    at = eol + 2;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string name = lower(line.substr(0, colon));
    std::string value = line.substr(colon + 1);
    value.erase(0, value.find_first_not_of(' '));
    if (name == "transfer-encoding" && lower(value).find("chunked") != std::string::npos)
      chunked = true;
    if (name == "content-length") length = std::atol(value.c_str());
  }
  r.body = raw.substr(head_end + 4);
  if (chunked) {
    r.body = dechunk(r.body);
  } else if (length >= 0) {
    STRATA_CHECK(r.body.size() >= static_cast<size_t>(length),
                 "truncated response: ", r.body.size(), " of ", length, " bytes");
    r.body.resize(static_cast<size_t>(length));
  }
  return r;
}

std::string head(const Url& url, const std::string& method, const std::string& target,
                 const std::string& content_type, size_t length) {
  std::string h =
      cat(method, " ", url.path, target, " HTTP/1.1\r\nHost: ", url.host, ":", url.port,
          "\r\nUser-Agent: strata\r\nAccept: application/json\r\n", "Connection: close\r\n");
  if (length > 0 || method == "POST" || method == "PUT")
    h += cat("Content-Type: ", content_type, "\r\nContent-Length: ", length, "\r\n");
  return h + "\r\n";
}

}  // namespace

Url parse_url(const std::string& text) {
  const std::string scheme = "http://";
  STRATA_CHECK(text.rfind("https://", 0) != 0, "'", text,
               "': https is not supported (use http://, e.g. through a local proxy)");
  STRATA_CHECK(text.rfind(scheme, 0) == 0, "'", text,
               "' is not an http:// URL (expected http://host:port)");
  std::string rest = text.substr(scheme.size());
  Url url;
  const size_t slash = rest.find('/');
  if (slash != std::string::npos) {
    url.path = rest.substr(slash);
    rest.resize(slash);
  }
  while (!url.path.empty() && url.path.back() == '/') url.path.pop_back();
  const size_t colon = rest.rfind(':');
  if (colon != std::string::npos && rest.find(']') == std::string::npos) {
    const std::string port = rest.substr(colon + 1);
    STRATA_CHECK(!port.empty() && port.size() <= 5 &&
                     port.find_first_not_of("0123456789") == std::string::npos,
                 "'", text, "': bad port '", port, "'");
    url.port = std::stoi(port);
    rest.resize(colon);
  }
  STRATA_CHECK(!rest.empty(), "'", text, "': no host");
  url.host = rest;
  return url;
}

std::string url_encode(const std::string& s, bool keep_slash) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || (keep_slash && c == '/'))
      out += static_cast<char>(c);
    else
      out += {'%', hex[c >> 4], hex[c & 15]};
  }
  return out;
}

Response request(const Url& url, const std::string& method, const std::string& target,
                 const std::string& body, const std::string& content_type, double timeout_s) {
  const auto deadline =
      Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1e3));
  const Socket s(connect_to(url, deadline));
  const std::string h = head(url, method, target, content_type, body.size());
  send_all(s.fd(), h.data(), h.size(), deadline);
  send_all(s.fd(), body.data(), body.size(), deadline);
  return parse_response(receive_all(s.fd(), deadline));
}

Response put_file(const Url& url, const std::string& target, const std::string& file,
                  double timeout_s) {
  const int in = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (in < 0) fail("cannot read '", file, "': ", std::strerror(errno));
  const Socket f(in);
  struct stat st {};
  ::fstat(in, &st);
  const auto deadline =
      Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1e3));
  const Socket s(connect_to(url, deadline));
  const std::string h =
      head(url, "PUT", target, "application/octet-stream", static_cast<size_t>(st.st_size));
  send_all(s.fd(), h.data(), h.size(), deadline);
  std::vector<char> buf(1 << 20);
  for (;;) {
    const ssize_t n = ::read(in, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail("reading '", file, "': ", std::strerror(errno));
    if (n == 0) break;
    send_all(s.fd(), buf.data(), static_cast<size_t>(n), deadline);
  }
  return parse_response(receive_all(s.fd(), deadline));
}

}  // namespace strata::http
