#include "track/metrics.h"

#include "core/error.h"

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

}  // namespace strata
