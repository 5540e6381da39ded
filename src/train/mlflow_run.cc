#include "train/mlflow_run.h"

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "train/checkpoint.h"

namespace strata {

namespace fs = std::filesystem;

std::unique_ptr<MlflowLogger> start_mlflow(const RunConfig& config) {
  const MlflowConfig& m = config.mlflow;
  return make_mlflow_logger(m.tracking_uri, m.experiment, m.run_name, config.run.dir,
                            config_to_json(config));
}

void finish_mlflow(MlflowLogger& mlflow, const RunConfig& config) {
  const fs::path run(config.run.dir);
  std::vector<std::pair<std::string, std::string>> files;
  for (const char* name : {"config.json", "metrics.jsonl", "events.jsonl", "train.log",
                           "post_train_eval.log", "environment.json"})
    files.emplace_back((run / name).string(), name);
  if (fs::is_directory(run / "logs"))
    for (const auto& e : fs::directory_iterator(run / "logs"))
      files.emplace_back(e.path().string(), "logs/" + e.path().filename().string());
  if (config.mlflow.log_checkpoint)
    if (const auto dir = latest_checkpoint((run / "ckpt").string()))
      for (const auto& e : fs::directory_iterator(*dir))
        files.emplace_back(e.path().string(), "checkpoint/" + e.path().filename().string());
  mlflow.finish(/*ok=*/true, files);
}

}  // namespace strata
