#include "track/mlflow.h"

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "core/error.h"
#include "core/log.h"
#include "io/atomic_file.h"

namespace strata {

namespace fs = std::filesystem;

namespace {

constexpr const char* kApi = "/api/2.0/mlflow/";
constexpr size_t kMaxMetricsPerBatch = 1000;  // MLflow's log-batch limits
constexpr size_t kMaxParamsPerBatch = 100;
constexpr size_t kMaxParamValue = 500;  // the smallest limit of the MLflow versions in use

// An answer with an error status: the server is there but refused the request.
class ApiError : public Error {
 public:
  ApiError(int status, const std::string& what) : Error(what), status_(status) {}
  int status() const { return status_; }

 private:
  int status_;
};

// A non-JSON error body (a proxy's HTML page) as one short line: its <title>, or its first 200
// characters with the line breaks flattened.
std::string one_line(const std::string& body) {
  const size_t t = body.find("<title>"), e = body.find("</title>");
  std::string s = t != std::string::npos && e != std::string::npos && e > t
                      ? body.substr(t + 7, e - t - 7)
                      : body.substr(0, 200);
  for (char& c : s)
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
  return s;
}

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void flatten_into(const nlohmann::json& j, const std::string& prefix, nlohmann::json& out) {
  if (j.is_object()) {
    for (const auto& [k, v] : j.items())
      flatten_into(v, prefix.empty() ? k : prefix + "." + k, out);
  } else {
    out[prefix] = j;
  }
}

std::string run_file(const std::string& run_dir) {
  return (fs::path(run_dir) / "mlflow_run.json").string();
}

// "mlflow-artifacts:/1/abc/artifacts" or "mlflow-artifacts://host:port/1/abc/artifacts" ->
// "1/abc/artifacts"; "" for a store the server does not proxy (a path, s3://, ...).
std::string proxied_path(const std::string& artifact_uri) {
  const std::string scheme = "mlflow-artifacts:";
  if (artifact_uri.rfind(scheme, 0) != 0) return "";
  std::string rest = artifact_uri.substr(scheme.size());
  if (rest.rfind("//", 0) == 0) {
    const size_t slash = rest.find('/', 2);
    rest = slash == std::string::npos ? "" : rest.substr(slash);
  }
  while (!rest.empty() && rest.front() == '/') rest.erase(0, 1);
  return rest;
}

}  // namespace

MlflowLogger::MlflowLogger(const MlflowOptions& options, const nlohmann::json& params)
    : options_(options) {
  try {
    url_ = http::parse_url(options.tracking_uri);
    client_ = http::ClientOptions::from_mlflow_env();
    start(params);
  } catch (const std::exception& e) {
    disable(e.what());
    return;
  }
  thread_ = std::thread([this] { worker(); });
}

MlflowLogger::~MlflowLogger() {
  try {
    if (!finished_) finish(false, {});
  } catch (...) {
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void MlflowLogger::disable(const std::string& why) {
  if (disabled_) return;
  disabled_ = true;
  log::warn("mlflow: ", why, "; training goes on without MLflow (tracking URI ",
            options_.tracking_uri, ")");
}

nlohmann::json MlflowLogger::call(const std::string& method, const std::string& target,
                                  const nlohmann::json& body) {
  const http::Response r =
      http::request(url_, method, kApi + target, body.is_null() ? "" : body.dump(),
                    "application/json", 10, client_);
  nlohmann::json j = nlohmann::json::parse(r.body, nullptr, /*allow_exceptions=*/false);
  if (r.status != 200) {
    std::string message = j.is_object() ? j.value("message", "") : "";
    if (message.empty()) message = one_line(r.body);
    // The server refused who we are: say which variables set it (never their values).
    const std::string who =
        r.status == 401 || r.status == 403
            ? "; check MLFLOW_TRACKING_USERNAME / MLFLOW_TRACKING_PASSWORD or MLFLOW_TRACKING_TOKEN"
            : "";
    throw ApiError(r.status, cat(method, " ", target, ": HTTP ", r.status, ": ", message, who));
  }
  STRATA_CHECK(!j.is_discarded(), method, " ", target, ": the answer is not JSON");
  return j;
}

void MlflowLogger::start(const nlohmann::json& params) {
  // The experiment, by name (created on first use; another process may create it first).
  const std::string by_name =
      "experiments/get-by-name?experiment_name=" + http::url_encode(options_.experiment);
  try {
    experiment_id_ =
        call("GET", by_name, nullptr).at("experiment").at("experiment_id").get<std::string>();
  } catch (const ApiError& e) {
    if (e.status() != 404) throw;
    try {
      experiment_id_ = call("POST", "experiments/create", {{"name", options_.experiment}})
                           .at("experiment_id")
                           .get<std::string>();
    } catch (const ApiError&) {
      experiment_id_ =
          call("GET", by_name, nullptr).at("experiment").at("experiment_id").get<std::string>();
    }
  }
  // A resumed run continues its MLflow run.
  std::string artifact_uri;
  if (fs::exists(run_file(options_.run_dir))) {
    const nlohmann::json saved = nlohmann::json::parse(io::read_file(run_file(options_.run_dir)),
                                                       nullptr, /*allow_exceptions=*/false);
    if (saved.is_object() && saved.value("tracking_uri", "") == options_.tracking_uri &&
        saved.value("experiment_id", "") == experiment_id_) {
      try {
        const nlohmann::json run =
            call("GET", "runs/get?run_id=" + http::url_encode(saved.value("run_id", "")), nullptr);
        if (run["run"]["info"].value("lifecycle_stage", "active") == "active") {
          run_id_ = saved["run_id"].get<std::string>();
          artifact_uri = run["run"]["info"].value("artifact_uri", "");
          call("POST", "runs/update", {{"run_id", run_id_}, {"status", "RUNNING"}});
        }
      } catch (const ApiError&) {
        // deleted or unknown: start a new run
      }
    }
  }
  if (run_id_.empty()) {
    fs::path dir = fs::absolute(options_.run_dir).lexically_normal();
    if (dir.filename().empty()) dir = dir.parent_path();
    const std::string name =
        options_.run_name.empty() ? dir.filename().string() : options_.run_name;
    const nlohmann::json info =
        call("POST", "runs/create",
             {{"experiment_id", experiment_id_},
              {"run_name", name},
              {"start_time", now_ms()},
              {"tags",
               {{{"key", "mlflow.runName"}, {"value", name}},
                {{"key", "mlflow.source.name"}, {"value", "strata"}},
                {{"key", "strata.run_dir"}, {"value", dir.string()}}}}})["run"]["info"];
    run_id_ = info.at("run_id").get<std::string>();
    artifact_uri = info.value("artifact_uri", "");
    io::write_file_atomic(run_file(options_.run_dir),
                          nlohmann::json({{"tracking_uri", options_.tracking_uri},
                                          {"experiment_id", experiment_id_},
                                          {"run_id", run_id_}})
                              .dump(2));
  }
  artifact_path_ = proxied_path(artifact_uri);
  if (artifact_path_.empty())
    log::warn("mlflow: the server keeps artifacts at '", artifact_uri,
              "', which it does not proxy: no artifacts will be uploaded (start it with "
              "--serve-artifacts, the default since MLflow 2)");

  nlohmann::json flat = nlohmann::json::object();
  flatten_into(params, "", flat);
  nlohmann::json batch = nlohmann::json::array();
  const auto send = [&] {
    if (batch.empty()) return;
    try {
      call("POST", "runs/log-batch", {{"run_id", run_id_}, {"params", batch}});
    } catch (const ApiError& e) {  // a resumed run whose settings changed: the first value stays
      if (!warned_params_) log::warn("mlflow: some params were not logged: ", e.what());
      warned_params_ = true;
    }
    batch = nlohmann::json::array();
  };
  for (const auto& [k, v] : flat.items()) {
    std::string value = v.is_string() ? v.get<std::string>() : v.dump();
    if (value.size() > kMaxParamValue) value = value.substr(0, kMaxParamValue - 3) + "...";
    batch.push_back({{"key", k}, {"value", value}});
    if (batch.size() == kMaxParamsPerBatch) send();
  }
  send();
  log::info("mlflow: run ", run_id_, " in experiment '", options_.experiment, "' (",
            options_.tracking_uri, ")");
}

void MlflowLogger::log(const nlohmann::json& record) {
  if (disabled_ || finished_) return;
  const auto step = record.find("step");
  const int64_t s = step != record.end() && step->is_number_integer() ? step->get<int64_t>() : 0;
  nlohmann::json flat = nlohmann::json::object();
  flatten_into(record, "", flat);
  const int64_t t = now_ms();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& [k, v] : flat.items()) {
      if (k == "step" || !v.is_number() || !std::isfinite(v.get<double>())) continue;
      queue_.push_back({{"key", k}, {"value", v.get<double>()}, {"timestamp", t}, {"step", s}});
    }
  }
  cv_.notify_all();
}

void MlflowLogger::send_metrics(const std::vector<nlohmann::json>& metrics) {
  try {
    call("POST", "runs/log-batch", {{"run_id", run_id_}, {"metrics", metrics}});
  } catch (const ApiError& e) {
    log::warn("mlflow: metrics refused: ", e.what());
  } catch (const std::exception& e) {
    disable(e.what());
  }
}

void MlflowLogger::worker() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
    if (queue_.empty() && stop_) return;
    std::vector<nlohmann::json> batch;
    while (!queue_.empty() && batch.size() < kMaxMetricsPerBatch) {
      batch.push_back(std::move(queue_.front()));
      queue_.pop_front();
    }
    busy_ = true;
    lock.unlock();
    if (!disabled_) send_metrics(batch);
    lock.lock();
    busy_ = false;
    cv_.notify_all();
  }
}

