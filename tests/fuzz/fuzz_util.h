// What the libFuzzer targets of tests/fuzz share: a scratch directory for the readers that take a
// path, the split of one input into several files or strings, and a check that aborts (a finding)
// when a reader accepted input that breaks its own promise.
#pragma once
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

namespace strata::fuzz {

// Parts of one input are separated by this line; the seeds and tests/fuzz/fuzz.dict use it too.
inline constexpr std::string_view kPartSeparator = "\n%%\n";

// One directory per process, in memory where /dev/shm exists, removed at exit.
inline const std::string& scratch_dir() {
  static const std::string dir = [] {
    const bool shm = std::filesystem::is_directory("/dev/shm");
    std::string tmpl = std::string(shm ? "/dev/shm" : "/tmp") + "/strata-fuzz-XXXXXX";
    if (!mkdtemp(tmpl.data())) {
      std::perror("mkdtemp");
      std::abort();
    }
    static std::string keep = tmpl;
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(keep, ec);
    });
    return tmpl;
  }();
  return dir;
}

// Empties the scratch directory (files of the previous input must not leak into this one).
inline void clear_scratch() {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(scratch_dir(), ec))
    std::filesystem::remove_all(entry.path(), ec);
}

inline std::string write_scratch(const std::string& name, std::string_view bytes) {
  const std::string path = scratch_dir() + "/" + name;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    std::abort();
  }
  return path;
}

// The input cut at each kPartSeparator, at most max_parts pieces (the last one keeps the rest).
inline std::vector<std::string_view> split_parts(std::string_view data, size_t max_parts) {
  std::vector<std::string_view> parts;
  while (parts.size() + 1 < max_parts) {
    const size_t at = data.find(kPartSeparator);
    if (at == std::string_view::npos) break;
    parts.push_back(data.substr(0, at));
    data.remove_prefix(at + kPartSeparator.size());
  }
  parts.push_back(data);
  return parts;
}

inline std::vector<std::string> split_lines(std::string_view text) {
  std::vector<std::string> lines;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    lines.emplace_back(text.substr(0, nl));
    if (nl == std::string_view::npos) break;
    text.remove_prefix(nl + 1);
  }
  return lines;
}

}  // namespace strata::fuzz

// A promise of the reader that the accepted input broke: a finding, like a crash.
#define FUZZ_CHECK(cond)                                                                 \
  do {                                                                                   \
    if (!(cond)) {                                                                       \
      std::fprintf(stderr, "%s:%d: FUZZ_CHECK(%s) failed\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                      \
    }                                                                                    \
  } while (0)
