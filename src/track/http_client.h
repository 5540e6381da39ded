// HTTP(S) requests for tracking servers (MLflow), over libcurl: http:// and https:// with the
// certificate checked (against the system's CAs, or a given CA file), credentials (a bearer
// token or a user and password, sent only as headers, never in a URL or a message), the proxies
// of the environment (http_proxy, https_proxy, no_proxy, as libcurl reads them), a deadline on
// each attempt, and retries with exponential backoff for what a retry can fix (no connection, a
// timeout, HTTP 429 and 5xx). Errors are strata::Error naming what failed and what to set; an
// HTTP error status is a Response, not an exception.
#pragma once
#include <string>

namespace strata::http {

struct Url {
  std::string scheme = "http";  // "http" or "https"
  std::string host;
  int port = 80;               // 443 by default for https
  std::string path;            // the base path, without a trailing '/' ("" for the root)
  std::string origin() const;  // "https://host:port"
};

// "http[s]://host[:port][/base]"; throws naming what is wrong. Credentials in the URL are refused
// (they would end up in logs and configs): MLFLOW_TRACKING_USERNAME / _PASSWORD carry them.
Url parse_url(const std::string& text);

// How to reach a server beyond its URL.
struct ClientOptions {
  std::string bearer_token;        // "Authorization: Bearer ..." (empty: none)
  std::string username, password;  // HTTP basic authentication (empty username: none)
  bool insecure_tls = false;       // skip the certificate check (a test server; never by default)
  std::string ca_file;             // a CA certificate (PEM) to trust instead of the system's
  int retries = 0;                 // further attempts after a transient failure
  double backoff_s = 0.5;          // before the first retry; doubled for each next one

  // MLflow's environment, as its own client reads it: MLFLOW_TRACKING_TOKEN,
  // MLFLOW_TRACKING_USERNAME, MLFLOW_TRACKING_PASSWORD, MLFLOW_TRACKING_INSECURE_TLS ("true"),
  // MLFLOW_TRACKING_SERVER_CERT_PATH, MLFLOW_HTTP_REQUEST_MAX_RETRIES (default 3 here) and
  // MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR (seconds, default 0.5).
  static ClientOptions from_mlflow_env();
};

struct Response {
  int status = 0;
  std::string body;
};

// Sends METHOD url.path + target with `body` (Content-Type `content_type` when the body is not
// empty) and returns the response. Each attempt must finish within timeout_s. Throws
// strata::Error for a connection, TLS, timeout or protocol failure (after the retries).
Response request(const Url& url, const std::string& method, const std::string& target,
                 const std::string& body = "", const std::string& content_type = "application/json",
                 double timeout_s = 10, const ClientOptions& options = {});

// PUT of a file's bytes (streamed from disk, application/octet-stream). An attempt fails when
// nothing moves for timeout_s (a large file may take longer as a whole).
Response put_file(const Url& url, const std::string& target, const std::string& file,
                  double timeout_s = 60, const ClientOptions& options = {});

// Percent-encodes everything but unreserved characters (and '/' when keep_slash).
std::string url_encode(const std::string& s, bool keep_slash = false);

}  // namespace strata::http
