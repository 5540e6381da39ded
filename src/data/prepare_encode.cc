// The encode and assemble stages (prepare_stages.h): a unit's kept documents to tokens, and the
// units' tokens to the output's shards.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "data/doc_rows.h"
#include "data/file_util.h"
#include "data/prepare_record.h"
#include "data/prepare_stages.h"
#include "data/shard_writer.h"
#include "data/tokenizer.h"
#include "io/atomic_file.h"

namespace strata::data {

namespace fs = std::filesystem;

namespace {

// Reads int32 tokens from a unit's token file, from a given token on.
class TokenFile {
 public:
  TokenFile(const std::string& path, int64_t first)
      : path_(path), f_(std::fopen(path.c_str(), "rb")) {
    STRATA_CHECK(f_ != nullptr, "prepare: cannot open '", path, "'; run the encode stage again");
    STRATA_CHECK(::fseeko(f_, static_cast<off_t>(first * 4), SEEK_SET) == 0,
                 "prepare: cannot seek ", "in '", path, "'");
  }
  ~TokenFile() { std::fclose(f_); }
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;
  void read(int32_t* out, size_t n) {
    STRATA_CHECK(std::fread(out, 4, n, f_) == n, "prepare: '", path_,
                 "' is shorter than its record says; remove it and run the encode stage again");
  }

 private:
  std::string path_;
  FILE* f_;
};

}  // namespace

void UnitTokens::save(const std::string& path) const {
  RecordWriter w;
  w.put(train);
  w.put(val);
  w.put(train_tokens);
  w.put(val_tokens);
  w.put(seconds);
  w.put(scan_seconds);
  write_file_atomic(path, w.bytes());
}

UnitTokens UnitTokens::load(const std::string& path) {
  RecordReader r(read_file(path), path);
  UnitTokens t;
  t.train = r.get<DocStats>();
  t.val = r.get<DocStats>();
  t.train_tokens = r.get<int64_t>();
  t.val_tokens = r.get<int64_t>();
  t.seconds = r.get<double>();
  t.scan_seconds = r.get<double>();
  return t;
}

UnitTokens encode_unit(const PrepareOptions& o, const Tokenizer& tok, const CorpusFile& unit,
                       int64_t unit_index, const UnitFiles& files, const Plan& plan,
                       const std::string& train_tokens, const std::string& val_tokens) {
  const auto t0 = std::chrono::steady_clock::now();
  const UnitPlan& up = plan.units[static_cast<size_t>(unit_index)];
  const UnitScan scan = UnitScan::load(files.scan);
  UnitTokens out;
  io::AtomicWriter train(train_tokens), val(val_tokens);
  BadRecords bad(1.0);  // the scan judged the records already
  DocRowReader rows(files.docs, o.dedup == DedupMode::minhash ? o.minhash.bands : 0);
  StreamReader removed_file(files.removed);
  Removed next_removed;  // the next duplicate (doc -1: none left)
  auto advance_removed = [&] {
    if (!removed_file.get(next_removed)) next_removed.doc = -1;
  };
  advance_removed();
  int64_t doc = 0, ordinal = up.first_ordinal, removed = 0;
  std::vector<std::string_view> views;
  std::vector<bool> to_val;
  const int32_t eot = tok.eot_id();
  read_batches(unit, o.corpus, o.batch_bytes, bad, [&](const DocBatch& batch) {
    views.clear();
    to_val.clear();
    for (const DocBatch::Doc& d : batch.docs) {
      const int64_t i = doc++;
      DocRow row;
      STRATA_CHECK(rows.next(row), "prepare: '", unit.path,
                   "' changed while it was prepared (it has more documents than its scan saw)");
      if (row.verdict != Verdict::kept) continue;
      if (next_removed.doc == i) {
        ++removed;
        advance_removed();
        continue;
      }
      const std::string_view text = batch.view(d);
      const int64_t n = ordinal++;
      const bool is_val =
          n == plan.forced_val || (n != plan.forced_train && row.draw < o.val_fraction);
      (is_val ? out.val : out.train).add(static_cast<int64_t>(text.size()));
      views.push_back(text);
      to_val.push_back(is_val);
    }
    const std::vector<std::vector<int32_t>> encoded = tok.encode_batch(views);
    for (size_t i = 0; i < encoded.size(); ++i) {
      io::AtomicWriter& w = to_val[i] ? val : train;
      w.write(encoded[i].data(), encoded[i].size() * sizeof(int32_t));
      w.write(&eot, sizeof eot);
      (to_val[i] ? out.val_tokens : out.train_tokens) +=
          static_cast<int64_t>(encoded[i].size()) + 1;
    }
  });
  STRATA_CHECK(doc == scan.documents, "prepare: '", unit.path, "' changed while it was prepared (",
               scan.documents, " documents when it was scanned, ", doc, " now)");
  STRATA_CHECK(removed == up.removed && next_removed.doc < 0, "prepare: '", files.removed,
               "' does not match the plan; remove the folder's .prepare subfolder and run again");
  train.commit();
  val.commit();
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  out.scan_seconds = scan.seconds;
  return out;
}

ShardEntry assemble_shard(const PrepareOptions& o, const std::string& split, int64_t index,
                          int64_t vocab_size, const std::vector<std::string>& token_files,
                          const std::vector<int64_t>& unit_tokens) {
  const int64_t begin = index * o.max_shard_tokens;
  int64_t total = 0;
  for (int64_t n : unit_tokens) total += n;
  const int64_t end = std::min(total, begin + o.max_shard_tokens);
  STRATA_CHECK(begin < end, "prepare: shard ", index, " of ", split, " is past the end (", total,
               " tokens)");
  ShardWriter writer(o.out_dir, split, vocab_size, o.max_shard_tokens, index);
  std::vector<int32_t> buf(size_t{1} << 20);
  int64_t unit_start = 0;  // the global index of the unit's first token
  for (size_t u = 0; u < token_files.size() && unit_start < end; ++u) {
    const int64_t unit_end = unit_start + unit_tokens[u];
    const int64_t from = std::max(begin, unit_start), to = std::min(end, unit_end);
    if (from < to) {
      TokenFile in(token_files[u], from - unit_start);
      for (int64_t at = from; at < to;) {
        const auto n =
            static_cast<size_t>(std::min<int64_t>(to - at, static_cast<int64_t>(buf.size())));
        in.read(buf.data(), n);
        writer.append(buf.data(), static_cast<int64_t>(n));
        at += static_cast<int64_t>(n);
      }
    }
    unit_start = unit_end;
  }
  std::vector<ShardEntry> done = writer.finish(/*remove_others=*/false);
  STRATA_CHECK(done.size() == 1, "prepare: shard ", index, " of ", split, " came out as ",
               done.size(), " files");
  return done.front();
}

void save_shard_entry(const std::string& path, const ShardEntry& entry) {
  RecordWriter w;
  w.put_string(entry.file);
  w.put(entry.tokens);
  w.put(entry.xxh3);
  write_file_atomic(path, w.bytes());
}

ShardEntry load_shard_entry(const std::string& path) {
  RecordReader r(read_file(path), path);
  ShardEntry e;
  e.file = r.get_string();
  e.tokens = r.get<int64_t>();
  e.xxh3 = r.get<uint64_t>();
  return e;
}

}  // namespace strata::data
