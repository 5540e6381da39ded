#include "track/http_client.h"

#include <curl/curl.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>

#include "core/error.h"

namespace strata::http {

namespace {

// curl_global_init is not thread-safe: once, before the first handle.
void global_init() {
  static std::once_flag once;
  std::call_once(once, [] {
    const CURLcode rc = curl_global_init(CURL_GLOBAL_DEFAULT);
    STRATA_CHECK(rc == CURLE_OK, "libcurl: ", curl_easy_strerror(rc));
  });
}

struct CurlDeleter {
  void operator()(CURL* c) const { curl_easy_cleanup(c); }
};
struct SlistDeleter {
  void operator()(curl_slist* l) const { curl_slist_free_all(l); }
};
struct FileCloser {
  void operator()(FILE* f) const { std::fclose(f); }
};

size_t append_body(char* data, size_t size, size_t count, void* out) {
  static_cast<std::string*>(out)->append(data, size * count);
  return size * count;
}

// What one attempt needs beyond the URL: the body from memory or from a file.
struct Body {
  const std::string* text = nullptr;
  const std::string* file = nullptr;
};

// Failures a new attempt can fix: nothing reached, nothing came back in time, the link broke.
bool transient(CURLcode rc) {
  switch (rc) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
      return true;
    default:
      return false;
  }
}

bool transient(int status) {
  return status == 429 || status == 502 || status == 503 || status == 504;
}

// What to do about a failure, beyond libcurl's words.
std::string advice(CURLcode rc) {
  switch (rc) {
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CACERT_BADFILE:
      return "; the server's TLS certificate was not accepted: set "
             "MLFLOW_TRACKING_SERVER_CERT_PATH "
             "to the CA certificate that signed it (or MLFLOW_TRACKING_INSECURE_TLS=true for a "
             "test server)";
    case CURLE_SSL_CONNECT_ERROR:
      return "; the TLS handshake failed (is the server speaking https on this port?)";
    case CURLE_COULDNT_RESOLVE_HOST:
      return "; check the host name of the tracking URI";
    case CURLE_COULDNT_CONNECT:
      return "; is the server running, and reachable (http_proxy / https_proxy / no_proxy)?";
    default:
      return "";
  }
}

// One attempt; `error` is set (and the status left 0) when the transfer failed.
Response attempt(const Url& url, const std::string& method, const std::string& target,
                 const Body& body, const std::string& content_type, double timeout_s,
                 const ClientOptions& o, CURLcode* error, std::string* error_text) {
  global_init();
  std::unique_ptr<CURL, CurlDeleter> c(curl_easy_init());
  STRATA_CHECK(c != nullptr, "libcurl: cannot create a handle");
  CURL* h = c.get();
  Response r;
  char message[CURL_ERROR_SIZE] = {0};
  const std::string full = url.origin() + url.path + target;
  curl_easy_setopt(h, CURLOPT_URL, full.c_str());
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, message);
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);  // no SIGALRM from resolver timeouts (threads)
  curl_easy_setopt(h, CURLOPT_USERAGENT, "strata");
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, append_body);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &r.body);
  const long ms = static_cast<long>(timeout_s * 1e3);
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, ms);
  // Only http(s), also on redirects; no redirects followed (an API answer is never one).
  curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
  if (o.insecure_tls) {
    curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 0L);
    curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 0L);
  } else if (!o.ca_file.empty()) {
    curl_easy_setopt(h, CURLOPT_CAINFO, o.ca_file.c_str());
  }
  if (!o.username.empty() && o.bearer_token.empty()) {  // a token wins, as in MLflow's client
    curl_easy_setopt(h, CURLOPT_HTTPAUTH, CURLAUTH_BASIC);
    curl_easy_setopt(h, CURLOPT_USERNAME, o.username.c_str());
    curl_easy_setopt(h, CURLOPT_PASSWORD, o.password.c_str());
  }
  curl_slist* raw = nullptr;
  raw = curl_slist_append(raw, "Accept: application/json");
  raw = curl_slist_append(raw, "Expect:");  // no 100-continue round trip before a body
  std::string auth;
  if (!o.bearer_token.empty()) {
    auth = "Authorization: Bearer " + o.bearer_token;
    raw = curl_slist_append(raw, auth.c_str());
  }
  std::string type;
  const bool has_body = (body.text && !body.text->empty()) || body.file;
  if (has_body || method == "POST" || method == "PUT") {
    type = "Content-Type: " + content_type;
    raw = curl_slist_append(raw, type.c_str());
  }
  const std::unique_ptr<curl_slist, SlistDeleter> headers(raw);
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, raw);
  std::unique_ptr<FILE, FileCloser> in;
  if (body.file) {
    in.reset(std::fopen(body.file->c_str(), "rb"));
    if (!in) fail("cannot read '", *body.file, "': ", std::strerror(errno));
    std::fseek(in.get(), 0, SEEK_END);
    const long size = std::ftell(in.get());
    std::rewind(in.get());
    curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);  // PUT, streamed from the file
    curl_easy_setopt(h, CURLOPT_READDATA, in.get());
    curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(size));
    // A large file may take long: fail when nothing moves for timeout_s instead.
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, std::max(1L, ms / 1000));
  } else {
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, ms);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method.c_str());
    if (body.text && (!body.text->empty() || method == "POST" || method == "PUT")) {
      curl_easy_setopt(h, CURLOPT_POSTFIELDS, body.text->data());
      curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.text->size()));
    }
  }
  const CURLcode rc = curl_easy_perform(h);
  *error = rc;
  if (rc != CURLE_OK) {
    *error_text = message[0] ? message : curl_easy_strerror(rc);
    return {};
  }
  long status = 0;
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
  r.status = static_cast<int>(status);
  return r;
}

