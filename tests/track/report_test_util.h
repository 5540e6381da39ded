// Helpers of the report tests (test_report.cc, test_report_moe.cc).
#pragma once
#include <unistd.h>

#include <filesystem>
#include <string>

#include "core/error.h"

namespace strata::testing {

// An empty directory of its own under the temp dir: strata_<prefix>_<pid>_<name>.
inline std::filesystem::path fresh_report_dir(const std::string& prefix, const std::string& name) {
  const std::filesystem::path p =
      std::filesystem::temp_directory_path() / cat("strata_", prefix, "_", ::getpid(), "_", name);
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  return p;
}

// Occurrences of `what` in `text` (overlapping ones too).
inline int count_of(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace strata::testing