void MlflowLogger::finish(bool ok, const std::vector<std::pair<std::string, std::string>>& files) {
  if (finished_) return;
  finished_ = true;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait_for(lock, std::chrono::seconds(120), [this] { return queue_.empty() && !busy_; });
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (disabled_) return;
  try {
    if (!artifact_path_.empty()) {
      for (const auto& [local, remote] : files) {
        if (!fs::is_regular_file(local)) continue;
        const http::Response r =
            http::put_file(url_,
                           "/api/2.0/mlflow-artifacts/artifacts/" +
                               http::url_encode(artifact_path_ + "/" + remote, true),
                           local, 60, client_);
        if (r.status != 200)
          throw ApiError(r.status,
                         cat("uploading ", local, ": HTTP ", r.status, ": ", one_line(r.body)));
      }
    }
    call("POST", "runs/update",
         {{"run_id", run_id_}, {"status", ok ? "FINISHED" : "FAILED"}, {"end_time", now_ms()}});
  } catch (const std::exception& e) {
    disable(e.what());
  }
}

std::unique_ptr<MlflowLogger> make_mlflow_logger(const std::string& tracking_uri,
                                                 const std::string& experiment,
                                                 const std::string& run_name,
                                                 const std::string& run_dir,
                                                 const nlohmann::json& params) {
  std::string uri = tracking_uri;
  if (uri.empty())
    if (const char* env = std::getenv("MLFLOW_TRACKING_URI"))
      if (const std::string e(env); e.rfind("http://", 0) == 0 || e.rfind("https://", 0) == 0)
        uri = e;  // not file: or databricks
  if (uri.empty()) return nullptr;
  MlflowOptions o;
  o.tracking_uri = uri;
  o.experiment = experiment.empty() ? "strata" : experiment;
  o.run_name = run_name;
  o.run_dir = run_dir;
  return std::make_unique<MlflowLogger>(o, params);
}

}  // namespace strata
