// The HTTP client and the MLflow logger against a scripted server on 127.0.0.1: request
// framing, Content-Length and chunked responses, timeouts and refused connections, and the
// MLflow REST calls a run makes (experiment, run, params, metrics, artifacts, status).
// tests/track/check_mlflow.py runs a real `mlflow server`.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "io/atomic_file.h"
#include "io/temp_dir.h"
#include "track/http_client.h"
#include "track/mlflow.h"

namespace strata {
namespace {

struct Request {
  std::string method, target, body;
};

// Accepts connections on 127.0.0.1 (a free port) and answers each request with handler(request)
// (the raw response text), until destroyed.
class FakeServer {
 public:
  explicit FakeServer(std::function<std::string(const Request&)> handler)
      : handler_(std::move(handler)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    socklen_t len = sizeof addr;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    ::listen(fd_, 16);
    thread_ = std::thread([this] { serve(); });
  }
  ~FakeServer() {
    stop_ = true;
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::vector<Request> requests() {
    std::lock_guard<std::mutex> lock(mutex_);
    return requests_;
  }

 private:
  void serve() {
    while (!stop_) {
      const int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      std::string in;
      char buf[4096];
      size_t need = std::string::npos;
      while (in.size() < need) {
        const ssize_t n = ::recv(c, buf, sizeof buf, 0);
        if (n <= 0) break;
        in.append(buf, static_cast<size_t>(n));
        const size_t end = in.find("\r\n\r\n");
        if (end != std::string::npos && need == std::string::npos) {
          const size_t cl = in.find("Content-Length: ");
          need =
              end + 4 + (cl != std::string::npos && cl < end ? std::stoul(in.substr(cl + 16)) : 0);
        }
      }
      Request r;
      const size_t sp = in.find(' ');
      r.method = in.substr(0, sp);
      r.target = in.substr(sp + 1, in.find(' ', sp + 1) - sp - 1);
      const size_t end = in.find("\r\n\r\n");
      if (end != std::string::npos) r.body = in.substr(end + 4);
      {
        std::lock_guard<std::mutex> lock(mutex_);
        requests_.push_back(r);
      }
      const std::string out = handler_(r);
      if (!out.empty()) ::send(c, out.data(), out.size(), MSG_NOSIGNAL);
      ::close(c);
    }
  }

  std::function<std::string(const Request&)> handler_;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::mutex mutex_;
  std::vector<Request> requests_;
  std::thread thread_;
};

std::string json_response(int status, const std::string& body) {
  return "HTTP/1.1 " + std::to_string(status) +
         " X\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\n\r\n" + body;
}

TEST(Http, ParseUrl) {
  const http::Url u = http::parse_url("http://tracking.example:5001/base/");
  EXPECT_EQ(u.host, "tracking.example");
  EXPECT_EQ(u.port, 5001);
  EXPECT_EQ(u.path, "/base");
  EXPECT_EQ(http::parse_url("http://localhost").port, 80);
  const http::Url s = http::parse_url("https://mlflow.example/api");
  EXPECT_EQ(s.scheme, "https");
  EXPECT_EQ(s.port, 443);
  EXPECT_EQ(s.origin(), "https://mlflow.example:443");
  // Credentials in the URL are refused, and the message does not repeat them.
  try {
    http::parse_url("https://alice:s3cret@mlflow.example");
    FAIL() << "credentials accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).find("s3cret"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("MLFLOW_TRACKING_USERNAME"), std::string::npos);
  }
  EXPECT_THROW(http::parse_url("ftp://x"), Error);
  EXPECT_THROW(http::parse_url("http://x:99999999"), Error);
  EXPECT_EQ(http::url_encode("a b/c&d"), "a%20b%2Fc%26d");
  EXPECT_EQ(http::url_encode("a b/c", true), "a%20b/c");
}

TEST(Http, BodiesBothWays) {
  FakeServer server([](const Request& r) {
    if (r.target == "/chunked")
      return std::string("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n") +
             "5\r\nhello\r\n7\r\n, world\r\n0\r\n\r\n";
    return json_response(201, "{\"got\": " + std::to_string(r.body.size()) + "}");
  });
  const http::Url url = http::parse_url(server.url());
  const http::Response chunked = http::request(url, "GET", "/chunked");
  EXPECT_EQ(chunked.status, 200);
  EXPECT_EQ(chunked.body, "hello, world");
  const http::Response posted = http::request(url, "POST", "/post", "{\"a\": 1}");
  EXPECT_EQ(posted.status, 201);
  EXPECT_EQ(posted.body, "{\"got\": 8}");
  io::TempDir tmp;
  std::string big(3 << 20, 'x');
  big[12345] = 'y';
  io::write_file_atomic(tmp.file("blob"), big);
  EXPECT_EQ(http::put_file(url, "/file", tmp.file("blob")).body, "{\"got\": 3145728}");
  const auto reqs = server.requests();
  ASSERT_EQ(reqs.size(), 3u);
  EXPECT_EQ(reqs[1].body, "{\"a\": 1}");
  EXPECT_EQ(reqs[2].method, "PUT");
  EXPECT_EQ(reqs[2].body, big);
}

TEST(Http, TimeoutsAndRefusals) {
  FakeServer silent([](const Request&) {
    std::this_thread::sleep_for(std::chrono::milliseconds(800));
    return std::string();  // closes without an answer
  });
  try {
    http::request(http::parse_url(silent.url()), "GET", "/", "", "application/json", 0.3);
    FAIL() << "no timeout";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("timed out"), std::string::npos) << e.what();
  }
  // A port nobody listens on (this one was just closed).
  int port = 0;
  {
    FakeServer gone([](const Request&) { return std::string(); });
    port = std::stoi(gone.url().substr(gone.url().rfind(':') + 1));
  }
  EXPECT_THROW(
      http::request(http::parse_url("http://127.0.0.1:" + std::to_string(port)), "GET", "/"),
      Error);
}

// Transient answers (429, 5xx) and lost connections are retried with backoff; a 4xx is not.
TEST(Http, RetriesTransientFailuresWithBackoff) {
  std::atomic<int> calls{0};
  FakeServer flaky([&](const Request& r) {
    const int n = calls++;
    if (r.target == "/busy" && n < 2) return json_response(503, "{}");
    if (r.target == "/busy") return json_response(200, "{\"ok\": true}");
    return json_response(404, "{}");
  });
  const http::Url url = http::parse_url(flaky.url());
  http::ClientOptions o;
  o.retries = 3;
  o.backoff_s = 0.01;
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(http::request(url, "GET", "/busy", "", "application/json", 5, o).status, 200);
  EXPECT_EQ(calls.load(), 3);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(30));  // 10 + 20 ms
  calls = 0;
  EXPECT_EQ(http::request(url, "GET", "/missing", "", "application/json", 5, o).status, 404);
  EXPECT_EQ(calls.load(), 1);
  o.retries = 0;
  calls = 0;
  EXPECT_EQ(http::request(url, "GET", "/busy", "", "application/json", 5, o).status, 503);
}

// The environment's proxy carries the request (libcurl reads http_proxy, no_proxy).
TEST(Http, GoesThroughTheEnvironmentsProxy) {
  FakeServer proxy([](const Request& r) { return json_response(200, "\"" + r.target + "\""); });
  ::setenv("http_proxy", proxy.url().c_str(), 1);
  ::unsetenv("no_proxy");
  ::unsetenv("NO_PROXY");
  const http::Response r =
      http::request(http::parse_url("http://tracking.invalid:5000/base"), "GET", "/x");
  ::unsetenv("http_proxy");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "\"http://tracking.invalid:5000/base/x\"");  // the absolute form: a proxy
}

