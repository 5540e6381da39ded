// Metrics sinks: one JSON object per line in the run's metrics.jsonl, flushed per record so that
// a crash loses nothing already written; MetricsSink adds TensorBoard event files beside it.
#pragma once
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

namespace strata {

class TensorBoardWriter;

class JsonlWriter {
 public:
  JsonlWriter() = default;
  explicit JsonlWriter(const std::string& path, bool append);
  ~JsonlWriter();
  JsonlWriter(const JsonlWriter&) = delete;
  JsonlWriter& operator=(const JsonlWriter&) = delete;
  void write(const nlohmann::json& record);
  bool is_open() const { return file_ != nullptr; }

 private:
  FILE* file_ = nullptr;
};

// The trainer's per-step record goes to RUN_DIR/metrics.jsonl (appended: a resumed run continues
// the file) and, with `tensorboard`, as scalars to a new event file in RUN_DIR/tensorboard (each
// number of the record, tagged by its path: "loss", "mem/params", "time/compute_s"), at the
// record's "step". Both are flushed per record.
class MetricsSink {
 public:
  MetricsSink(const std::string& run_dir, bool tensorboard);
  ~MetricsSink();
  MetricsSink(const MetricsSink&) = delete;
  MetricsSink& operator=(const MetricsSink&) = delete;
  void write(const nlohmann::json& record);
  // The event file, or "" without TensorBoard.
  std::string tensorboard_path() const;

 private:
  JsonlWriter jsonl_;
  std::unique_ptr<TensorBoardWriter> tensorboard_;
};

}  // namespace strata
