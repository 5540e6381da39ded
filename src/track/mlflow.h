// MLflow tracking over its REST API (2.0), as an optional metrics sink of rank 0: the run's
// config as params, every number of each metrics line as a metric at its step, and at the end
// the run's files (and optionally the final checkpoint) as artifacts, through the tracking
// server's artifact proxy (mlflow-artifacts, `mlflow server --serve-artifacts`, the default
// since MLflow 2). The run's id is kept in RUN_DIR/mlflow_run.json, so a resumed run continues
// the same MLflow run.
//
// Requests go out on a background thread (the step loop only queues a record); a server that is
// down or stops answering costs one warning, and training goes on without it.
#pragma once
#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "track/http_client.h"

namespace strata {

struct MlflowOptions {
  std::string tracking_uri;  // http[s]://host:port; credentials and TLS from MLflow's env vars
  std::string experiment = "strata";
  std::string run_name;  // "": the run directory's name
  std::string run_dir;
};

class MlflowLogger {
 public:
  // Finds or creates the experiment, creates (or, for a resumed run, reopens) the run and logs
  // `params` (a nested JSON object, flattened to dotted keys). Never throws.
  MlflowLogger(const MlflowOptions& options, const nlohmann::json& params);
  ~MlflowLogger();  // an unfinished run is marked FAILED
  MlflowLogger(const MlflowLogger&) = delete;
  MlflowLogger& operator=(const MlflowLogger&) = delete;

  // Queues the numbers of one metrics record ("step" is the step; nested keys are joined with
  // '.'); never blocks on the network.
  void log(const nlohmann::json& record);
  // Sends what is queued, uploads each (local file, artifact path), and marks the run FINISHED
  // (or FAILED). Blocks until done or the server fails.
  void finish(bool ok, const std::vector<std::pair<std::string, std::string>>& artifacts);

  bool active() const { return !disabled_; }
  const std::string& run_id() const { return run_id_; }

 private:
  nlohmann::json call(const std::string& method, const std::string& target,
                      const nlohmann::json& body);
  void start(const nlohmann::json& params);
  void send_metrics(const std::vector<nlohmann::json>& metrics);
  void worker();
  void disable(const std::string& why);

  MlflowOptions options_;
  http::Url url_;
  http::ClientOptions client_;                          // MLFLOW_TRACKING_* (http_client.h)
  std::string experiment_id_, run_id_, artifact_path_;  // artifact_path_: under the proxy
  std::atomic<bool> disabled_{false};
  bool finished_ = false, warned_params_ = false;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<nlohmann::json> queue_;  // metric entries waiting to be sent
  bool stop_ = false;
  bool busy_ = false;
  std::thread thread_;
};

// The MLflow logger a run asks for: [mlflow] tracking_uri, else $MLFLOW_TRACKING_URI; nullptr
// when neither is set.
std::unique_ptr<MlflowLogger> make_mlflow_logger(const std::string& tracking_uri,
                                                 const std::string& experiment,
                                                 const std::string& run_name,
                                                 const std::string& run_dir,
                                                 const nlohmann::json& params);

}  // namespace strata