// The calls of one run, in order: experiment (missing, then created), run, params, metrics,
// artifacts through the proxy, status; a second logger on the same run directory reopens it.
TEST(Mlflow, RunLifecycle) {
  io::TempDir tmp;
  std::atomic<int> gets{0};
  FakeServer server([&](const Request& r) {
    const std::string t = r.target;
    if (t.rfind("/api/2.0/mlflow/experiments/get-by-name", 0) == 0)
      return gets++ == 0 ? json_response(404, "{\"error_code\": \"RESOURCE_DOES_NOT_EXIST\"}")
                         : json_response(200, "{\"experiment\": {\"experiment_id\": \"7\"}}");
    if (t == "/api/2.0/mlflow/experiments/create")
      return json_response(200, "{\"experiment_id\": \"7\"}");
    if (t == "/api/2.0/mlflow/runs/create")
      return json_response(200,
                           "{\"run\": {\"info\": {\"run_id\": \"r1\", \"artifact_uri\": "
                           "\"mlflow-artifacts:/7/r1/artifacts\"}}}");
    if (t.rfind("/api/2.0/mlflow/runs/get", 0) == 0)
      return json_response(200,
                           "{\"run\": {\"info\": {\"run_id\": \"r1\", \"lifecycle_stage\": "
                           "\"active\", \"artifact_uri\": \"mlflow-artifacts:/7/r1/artifacts\"}}}");
    return json_response(200, "{}");
  });
  io::write_file_atomic(tmp.file("metrics.jsonl"), "{\"step\": 1}\n");
  nlohmann::json params = {{"train", {{"steps", 3}, {"precision", "f32"}}}};
  {
    MlflowLogger m({server.url(), "exp", "my run", tmp.path()}, params);
    ASSERT_TRUE(m.active());
    EXPECT_EQ(m.run_id(), "r1");
    m.log({{"step", 1}, {"loss", 5.5}, {"time", {{"data_s", 0.25}}}, {"note", "x"}});
    m.log({{"step", 2}, {"loss", 5.0}});
    m.finish(true, {{tmp.file("metrics.jsonl"), "metrics.jsonl"}});
  }
  std::vector<Request> reqs = server.requests();
  std::vector<std::string> targets;
  for (const Request& r : reqs) targets.push_back(r.method + " " + r.target);
  ASSERT_GE(targets.size(), 7u);
  EXPECT_EQ(targets[0], "GET /api/2.0/mlflow/experiments/get-by-name?experiment_name=exp");
  EXPECT_EQ(targets[1], "POST /api/2.0/mlflow/experiments/create");
  EXPECT_EQ(targets[2], "POST /api/2.0/mlflow/runs/create");
  EXPECT_EQ(nlohmann::json::parse(reqs[2].body)["run_name"], "my run");
  const nlohmann::json p = nlohmann::json::parse(reqs[3].body);
  EXPECT_EQ(p["params"][0], nlohmann::json({{"key", "train.precision"}, {"value", "f32"}}));
  EXPECT_EQ(p["params"][1], nlohmann::json({{"key", "train.steps"}, {"value", "3"}}));
  std::vector<nlohmann::json> metrics;
  for (const Request& r : reqs)
    if (r.target == "/api/2.0/mlflow/runs/log-batch") {
      const nlohmann::json b = nlohmann::json::parse(r.body);
      if (b.contains("metrics"))
        for (const auto& x : b["metrics"]) metrics.push_back(x);
    }
  ASSERT_EQ(metrics.size(), 3u);  // loss, time.data_s at step 1; loss at step 2
  EXPECT_EQ(metrics[0]["key"], "loss");
  EXPECT_EQ(metrics[1]["key"], "time.data_s");
  EXPECT_EQ(metrics[2]["step"], 2);
  EXPECT_EQ(metrics[2]["value"], 5.0);
  EXPECT_EQ(targets[targets.size() - 2],
            "PUT /api/2.0/mlflow-artifacts/artifacts/7/r1/artifacts/metrics.jsonl");
  EXPECT_EQ(reqs[reqs.size() - 2].body, "{\"step\": 1}\n");
  EXPECT_EQ(targets.back(), "POST /api/2.0/mlflow/runs/update");
  EXPECT_EQ(nlohmann::json::parse(reqs.back().body)["status"], "FINISHED");

  // Resumed: the same MLflow run, reopened; destroyed unfinished, it is marked FAILED.
  {
    MlflowLogger again({server.url(), "exp", "", tmp.path()}, params);
    EXPECT_EQ(again.run_id(), "r1");
  }
  reqs = server.requests();
  EXPECT_EQ(nlohmann::json::parse(reqs.back().body)["status"], "FAILED");
  bool reopened = false;
  for (const Request& r : reqs)
    reopened = reopened || (r.target == "/api/2.0/mlflow/runs/update" &&
                            nlohmann::json::parse(r.body)["status"] == "RUNNING");
  EXPECT_TRUE(reopened);
}

TEST(Mlflow, ServerDownIsAWarningNotAnError) {
  io::TempDir tmp;
  int port = 0;
  {
    FakeServer gone([](const Request&) { return std::string(); });
    port = std::stoi(gone.url().substr(gone.url().rfind(':') + 1));
  }
  MlflowLogger m({"http://127.0.0.1:" + std::to_string(port), "exp", "", tmp.path()}, {});
  EXPECT_FALSE(m.active());
  m.log({{"step", 1}, {"loss", 1.0}});
  m.finish(true, {});
  ::unsetenv("MLFLOW_TRACKING_URI");
  EXPECT_EQ(make_mlflow_logger("", "", "", tmp.path(), {}), nullptr);  // off
  ::setenv("MLFLOW_TRACKING_URI", "file:./mlruns", 1);                 // not a server: off as well
  EXPECT_EQ(make_mlflow_logger("", "", "", tmp.path(), {}), nullptr);
  ::unsetenv("MLFLOW_TRACKING_URI");
}

}  // namespace
}  // namespace strata
