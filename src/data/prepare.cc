#include "data/prepare.h"

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <queue>

#include "core/error.h"
#include "core/log.h"
#include "data/dedup.h"
#include "data/file_util.h"
#include "data/filters.h"
#include "data/manifest.h"
#include "data/minhash.h"
#include "data/shard_writer.h"
#include "data/tokenizer.h"

namespace strata::data {

namespace fs = std::filesystem;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

nlohmann::json stats_json(const DocStats& s) {
  return {{"documents", s.documents}, {"bytes", s.bytes}};
}

void add(DocStats& s, int64_t bytes) {
  ++s.documents;
  s.bytes += bytes;
}

// A batch of documents read from the corpus: their bytes copied into one buffer (a reader's view
// lasts only until its next document), and the filters' verdicts, judged in parallel.
struct Batch {
  std::string text;
  struct Doc {
    size_t begin = 0, size = 0;
    int64_t oversize = 0;  // > 0: skipped unread, too long (corpus.h)
    Verdict verdict = Verdict::kept;
    DocKey key;                   // --dedup exact or minhash: of a kept document
    std::vector<uint64_t> bands;  // --dedup minhash: its band keys
  };
  std::vector<Doc> docs;
  std::string_view view(const Doc& d) const { return {text.data() + d.begin, d.size}; }
  int64_t bytes(const Doc& d) const {
    return d.oversize > 0 ? d.oversize : static_cast<int64_t>(d.size);
  }
};

// Reads every file's documents in order, in batches of about batch_bytes, and hands each batch to
// `fn` with its verdicts. The first pass judges them (the filters in parallel, then duplicates
// with --dedup, in corpus order) and appends them to `verdicts`; a later pass (`verdicts` already
// full) reads them back instead of judging again.
template <class Fn>
void for_each_batch(const std::vector<CorpusFile>& files, const PrepareOptions& o, BadRecords& bad,
                    std::vector<Verdict>& verdicts, Fn&& fn) {
  const bool judge = verdicts.empty();
  size_t next = 0;  // documents handed out so far
  Batch batch;
  ExactDedup exact;
  NearDedup near;
  const bool dedup = o.dedup != DedupMode::none, minhash = o.dedup == DedupMode::minhash;
  const MinHasher hasher(o.minhash);
  auto flush = [&] {
    const auto n = static_cast<int64_t>(batch.docs.size());
    if (judge) {
#pragma omp parallel for schedule(dynamic, 16)
      for (int64_t i = 0; i < n; ++i) {
        Batch::Doc& d = batch.docs[static_cast<size_t>(i)];
        d.verdict = d.oversize > 0 ? Verdict::too_long : judge_document(batch.view(d), o.filters);
        if (dedup && d.verdict == Verdict::kept) d.key = dedup_key(batch.view(d));
        if (minhash && d.verdict == Verdict::kept) hasher.band_keys(batch.view(d), d.bands);
      }
      for (Batch::Doc& d : batch.docs) {
        if (dedup && d.verdict == Verdict::kept && exact.seen(d.key))
          d.verdict = Verdict::duplicate;
        // Every document's bands are recorded, so a chain of near copies goes with its first.
        if (minhash && !d.bands.empty() &&
            (d.verdict == Verdict::kept || d.verdict == Verdict::duplicate)) {
          const bool hit = near.seen(d.bands);
          if (hit && d.verdict == Verdict::kept) d.verdict = Verdict::near_duplicate;
        }
        verdicts.push_back(d.verdict);
      }
    } else {
      STRATA_CHECK(next + batch.docs.size() <= verdicts.size(),
                   "prepare: the input changed while it was read (more documents than the first "
                   "pass saw)");
      for (Batch::Doc& d : batch.docs) d.verdict = verdicts[next++];
    }
    fn(batch);
    batch.text.clear();
    batch.docs.clear();
  };
  for (const CorpusFile& file : files) {
    const std::unique_ptr<DocumentReader> reader = open_documents(file, o.corpus, bad);
    Document doc;
    while (reader->next(doc)) {
      Batch::Doc d;
      d.begin = batch.text.size();
      d.size = doc.text.size();
      d.oversize = doc.oversize_bytes;
      batch.text.append(doc.text);
      batch.docs.push_back(d);
      if (static_cast<int64_t>(batch.text.size()) >= o.batch_bytes) flush();
    }
  }
  flush();
  bad.check();
}

// The tokenizer's training sample: every training document whose hash is below a threshold T,
// the largest T whose documents fit the budget of bytes. Kept as a max-heap on the hash; when the
// budget overflows, the largest hashes go and T falls to the last one removed, and no later
// document at or above T enters. Every removed hash is >= T, so the result is exactly
// {hash < T} over the whole corpus: the same set whatever the order of files and documents
// (BPE training sorts its words, so the tokenizer is the same too).
class Sample {
 public:
  Sample(int64_t budget, uint64_t seed) : budget_(budget), seed_(seed ^ 0x7a3c5e1f9b2d4086ull) {}
  void offer(int64_t ordinal, std::string_view doc) {
    const double h = split_draw(doc, seed_);
    if (h >= threshold_) return;
    heap_.push({h, ordinal, std::string(doc)});
    bytes_ += static_cast<int64_t>(doc.size());
    // Over budget: remove from the top, and with it every document of the same hash (duplicates).
    while (!heap_.empty() && (bytes_ > budget_ || heap_.top().hash >= threshold_)) {
      threshold_ = std::min(threshold_, heap_.top().hash);
      bytes_ -= static_cast<int64_t>(heap_.top().text.size());
      heap_.pop();
    }
  }
  // The documents in corpus order, without `excluded` (an ordinal forced into validation).
  std::vector<std::string> take(int64_t excluded) {
    std::vector<Entry> all;
    while (!heap_.empty()) {
      all.push_back(std::move(const_cast<Entry&>(heap_.top())));
      heap_.pop();
    }
    std::sort(all.begin(), all.end(),
              [](const Entry& a, const Entry& b) { return a.ordinal < b.ordinal; });
    std::vector<std::string> docs;
    for (Entry& e : all)
      if (e.ordinal != excluded) docs.push_back(std::move(e.text));
    return docs;
  }

