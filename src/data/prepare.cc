#include "data/prepare.h"

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <filesystem>

#include "core/error.h"
#include "core/log.h"
#include "data/file_util.h"
#include "data/filters.h"
#include "data/shard.h"
#include "data/tokenizer.h"

namespace strata::data {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

nlohmann::json stats_json(const DocStats& s) {
  return {{"documents", s.documents}, {"bytes", s.bytes}};
}

void add(DocStats& s, std::string_view doc) {
  ++s.documents;
  s.bytes += static_cast<int64_t>(doc.size());
}

// Concatenates the documents' tokens, each document followed by <|endoftext|>.
std::vector<int32_t> encode_split(const Tokenizer& tok, const std::vector<std::string_view>& docs) {
  const std::vector<std::vector<int32_t>> encoded = tok.encode_batch(docs);
  size_t total = 0;
  for (const auto& ids : encoded) total += ids.size() + 1;
  std::vector<int32_t> tokens;
  tokens.reserve(total);
  for (const auto& ids : encoded) {
    tokens.insert(tokens.end(), ids.begin(), ids.end());
    tokens.push_back(tok.eot_id());
  }
  return tokens;
}

}  // namespace

nlohmann::json PrepareReport::to_json() const {
  return {{"files", files},
          {"seen", stats_json(seen)},
          {"kept", stats_json(kept)},
          {"removed",
           {{"invalid_utf8", stats_json(invalid_utf8)},
            {"too_short", stats_json(too_short)},
            {"too_long", stats_json(too_long)},
            {"repetitive", stats_json(repetitive)},
            {"nonprint", stats_json(nonprint)}}},
          {"train",
           {{"documents", train.documents},
            {"bytes", train.bytes},
            {"tokens", train_tokens},
            {"shards", train_shards}}},
          {"val",
           {{"documents", val.documents},
            {"bytes", val.bytes},
            {"tokens", val_tokens},
            {"shards", val_shards}}},
          {"vocab_size", vocab_size},
          {"tokenizer_seconds", tokenizer_seconds},
          {"encode_seconds", encode_seconds},
          {"seconds", seconds}};
}

std::string PrepareReport::summary() const {
  const double bytes_per_token =
      train_tokens > 0 ? static_cast<double>(train.bytes) / static_cast<double>(train_tokens) : 0;
  char line[256];
  std::snprintf(line, sizeof line, "%.2f bytes/token", bytes_per_token);
  return cat(
      "prepared ", files, " file(s): ", seen.documents, " documents (", seen.bytes,
      " bytes), kept ", kept.documents, " (", kept.bytes, " bytes)\n", "  removed: invalid_utf8 ",
      invalid_utf8.documents, ", too_short ", too_short.documents, ", too_long ",
      too_long.documents, ", repetitive ", repetitive.documents, ", nonprint ", nonprint.documents,
      "\n", "  train: ", train.documents, " documents, ", train_tokens, " tokens in ", train_shards,
      " shard(s); val: ", val.documents, " documents, ", val_tokens, " tokens in ", val_shards,
      " shard(s)\n", "  tokenizer: vocab ", vocab_size, ", ", line, "; trained in ",
      tokenizer_seconds, " s, encoded in ", encode_seconds, " s, total ", seconds, " s");
}

double split_draw(std::string_view doc, uint64_t seed) {
  uint64_t h = 1469598103934665603ull ^ (seed * 0x9E3779B97F4A7C15ull);  // FNV-1a, seeded
  for (char c : doc) {
    h ^= static_cast<uint8_t>(c);
    h *= 1099511628211ull;
  }
  h ^= h >> 33;  // FNV's low bits mix poorly: finish with a murmur-style avalanche
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ull;
  h ^= h >> 33;
  return static_cast<double>(h >> 11) * 0x1.0p-53;
}

int64_t write_split(const std::string& out_dir, const std::string& split,
                    const std::vector<int32_t>& tokens, int64_t vocab_size, int64_t max_tokens) {
  namespace fs = std::filesystem;
  STRATA_CHECK(max_tokens > 0, "write_split: max_tokens must be positive");
  const auto total = static_cast<int64_t>(tokens.size());
  const int64_t shards = (total + max_tokens - 1) / max_tokens;
  for (int64_t s = 0; s < shards; ++s) {
    const int64_t begin = s * max_tokens;
    const int64_t count = std::min(max_tokens, total - begin);
    write_shard((fs::path(out_dir) / shard_name(split, s)).string(), tokens.data() + begin, count,
                vocab_size);
  }
  // A loader globs <split>_*.bin, so shards left by a larger earlier run must go.
  for (const std::string& path : list_shards(out_dir, split)) {
    const std::string name = base_name(path);
    bool ours = false;
    for (int64_t s = 0; s < shards && !ours; ++s) ours = name == shard_name(split, s);
    if (!ours) fs::remove(path);
  }
  return shards;
}

