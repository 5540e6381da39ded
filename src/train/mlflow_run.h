// The trainer's MLflow run ([mlflow], track/mlflow.h) as an output of its metrics sink
// (track/metrics.h): started with the config as params, fed each metrics record, and finished at
// the end of the run with the run's files as artifacts.
#pragma once
#include <memory>

#include "run/config.h"
#include "track/metrics.h"

namespace strata {

// The output [mlflow] (or MLFLOW_TRACKING_URI) asks for, or nullptr. Its finish() uploads
// config.json, metrics.jsonl, events.jsonl, the logs, post_train_eval.log and (with
// mlflow.log_checkpoint) the final checkpoint's files, and marks the run FINISHED; destroyed
// without finish(), the run is marked FAILED.
std::unique_ptr<MetricsOutput> mlflow_output(const RunConfig& config);

}  // namespace strata
