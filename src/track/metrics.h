// The run's metrics: one MetricsSink that the trainer writes each step's record to, and that fans
// it out to every output the run asks for: RUN_DIR/metrics.jsonl (always), TensorBoard event
// files ([track] tensorboard) and an MLflow run ([mlflow], train/mlflow_run.h). An output is one
// class with write() and finish(), so a new tracker is one unit, not a branch in the trainer.
#pragma once
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace strata {

class TensorBoardWriter;

// One destination of the per-step records. write() is called once per record, in order;
// finish() once, at the end of a run that completed (an output destroyed without it was cut
// short: MLflow marks its run FAILED).
class MetricsOutput {
 public:
  virtual ~MetricsOutput() = default;
  virtual void write(const nlohmann::json& record) = 0;
  virtual void finish() {}
};

// One JSON object per line, flushed per record so that a crash loses nothing already written.
class JsonlWriter final : public MetricsOutput {
 public:
  JsonlWriter() = default;
  explicit JsonlWriter(const std::string& path, bool append);
  ~JsonlWriter() override;
  JsonlWriter(const JsonlWriter&) = delete;
  JsonlWriter& operator=(const JsonlWriter&) = delete;
  void write(const nlohmann::json& record) override;
  bool is_open() const { return file_ != nullptr; }

 private:
  FILE* file_ = nullptr;
};

// Each number of the record as a TensorBoard scalar, tagged by its path ("loss", "mem/params",
// "time/compute_s"), at the record's "step", in a new event file in `dir`; flushed per record.
class TensorBoardOutput final : public MetricsOutput {
 public:
  explicit TensorBoardOutput(const std::string& dir);
  ~TensorBoardOutput() override;
  void write(const nlohmann::json& record) override;
  const std::string& path() const;

 private:
  std::unique_ptr<TensorBoardWriter> writer_;
};

class MetricsSink {
 public:
  MetricsSink() = default;  // no outputs: a rank other than 0 writes nothing
  void add(std::unique_ptr<MetricsOutput> output);
  void write(const nlohmann::json& record);
  void finish();
  size_t outputs() const { return outputs_.size(); }

 private:
  std::vector<std::unique_ptr<MetricsOutput>> outputs_;
};

// The outputs in the run directory: RUN_DIR/metrics.jsonl (appended: a resumed run continues
// the file) and, with `tensorboard`, RUN_DIR/tensorboard/. Also writes RUN_DIR/environment.json
// (where these numbers come from, for `strata report`).
void add_run_dir_outputs(MetricsSink& sink, const std::string& run_dir, bool tensorboard);

}  // namespace strata
