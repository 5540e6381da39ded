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

TensorBoardOutput::TensorBoardOutput(const std::string& dir)
    : writer_(std::make_unique<TensorBoardWriter>(dir)) {}

TensorBoardOutput::~TensorBoardOutput() = default;

void TensorBoardOutput::write(const nlohmann::json& record) {
  const auto step = record.find("step");
  writer_->add_json_scalars(
      record, step != record.end() && step->is_number_integer() ? step->get<int64_t>() : 0);
  writer_->flush();
}

const std::string& TensorBoardOutput::path() const {
  return writer_->path();
}

void MetricsSink::add(std::unique_ptr<MetricsOutput> output) {
  if (output) outputs_.push_back(std::move(output));
}

void MetricsSink::write(const nlohmann::json& record) {
  for (auto& o : outputs_) o->write(record);
}

void MetricsSink::finish() {
  for (auto& o : outputs_) o->finish();
}

void add_run_dir_outputs(MetricsSink& sink, const std::string& run_dir, bool tensorboard) {
  const std::filesystem::path dir(run_dir);
  sink.add(std::make_unique<JsonlWriter>((dir / "metrics.jsonl").string(), /*append=*/true));
  write_environment(run_dir);
  if (tensorboard) sink.add(std::make_unique<TensorBoardOutput>((dir / "tensorboard").string()));
}

}  // namespace strata
