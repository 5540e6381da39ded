// The prepare step: corpus files -> filtered documents -> train/val split -> tokenizer -> token
// shards, plus a report of what was kept and why the rest was dropped. It streams: documents are
// read through a bounded buffer (corpus.h), encoded a batch at a time, and written as they come,
// so its memory does not grow with the corpus. The corpus is cut into units (files, and ranges of
// large JSON Lines files) that its workers share (threads within a process; processes under
// mpirun or srun, or the tasks of a SLURM array job, one stage at a time); four stages
// (prepare_stages.h) leave per-unit completion records in out_dir/.prepare (prepare_work.h), so a
// killed prepare resumes from what was finished. The output is the same, byte for byte, whatever
// the number of threads or processes and however often it was interrupted.
//
//   out_dir/tokenizer.json       Hugging Face tokenizer.json (trained, or the one given)
//   out_dir/train_000.bin, ...   token shards (shard.h), at most max_shard_tokens each
//   out_dir/val_000.bin, ...       (none when no document went to validation)
//   out_dir/manifest.json        every shard with its token count and XXH3 (manifest.h), last
//   out_dir/prepare_report.json  PrepareReport::to_json()
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data/corpus.h"
#include "data/data_config.h"
#include "data/minhash.h"

namespace strata::data {

// What a prepare process runs: everything (the default: workers share the units of each stage and
// wait for each other between stages), or one stage, for launchers whose tasks need not run at
// once (a SLURM array job: scan and encode as arrays, plan and assemble as single tasks).
enum class PrepareStage { all, scan, plan, encode, assemble };

inline constexpr int64_t kMaxShardTokens = 100'000'000;

struct DocStats {
  int64_t documents = 0;
  int64_t bytes = 0;
  void add(int64_t doc_bytes, int64_t docs = 1) {
    documents += docs;
    bytes += doc_bytes;
  }
};

struct PrepareOptions {
  std::vector<std::string> inputs;  // files, directories, glob patterns (corpus.h)
  std::string out_dir;
  int64_t vocab_size = 8192;  // of a trained tokenizer
  double val_fraction = 0.05;
  uint64_t seed = 1337;  // the split and the tokenizer sample
  CorpusOptions corpus;
  FilterConfig filters;
  DedupMode dedup = DedupMode::none;  // identical (exact), or also near (minhash) copies removed
  MinHashOptions minhash;             // --dedup minhash
  // An existing tokenizer.json to encode with ("": train one on a sample of the train split).
  std::string tokenizer;
  // With `tokenizer`: the token that ends each document ("": the first of <|endoftext|>,
  // <|end_of_text|>, </s> the tokenizer has).
  std::string eot_token;
  // The tokenizer trains on at most this many bytes of training documents: those with the
  // smallest hash of (seed, text), so the sample is the same whatever the file order, and the
  // whole train split when it fits.
  int64_t tokenizer_sample_bytes = int64_t{512} << 20;
  int64_t batch_bytes = int64_t{32} << 20;  // documents read, filtered and encoded at once
  // What the deduplication's sorts hold in memory at once (more spills to disk; the output is
  // the same whatever it is).
  int64_t dedup_memory_bytes = int64_t{256} << 20;
  int64_t max_shard_tokens = kMaxShardTokens;
  // Uncompressed JSON Lines files larger than this are read as ranges of about this size.
  int64_t range_bytes = int64_t{256} << 20;
  // This process is worker `worker` of `workers` (unit u goes to worker u % workers).
  int workers = 1, worker = 0;
  PrepareStage stage = PrepareStage::all;
};

struct PrepareReport {
  int64_t files = 0;
  DocStats seen, kept;
  // Removed, per filter (a document counts under the first filter it fails).
  DocStats invalid_utf8, too_short, too_long, repetitive, nonprint, duplicate, near_duplicate;
  DocStats train, val;                       // kept documents per split
  int64_t train_tokens = 0, val_tokens = 0;  // including one <|endoftext|> per document
  int64_t train_shards = 0, val_shards = 0;
  int64_t vocab_size = 0;             // of the tokenizer
  std::string tokenizer = "trained";  // or the path of the one given
  DocStats tokenizer_sample;          // what a trained tokenizer learned from
  // Units read again for sample texts their own share of the sample lacked (prepare_plan.cc).
  int64_t tokenizer_sample_rereads = 0;
  int64_t bad_records = 0, records = 0;   // jsonl records that could not be read, of all read
  std::vector<std::string> bad_examples;  // "file:line: why", the first few
  // The stages' times: tokenizer and seconds of this process; scan and encode summed over units
  // (worker-seconds).
  double tokenizer_seconds = 0, scan_seconds = 0, encode_seconds = 0, seconds = 0;
  int64_t units = 0;  // of work: files, and ranges of large ones
  int workers = 1;
  // A worker other than the one that writes the manifest (or a single stage) reports its part.
  bool complete = true;
  PrepareStage stage = PrepareStage::all;
  int worker = 0;
  int64_t units_scanned = 0, units_encoded = 0, shards_written = 0;  // by this process
  int64_t reused = 0;  // records of an interrupted run found done and reused (by every worker)

  nlohmann::json to_json() const;
  static PrepareReport from_json(const nlohmann::json& j);
  std::string summary() const;  // a few lines for the log
};

PrepareReport prepare(const PrepareOptions& options);

// The config's form (data.source = "text", Trainer::prepare_data): text files split at
// `document_separator` into a trained tokenizer's shards.
PrepareReport prepare_text(const std::vector<std::string>& text_files, const std::string& out_dir,
                           int64_t vocab_size, double val_fraction, uint64_t seed,
                           const std::string& document_separator, const FilterConfig& filters,
                           DedupMode dedup = DedupMode::none);

// A kept document goes to validation when split_draw(doc, seed) < val_fraction. The draw is a
// hash of (seed, the document's bytes), uniform in [0, 1): the split survives reordering files
// or changing filters, and duplicate documents land in the same split.
double split_draw(std::string_view doc, uint64_t seed);

}  // namespace strata::data

namespace strata {
template <>
struct EnumNames<data::PrepareStage> {
  static constexpr std::string_view names[] = {"all", "scan", "plan", "encode", "assemble"};
};
}  // namespace strata