 private:
  struct Entry {
    double hash;
    int64_t ordinal;
    std::string text;
    bool operator<(const Entry& o) const {
      return hash != o.hash ? hash < o.hash : ordinal < o.ordinal;
    }
  };
  int64_t budget_;
  uint64_t seed_;
  int64_t bytes_ = 0;
  double threshold_ = 2;  // hashes are in [0, 1)
  std::priority_queue<Entry> heap_;
};

// Pass 1's decisions that pass 2 needs: how many kept documents there are and which ones the
// split rule below moves.
struct SplitPlan {
  int64_t kept = 0, n_val = 0;
  int64_t lowest = -1, highest = -1;  // ordinals of the kept documents with the extreme draws
  double lowest_draw = 2, highest_draw = -1;
  int64_t forced_val = -1, forced_train = -1;
  std::string highest_text;  // the document forced into train when every draw says val
};

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
            {"nonprint", stats_json(nonprint)},
            {"duplicate", stats_json(duplicate)},
            {"near_duplicate", stats_json(near_duplicate)}}},
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
          {"tokenizer", tokenizer},
          {"tokenizer_sample", stats_json(tokenizer_sample)},
          {"records", records},
          {"bad_records", bad_records},
          {"bad_examples", bad_examples},
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
      ", duplicate ", duplicate.documents, ", near_duplicate ", near_duplicate.documents, "\n",
      "  train: ", train.documents, " documents, ", train_tokens, " tokens in ", train_shards,
      " shard(s); val: ", val.documents, " documents, ", val_tokens, " tokens in ", val_shards,
      " shard(s)\n", "  tokenizer: ", tokenizer, ", vocab ", vocab_size, ", ", line,
      tokenizer == "trained"
          ? cat("; trained on ", tokenizer_sample.bytes, " bytes in ", tokenizer_seconds, " s")
          : std::string(),
      ", encoded in ", encode_seconds, " s, total ", seconds, " s",
      bad_records > 0 ? cat("\n  bad records: ", bad_records, " of ", records, ", the first ",
                            bad_examples.empty() ? std::string() : bad_examples.front())
                      : std::string());
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