Response with_retries(const Url& url, const std::string& method, const std::string& target,
                      const Body& body, const std::string& content_type, double timeout_s,
                      const ClientOptions& o) {
  double wait = o.backoff_s;
  for (int attempt_no = 0;; ++attempt_no) {
    CURLcode rc = CURLE_OK;
    std::string text;
    Response r = attempt(url, method, target, body, content_type, timeout_s, o, &rc, &text);
    const bool last = attempt_no >= o.retries;
    if (rc == CURLE_OK && (!transient(r.status) || last)) return r;
    if (rc != CURLE_OK && (!transient(rc) || last)) {
      fail(method, " ", url.origin(), url.path, target, ": ", text, advice(rc),
           attempt_no > 0 ? cat(" (after ", attempt_no + 1, " attempts)") : std::string());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<int64_t>(wait * 1e3)));
    wait *= 2;
  }
}

bool env_true(const char* name) {
  const char* v = std::getenv(name);
  if (!v) return false;
  std::string s(v);
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s == "true" || s == "1" || s == "yes";
}

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

}  // namespace

std::string Url::origin() const {
  return cat(scheme, "://", host, ":", port);
}

Url parse_url(const std::string& text) {
  Url url;
  std::string rest;
  if (text.rfind("https://", 0) == 0) {
    url.scheme = "https";
    url.port = 443;
    rest = text.substr(8);
  } else if (text.rfind("http://", 0) == 0) {
    rest = text.substr(7);
  } else {
    fail("'", text, "' is not an http:// or https:// URL (expected http[s]://host[:port])");
  }
  const size_t slash = rest.find('/');
  if (slash != std::string::npos) {
    url.path = rest.substr(slash);
    rest.resize(slash);
  }
  // Not echoing the URL: it may hold a password.
  STRATA_CHECK(rest.find('@') == std::string::npos,
               "the tracking URI holds credentials (user@ or user:password@ before the host); "
               "remove them and set MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD (or "
               "MLFLOW_TRACKING_TOKEN) instead");
  while (!url.path.empty() && url.path.back() == '/') url.path.pop_back();
  const size_t colon = rest.rfind(':');
  if (colon != std::string::npos && rest.find(']') == std::string::npos) {
    const std::string port = rest.substr(colon + 1);
    STRATA_CHECK(!port.empty() && port.size() <= 5 &&
                     port.find_first_not_of("0123456789") == std::string::npos &&
                     std::stoi(port) <= 65535,
                 "'", text, "': bad port '", port, "'");
    url.port = std::stoi(port);
    rest.resize(colon);
  }
  STRATA_CHECK(!rest.empty(), "'", text, "': no host");
  url.host = rest;
  return url;
}

ClientOptions ClientOptions::from_mlflow_env() {
  ClientOptions o;
  o.bearer_token = env("MLFLOW_TRACKING_TOKEN");
  o.username = env("MLFLOW_TRACKING_USERNAME");
  o.password = env("MLFLOW_TRACKING_PASSWORD");
  o.insecure_tls = env_true("MLFLOW_TRACKING_INSECURE_TLS");
  o.ca_file = env("MLFLOW_TRACKING_SERVER_CERT_PATH");
  o.retries = 3;
  if (const std::string r = env("MLFLOW_HTTP_REQUEST_MAX_RETRIES"); !r.empty())
    o.retries = std::max(0, std::atoi(r.c_str()));
  if (const std::string b = env("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR"); !b.empty())
    o.backoff_s = std::max(0.0, std::atof(b.c_str()));
  return o;
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
                 const std::string& body, const std::string& content_type, double timeout_s,
                 const ClientOptions& options) {
  return with_retries(url, method, target, Body{&body, nullptr}, content_type, timeout_s, options);
}

Response put_file(const Url& url, const std::string& target, const std::string& file,
                  double timeout_s, const ClientOptions& options) {
  return with_retries(url, "PUT", target, Body{nullptr, &file}, "application/octet-stream",
                      timeout_s, options);
}

}  // namespace strata::http
