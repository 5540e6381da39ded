#include "track/metrics.h"

#include <filesystem>

#include "core/error.h"
#include "track/environment.h"
#include "track/tensorboard.h"

namespace strata {

JsonlWriter::JsonlWriter(const std::string& path, bool append) {
  file_ = std::fopen(path.c_str(), append ? "a" : "w");
  STRATA_CHECK(file_ != nullptr, "cannot open metrics file '", path, "' for writing");
}

JsonlWriter::~JsonlWriter() {
  if (file_) std::fclose(file_);
}

void JsonlWriter::write(const nlohmann::json& record) {
  if (!file_) return;
  const std::string line = record.dump() + "\n";
  std::fwrite(line.data(), 1, line.size(), file_);
  std::fflush(file_);
}

MetricsSink::MetricsSink(const std::string& run_dir, bool tensorboard)
    : jsonl_((std::filesystem::path(run_dir) / "metrics.jsonl").string(), /*append=*/true) {
  write_environment(run_dir);  // where these numbers come from, for `strata report`
  if (tensorboard)
    tensorboard_ = std::make_unique<TensorBoardWriter>(
        (std::filesystem::path(run_dir) / "tensorboard").string());
}

MetricsSink::~MetricsSink() = default;

void MetricsSink::write(const nlohmann::json& record) {
  jsonl_.write(record);
  if (tensorboard_) {
    const auto step = record.find("step");
    tensorboard_->add_json_scalars(
        record, step != record.end() && step->is_number_integer() ? step->get<int64_t>() : 0);
    tensorboard_->flush();
  }
}

std::string MetricsSink::tensorboard_path() const {
  return tensorboard_ ? tensorboard_->path() : "";
}

}  // namespace strata