PrepareReport prepare_text(const std::vector<std::string>& text_files, const std::string& out_dir,
                           int64_t vocab_size, double val_fraction, uint64_t seed,
                           const std::string& document_separator, const FilterConfig& filters) {
  const auto t0 = std::chrono::steady_clock::now();
  STRATA_CHECK(!text_files.empty(), "data.text lists no text files to prepare");
  STRATA_CHECK(val_fraction >= 0 && val_fraction < 1, "data.val_fraction = ", val_fraction,
               " must be in [0, 1)");
  PrepareReport report;
  report.files = static_cast<int64_t>(text_files.size());

  std::vector<std::string> texts;
  texts.reserve(text_files.size());
  for (const std::string& path : text_files) {
    try {
      texts.push_back(read_file(path));
    } catch (const Error& e) {
      fail("cannot read text file listed in data.text: ", e.what());
    }
  }

  std::vector<std::string_view> docs;
  for (const std::string& text : texts) {
    const auto pieces = split_documents(text, document_separator);
    docs.insert(docs.end(), pieces.begin(), pieces.end());
  }
  std::vector<Verdict> verdicts(docs.size());
  const auto n_docs = static_cast<int64_t>(docs.size());
#pragma omp parallel for schedule(dynamic, 16)
  for (int64_t i = 0; i < n_docs; ++i) verdicts[i] = judge_document(docs[i], filters);

  std::vector<std::string_view> kept;
  for (int64_t i = 0; i < n_docs; ++i) {
    add(report.seen, docs[i]);
    switch (verdicts[i]) {
      case Verdict::kept:
        add(report.kept, docs[i]);
        kept.push_back(docs[i]);
        break;
      case Verdict::invalid_utf8:
        add(report.invalid_utf8, docs[i]);
        break;
      case Verdict::too_short:
        add(report.too_short, docs[i]);
        break;
      case Verdict::too_long:
        add(report.too_long, docs[i]);
        break;
      case Verdict::repetitive:
        add(report.repetitive, docs[i]);
        break;
      case Verdict::nonprint:
        add(report.nonprint, docs[i]);
        break;
    }
  }
  STRATA_CHECK(!kept.empty(), "prepare: all ", report.seen.documents, " documents of ",
               text_files.size(), " file(s) were removed (invalid_utf8 ",
               report.invalid_utf8.documents, ", too_short ", report.too_short.documents,
               ", too_long ", report.too_long.documents, ", repetitive ",
               report.repetitive.documents, ", nonprint ", report.nonprint.documents,
               "); check data.document_separator (now ", nlohmann::json(document_separator).dump(),
               ") and data.filters");

  // Split. With two or more documents and a non-zero fraction, both splits get at least one.
  std::vector<double> draw(kept.size());
  std::vector<bool> is_val(kept.size());
  size_t n_val = 0, lowest = 0, highest = 0;
  for (size_t i = 0; i < kept.size(); ++i) {
    draw[i] = split_draw(kept[i], seed);
    is_val[i] = draw[i] < val_fraction;
    n_val += is_val[i];
    if (draw[i] < draw[lowest]) lowest = i;
    if (draw[i] > draw[highest]) highest = i;
  }
  if (kept.size() >= 2 && val_fraction > 0) {
    if (n_val == 0) is_val[lowest] = true;
    if (n_val == kept.size()) is_val[highest] = false;
  }
  std::vector<std::string_view> train_docs, val_docs;
  for (size_t i = 0; i < kept.size(); ++i) {
    (is_val[i] ? val_docs : train_docs).push_back(kept[i]);
    add(is_val[i] ? report.val : report.train, kept[i]);
  }

  auto t1 = std::chrono::steady_clock::now();
  const Tokenizer tok = Tokenizer::train_on_views(train_docs, vocab_size);
  report.tokenizer_seconds = seconds_since(t1);
  report.vocab_size = tok.vocab_size();

  t1 = std::chrono::steady_clock::now();
  const std::vector<int32_t> train_tokens = encode_split(tok, train_docs);
  const std::vector<int32_t> val_tokens = encode_split(tok, val_docs);
  report.encode_seconds = seconds_since(t1);
  report.train_tokens = static_cast<int64_t>(train_tokens.size());
  report.val_tokens = static_cast<int64_t>(val_tokens.size());

  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  STRATA_CHECK(!ec && fs::is_directory(out_dir), "cannot create data folder '", out_dir,
               "': ", ec.message());
  tok.save((fs::path(out_dir) / "tokenizer.json").string());
  report.train_shards =
      write_split(out_dir, "train", train_tokens, tok.vocab_size(), kMaxShardTokens);
  report.val_shards = write_split(out_dir, "val", val_tokens, tok.vocab_size(), kMaxShardTokens);
  report.seconds = seconds_since(t0);
  write_file_atomic((fs::path(out_dir) / "prepare_report.json").string(),
                    report.to_json().dump(2) + "\n");
  return report;
}

}  // namespace strata::data
