// DataConfig: where tokens come from ([data] and [data.filters] in the config).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/enum_names.h"

namespace strata {

struct FilterConfig {
  int64_t min_doc_chars = 1;           // shorter documents are dropped
  int64_t max_doc_chars = 1000000;     // longer documents are dropped
  double max_repeat_fraction = 0.3;    // drop documents whose repeated-line fraction exceeds this
  double max_nonprint_fraction = 0.1;  // drop documents with more control characters than this
};

// data.source: random tokens, text files prepared at start-up, or prepared shards in data.dir.
enum class DataSource { synthetic, text, shards };
template <>
struct EnumNames<DataSource> {
  static constexpr std::string_view names[] = {"synthetic", "text", "shards"};
};

// data.dedup: drop documents whose normalised text repeats an earlier one (exact, data/dedup.h),
// and with minhash also those whose word 5-grams mostly do (data/minhash.h).
enum class DedupMode { none, exact, minhash };
template <>
struct EnumNames<DedupMode> {
  static constexpr std::string_view names[] = {"none", "exact", "minhash"};
};

struct DataConfig {
  DataSource source = DataSource::synthetic;
  std::vector<std::string> text;            // text files for source = "text"
  std::string dir = "data/default";         // prepared data: tokenizer.json, train_*.bin, val_*.bin
  std::string document_separator = "\n\n";  // how a text file is split into documents
  double val_fraction = 0.05;
  // Check every shard's XXH3 against data.dir/manifest.json when a run starts (rank 0; the other
  // ranks check sizes and token counts). false: sizes and counts only.
  bool verify_checksums = true;
  FilterConfig filters;
  DedupMode dedup = DedupMode::none;  // the first of identical (or near) documents is kept
  // Packed sequences attend within their own documents only, positions restarting at each one:
  // a document ends at each end-of-document token (model/context_attention.h).
  bool document_mask = false;
  // The end-of-document token id: -1 takes the prepared tokenizer's (<|endoftext|>,
  // <|end_of_text|> or </s>); synthetic data has none unless it is set.
  int64_t eos_id = -1;
};

}  // namespace strata
