#include "train/mlflow_run.h"

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "track/mlflow.h"
#include "train/checkpoint.h"

namespace strata {

namespace fs = std::filesystem;

namespace {

class MlflowOutput final : public MetricsOutput {
 public:
  MlflowOutput(std::unique_ptr<MlflowLogger> logger, const RunConfig& config)
      : logger_(std::move(logger)),
        run_dir_(config.run.dir),
        log_checkpoint_(config.mlflow.log_checkpoint) {}

  void write(const nlohmann::json& record) override { logger_->log(record); }

  void finish() override {
    const fs::path run(run_dir_);
    std::vector<std::pair<std::string, std::string>> files;
    for (const char* name : {"config.json", "metrics.jsonl", "events.jsonl", "train.log",
                             "post_train_eval.log", "environment.json"})
      files.emplace_back((run / name).string(), name);
    if (fs::is_directory(run / "logs"))
      for (const auto& e : fs::directory_iterator(run / "logs"))
        files.emplace_back(e.path().string(), "logs/" + e.path().filename().string());
    if (log_checkpoint_)
      if (const auto dir = latest_checkpoint((run / "ckpt").string()))
        for (const auto& e : fs::directory_iterator(*dir))
          files.emplace_back(e.path().string(), "checkpoint/" + e.path().filename().string());
    logger_->finish(/*ok=*/true, files);
  }

 private:
  std::unique_ptr<MlflowLogger> logger_;
  std::string run_dir_;
  bool log_checkpoint_;
};

}  // namespace

std::unique_ptr<MetricsOutput> mlflow_output(const RunConfig& config) {
  const MlflowConfig& m = config.mlflow;
  std::unique_ptr<MlflowLogger> logger = make_mlflow_logger(
      m.tracking_uri, m.experiment, m.run_name, config.run.dir, config_to_json(config));
  if (!logger) return nullptr;
  return std::make_unique<MlflowOutput>(std::move(logger), config);
}

}  // namespace strata
