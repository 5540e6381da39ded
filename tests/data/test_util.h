// Helpers shared by the data-layer tests: a self-deleting temp folder and a small generated
// English-like corpus (deterministic, so tests need no files).
#pragma once
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "core/error.h"

namespace strata::data::testing {

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "strata_data_XXXXXX").string();
    STRATA_CHECK(::mkdtemp(tmpl.data()) != nullptr, "mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// Sentences of common words with punctuation, numbers and contractions.
inline std::string make_corpus(int64_t sentences, uint64_t seed) {
  static const char* kWords[] = {
      "the",   "of",    "and",    "to",     "in",     "a",     "is",    "that",    "for",
      "it",    "as",    "was",    "with",   "be",     "by",    "on",    "not",     "he",
      "this",  "are",   "or",     "his",    "from",   "at",    "which", "but",     "have",
      "an",    "had",   "they",   "you",    "were",   "their", "one",   "all",     "we",
      "can",   "her",   "has",    "there",  "been",   "if",    "more",  "when",    "will",
      "would", "who",   "so",     "no",     "people", "water", "house", "garden",  "river",
      "light", "world", "number", "strata", "token",  "model", "train", "learning"};
  constexpr int kNumWords = sizeof(kWords) / sizeof(kWords[0]);
  uint64_t s = seed * 2862933555777941757ull + 3037000493ull;
  const auto rnd = [&](uint64_t n) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return (s >> 33) % n;
  };
  std::string text;
  for (int64_t i = 0; i < sentences; ++i) {
    const uint64_t len = 4 + rnd(10);
    for (uint64_t w = 0; w < len; ++w) {
      std::string word = kWords[rnd(kNumWords)];
      if (w == 0) word[0] = static_cast<char>(word[0] - 'a' + 'A');
      text += word;
      const uint64_t r = rnd(40);
      if (r == 0) text += "'s";
      if (r == 1) text.append(" ").append(std::to_string(rnd(2000)));
      if (r == 2) text += ",";
      if (w + 1 < len) text += " ";
    }
    text += rnd(5) == 0 ? "?\n" : ".\n";
  }
  return text;
}

}  // namespace strata::data::testing
