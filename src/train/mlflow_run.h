// The trainer's MLflow run ([mlflow], track/mlflow.h): started on rank 0 with the config as
// params, fed each metrics line, and finished at the end of the run with its files as artifacts.
#pragma once
#include <memory>

#include "track/mlflow.h"
#include "train/config.h"

namespace strata {

// The logger [mlflow] (or MLFLOW_TRACKING_URI) asks for, or nullptr.
std::unique_ptr<MlflowLogger> start_mlflow(const RunConfig& config);

// Uploads config.json, metrics.jsonl, events.jsonl, the logs, post_train_eval.log and (with
// mlflow.log_checkpoint) the final checkpoint's files, and marks the run FINISHED.
void finish_mlflow(MlflowLogger& mlflow, const RunConfig& config);

}  // namespace strata