PrepareReport prepare(const PrepareOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  STRATA_CHECK(o.val_fraction >= 0 && o.val_fraction < 1, "data.val_fraction = ", o.val_fraction,
               " must be in [0, 1)");
  STRATA_CHECK(o.batch_bytes > 0 && o.tokenizer_sample_bytes > 0,
               "prepare: the batch and the tokenizer sample need a positive size");
  STRATA_CHECK(o.eot_token.empty() || !o.tokenizer.empty(),
               "prepare: --eot-token names a token of the tokenizer given with --tokenizer; a "
               "trained tokenizer ends documents with ",
               kEndOfText);
  const std::vector<CorpusFile> files = expand_inputs(o.inputs, o.corpus.format);
  CorpusOptions corpus = o.corpus;
  // A document of more bytes than 4 x max_doc_chars has more characters than that too.
  corpus.max_document_bytes = std::max<int64_t>(corpus.max_document_bytes,
                                                4 * std::max<int64_t>(1, o.filters.max_doc_chars));
  PrepareOptions opt = o;
  opt.corpus = corpus;
  PrepareReport report;
  report.files = static_cast<int64_t>(files.size());

  // ---- pass 1: filters, split, tokenizer sample ------------------------------------------------
  const bool train_tokenizer = o.tokenizer.empty();
  Sample sample(o.tokenizer_sample_bytes, o.seed);
  SplitPlan plan;
  // Every document's verdict, from the first pass to the second (a byte a document).
  std::vector<Verdict> verdicts;
  {
    BadRecords bad(o.corpus.max_bad_fraction);
    for_each_batch(files, opt, bad, verdicts, [&](const Batch& batch) {
      for (const Batch::Doc& d : batch.docs) {
        const int64_t bytes = batch.bytes(d);
        add(report.seen, bytes);
        switch (d.verdict) {
          case Verdict::kept:
            add(report.kept, bytes);
            break;
          case Verdict::invalid_utf8:
            add(report.invalid_utf8, bytes);
            continue;
          case Verdict::too_short:
            add(report.too_short, bytes);
            continue;
          case Verdict::too_long:
            add(report.too_long, bytes);
            continue;
          case Verdict::repetitive:
            add(report.repetitive, bytes);
            continue;
          case Verdict::nonprint:
            add(report.nonprint, bytes);
            continue;
          case Verdict::duplicate:
            add(report.duplicate, bytes);
            continue;
          case Verdict::near_duplicate:
            add(report.near_duplicate, bytes);
            continue;
        }
        const std::string_view text = batch.view(d);
        const int64_t ordinal = plan.kept++;
        const double draw = split_draw(text, o.seed);
        plan.n_val += draw < o.val_fraction;
        if (draw < plan.lowest_draw) plan.lowest = ordinal, plan.lowest_draw = draw;
        if (draw > plan.highest_draw) {
          plan.highest = ordinal, plan.highest_draw = draw;
          if (train_tokenizer) plan.highest_text = std::string(text);
        }
        if (train_tokenizer && draw >= o.val_fraction) sample.offer(ordinal, text);
      }
    });
    report.bad_records = bad.count();
    report.records = bad.records();
    report.bad_examples = bad.examples();
  }
  STRATA_CHECK(plan.kept > 0, "prepare: all ", report.seen.documents, " documents of ",
               files.size(), " file(s) were removed (invalid_utf8 ", report.invalid_utf8.documents,
               ", too_short ", report.too_short.documents, ", too_long ", report.too_long.documents,
               ", repetitive ", report.repetitive.documents, ", nonprint ",
               report.nonprint.documents, ", duplicate ", report.duplicate.documents,
               ", near_duplicate ", report.near_duplicate.documents, "); check the separator (now ",
               nlohmann::json(o.corpus.document_separator).dump(), "), the JSON field (now '",
               o.corpus.field, "') and the filters");
  // With two or more documents and a non-zero fraction, both splits get at least one.
  if (plan.kept >= 2 && o.val_fraction > 0) {
    if (plan.n_val == 0) plan.forced_val = plan.lowest;
    if (plan.n_val == plan.kept) plan.forced_train = plan.highest;
  }

  // ---- the tokenizer ---------------------------------------------------------------------------
  std::error_code ec;
  fs::create_directories(o.out_dir, ec);
  STRATA_CHECK(!ec && fs::is_directory(o.out_dir), "cannot create data folder '", o.out_dir,
               "': ", ec.message());
  const std::string tokenizer_file = (fs::path(o.out_dir) / "tokenizer.json").string();
  auto t1 = std::chrono::steady_clock::now();
  std::optional<Tokenizer> tok;
  if (train_tokenizer) {
    std::vector<std::string> docs = sample.take(plan.forced_val);
    if (plan.forced_train >= 0) docs = {plan.highest_text};
    for (const std::string& d : docs) add(report.tokenizer_sample, static_cast<int64_t>(d.size()));
    tok = Tokenizer::train(docs, o.vocab_size);
    tok->save(tokenizer_file);
  } else {
    tok = Tokenizer::load(o.tokenizer, o.eot_token);
    report.tokenizer = o.tokenizer;
    // The file itself, byte for byte (the loader and transformers read it as it was).
    if (!fs::exists(tokenizer_file) || !fs::equivalent(o.tokenizer, tokenizer_file))
      write_file_atomic(tokenizer_file, read_file(o.tokenizer));
  }
  report.tokenizer_seconds = seconds_since(t1);
  report.vocab_size = tok->vocab_size();

  // ---- pass 2: encode and write ----------------------------------------------------------------
  t1 = std::chrono::steady_clock::now();
  ShardWriter train(o.out_dir, "train", tok->vocab_size(), o.max_shard_tokens);
  ShardWriter val(o.out_dir, "val", tok->vocab_size(), o.max_shard_tokens);
  {
    BadRecords bad(o.corpus.max_bad_fraction > 0 ? o.corpus.max_bad_fraction : 1.0);
    int64_t ordinal = 0;
    std::vector<std::string_view> views;
    std::vector<bool> to_val;
    for_each_batch(files, opt, bad, verdicts, [&](const Batch& batch) {
      views.clear();
      to_val.clear();
      for (const Batch::Doc& d : batch.docs) {
        if (d.verdict != Verdict::kept) continue;
        const std::string_view text = batch.view(d);
        const int64_t k = ordinal++;
        const bool is_val = k == plan.forced_val ||
                            (k != plan.forced_train && split_draw(text, o.seed) < o.val_fraction);
        add(is_val ? report.val : report.train, static_cast<int64_t>(text.size()));
        views.push_back(text);
        to_val.push_back(is_val);
      }
      const std::vector<std::vector<int32_t>> encoded = tok->encode_batch(views);
      const int32_t eot = tok->eot_id();
      for (size_t i = 0; i < encoded.size(); ++i) {
        ShardWriter& w = to_val[i] ? val : train;
        w.append(encoded[i].data(), static_cast<int64_t>(encoded[i].size()));
        w.append(&eot, 1);
      }
    });
    STRATA_CHECK(ordinal == plan.kept, "prepare: the input changed while it was read (", plan.kept,
                 " documents kept in the first pass, ", ordinal, " in the second)");
  }
  Manifest manifest;
  manifest.vocab_size = tok->vocab_size();
  manifest.splits["train"] = train.finish();
  manifest.splits["val"] = val.finish();
  report.encode_seconds = seconds_since(t1);
  report.train_tokens = train.tokens();
  report.val_tokens = val.tokens();
  report.train_shards = static_cast<int64_t>(manifest.splits["train"].size());
  report.val_shards = static_cast<int64_t>(manifest.splits["val"].size());
  write_manifest(o.out_dir, manifest);  // last: a folder with a manifest is complete
  report.seconds = seconds_since(t0);
  write_file_atomic((fs::path(o.out_dir) / "prepare_report.json").string(),
                    report.to_json().dump(2) + "\n");
  return report;
}

PrepareReport prepare_text(const std::vector<std::string>& text_files, const std::string& out_dir,
                           int64_t vocab_size, double val_fraction, uint64_t seed,
                           const std::string& document_separator, const FilterConfig& filters,
                           DedupMode dedup) {
  STRATA_CHECK(!text_files.empty(), "data.text lists no text files to prepare");
  PrepareOptions o;
  o.inputs = text_files;
  o.out_dir = out_dir;
  o.vocab_size = vocab_size;
  o.val_fraction = val_fraction;
  o.seed = seed;
  o.corpus.format = CorpusFormat::text;
  o.corpus.document_separator = document_separator;
  o.filters = filters;
  o.dedup = dedup;
  return prepare(o);
}

}  // namespace strata::data
