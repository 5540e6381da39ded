// A small HTTP/1.1 client over POSIX sockets, for tracking servers (MLflow) on http:// URLs:
// one connection per request (Connection: close), Content-Length request bodies (from memory or
// streamed from a file), Content-Length, chunked or read-to-close responses, and a deadline on
// every connect, send and receive so that a server that stops answering never stalls the
// caller for long. No TLS (put a proxy in front for https).
#pragma once
#include <string>

namespace strata::http {

struct Url {
  std::string host;
  int port = 80;
  std::string path;  // the base path, without a trailing '/' ("" for the root)
};

// "http://host[:port][/base]"; throws naming what is wrong (https:// is refused).
Url parse_url(const std::string& text);

struct Response {
  int status = 0;
  std::string body;
};

// Sends METHOD url.path + target with `body` (Content-Type `content_type` when the body is not
// empty) and returns the response. Throws strata::Error for a connection, timeout or protocol
// failure (an HTTP error status is a Response, not an exception).
Response request(const Url& url, const std::string& method, const std::string& target,
                 const std::string& body = "", const std::string& content_type = "application/json",
                 double timeout_s = 10);

// PUT of a file's bytes (streamed, application/octet-stream).
Response put_file(const Url& url, const std::string& target, const std::string& file,
                  double timeout_s = 60);

// Percent-encodes everything but unreserved characters (and '/' when keep_slash).
std::string url_encode(const std::string& s, bool keep_slash = false);

}  // namespace strata::http
