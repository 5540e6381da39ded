// The prepare step: text files -> filtered documents -> train/val split -> tokenizer ->
// token shards, plus a report of what was kept and why the rest was dropped.
//
//   out_dir/tokenizer.json       Hugging Face tokenizer.json (byte-level BPE)
//   out_dir/train_000.bin, ...   token shards (shard.h), at most kMaxShardTokens each
//   out_dir/val_000.bin, ...       (none when no document went to validation)
//   out_dir/prepare_report.json  PrepareReport::to_json()
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data/data_config.h"

namespace strata::data {

inline constexpr int64_t kMaxShardTokens = 100'000'000;

struct DocStats {
  int64_t documents = 0;
  int64_t bytes = 0;
};

struct PrepareReport {
  int64_t files = 0;
  DocStats seen, kept;
  // Removed, per filter (a document counts under the first filter it fails).
  DocStats invalid_utf8, too_short, too_long, repetitive, nonprint;
  DocStats train, val;                       // kept documents per split
  int64_t train_tokens = 0, val_tokens = 0;  // including one <|endoftext|> per document
  int64_t train_shards = 0, val_shards = 0;
  int64_t vocab_size = 0;  // of the trained tokenizer
  double tokenizer_seconds = 0, encode_seconds = 0, seconds = 0;

  nlohmann::json to_json() const;
  std::string summary() const;  // a few lines for the log
};

PrepareReport prepare_text(const std::vector<std::string>& text_files, const std::string& out_dir,
                           int64_t vocab_size, double val_fraction, uint64_t seed,
                           const std::string& document_separator, const FilterConfig& filters);

// A kept document goes to validation when split_draw(doc, seed) < val_fraction. The draw is a
// hash of (seed, the document's bytes), uniform in [0, 1): the split survives reordering files
// or changing filters, and duplicate documents land in the same split.
double split_draw(std::string_view doc, uint64_t seed);

// Writes tokens as out_dir/<split>_000.bin, _001, ... of at most max_tokens each and deletes any
// other <split>_*.bin left by an earlier run. No tokens, no shards: a corpus too small for a
// validation document has no val_*.bin. Returns the number of shards.
int64_t write_split(const std::string& out_dir, const std::string& split,
                    const std::vector<int32_t>& tokens, int64_t vocab_size, int64_t max_tokens);

}  // namespace strata::data
