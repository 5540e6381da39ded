// Metrics sinks: one JSON object per line in the run's metrics.jsonl, flushed per record so that
// a crash loses nothing already written.
#pragma once
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

namespace strata {

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

}  // namespace strata
