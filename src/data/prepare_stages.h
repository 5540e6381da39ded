// The four stages of a prepare (prepare.h runs them), each a pure function of the inputs, the
// options and the records of the stages before, so any worker may run any unit and the output is
// the same whatever the number of threads or processes:
//
//   scan      one unit (a file, or a range of one): every document's filter verdict, and for the
//             documents the filters keep their bytes, split draw, dedup keys and the unit's share
//             of the tokenizer sample (the smallest sample hashes that fit the budget)
//   plan      all units in corpus order: duplicates across the whole corpus (the first copy kept),
//             the train/validation split, the tokenizer sample, and the tokenizer
//   encode    one unit: its kept documents encoded, the tokens of each split written apart
//   assemble  one output shard: its tokens gathered from the units' in corpus order
#pragma once
#include <cstdint>
#include <functional>
#include <queue>
#include <string>
#include <string_view>
#include <vector>

#include "data/corpus.h"
#include "data/dedup.h"
#include "data/filters.h"
#include "data/manifest.h"
#include "data/prepare.h"

namespace strata::data {

class Tokenizer;

// A tokenizer-sample candidate: a training document (by its draw) with its sample hash.
struct SampleEntry {
  double hash = 0;
  int64_t ordinal = 0;  // scan: the index among the unit's kept documents; plan: corpus-wide
  int64_t bytes = 0;
  int64_t offset = 0;           // scan: of its text in the unit's .sample file
  int64_t unit = 0, index = 0;  // plan: the unit, and the index among its kept documents
};

// Documents read from a unit: their bytes copied into one buffer (a reader's view lasts only until
// its next document).
struct DocBatch {
  struct Doc {
    size_t begin = 0, size = 0;
    int64_t oversize = 0;  // > 0: skipped unread, too long (corpus.h)
  };
  std::string text;
  std::vector<Doc> docs;
  std::string_view view(const Doc& d) const { return {text.data() + d.begin, d.size}; }
  int64_t bytes(const Doc& d) const {
    return d.oversize > 0 ? d.oversize : static_cast<int64_t>(d.size);
  }
};

// Reads the unit's documents in order, in batches of about batch_bytes, handing each to `fn`.
void read_batches(const CorpusFile& unit, const CorpusOptions& corpus, int64_t batch_bytes,
                  BadRecords& bad, const std::function<void(const DocBatch&)>& fn);

// The tokenizer's training sample: every training document whose sample hash is below a
// threshold T, the largest T whose documents fit the budget of bytes. Kept as a max-heap on the
// hash; when the budget overflows, the largest hashes go and T falls to the last one removed, and
// no later document at or above T enters. Every removed hash is >= T, so the result is exactly
// {hash < T} of all documents offered, whatever their order.
class Sample {
 public:
  explicit Sample(int64_t budget) : budget_(budget) {}
  // `text` may be empty when only the selection is wanted (the plan's global sample).
  void offer(const SampleEntry& entry, std::string_view text);
  // Every document offered with a hash below this is in the sample.
  double threshold() const { return threshold_; }
  // The entries, with their texts when offered, in ordinal order.
  std::vector<std::pair<SampleEntry, std::string>> take();

 private:
  struct Item {
    SampleEntry entry;
    std::string text;
    bool operator<(const Item& o) const {
      return entry.hash != o.entry.hash ? entry.hash < o.entry.hash
                                        : entry.ordinal < o.entry.ordinal;
    }
  };
  int64_t budget_;
  int64_t bytes_ = 0;
  double threshold_ = 2;  // hashes are in [0, 1)
  std::priority_queue<Item> heap_;
};

// A document's sample hash: independent of its split draw.
double sample_hash(std::string_view doc, uint64_t seed);

// Where the stages keep one unit's files (prepare_work.h names them).
struct UnitFiles {
  std::string scan;     // the scan's record (UnitScan)
  std::string sample;   // the texts of the unit's own tokenizer sample
  std::string docs;     // every document's row (doc_rows.h)
  std::string removed;  // the plan's: the kept documents found to be duplicates (UnitPlan)
};

struct UnitScan {
  int64_t documents = 0;  // rows in the unit's docs file
  int64_t kept = 0;       // of them, documents the filters kept
  // The unit's own sample, by a budget of its share of the whole (prepare.cc): the candidates the
  // plan takes the texts of the global sample from (when a unit lacks one, it reads the unit
  // again). In ordinal order; their texts in the .sample file.
  std::vector<SampleEntry> sample;
  int64_t bad = 0, records = 0;
  std::vector<std::string> bad_examples;
  double seconds = 0;

  void save(const std::string& path) const;
  static UnitScan load(const std::string& path);
};

// Scans `unit`: every document's row to files.docs, its sample's texts (at most sample_budget
// bytes) to files.sample, each whole before returning; the record is the caller's to save.
UnitScan scan_unit(const PrepareOptions& o, const CorpusFile& unit, int64_t sample_budget,
                   const UnitFiles& files);

// Where a unit's documents are after the plan. The duplicates it found among the documents the
// filters kept are in the unit's `removed` file, (document index, verdict) in document order,
// read as the unit is encoded (RemovedReader).
struct UnitPlan {
  int64_t first_ordinal = 0;  // corpus-wide ordinal of the unit's first finally kept document
  int64_t removed = 0;        // entries in the removed file
};
struct Removed {
  int64_t doc = 0;  // index among the unit's documents
  Verdict verdict = Verdict::duplicate;
  uint8_t padding[7] = {};
};

struct Plan {
  std::vector<UnitPlan> units;
  int64_t kept = 0;  // documents in the corpus after the filters and deduplication
  // A kept document's ordinal forced into validation (none had a draw below val_fraction), or
  // into training (all had); -1: none.
  int64_t forced_val = -1, forced_train = -1;
  PrepareReport report;  // seen, kept, removed, bad records, tokenizer

  void save(const std::string& path) const;
  static Plan load(const std::string& path);
};

// Reads every unit's scan in order, decides the plan and trains (or loads) the tokenizer, saved
// to out_dir/tokenizer.json; writes each unit's removed file. The deduplication sorts its keys
// in `sort_dir` (emptied before and after).
Plan make_plan(const PrepareOptions& o, const std::vector<CorpusFile>& units,
               const std::vector<UnitFiles>& files, const std::string& sort_dir);

struct UnitTokens {
  DocStats train, val;
  int64_t train_tokens = 0, val_tokens = 0;
  double seconds = 0;
  double scan_seconds = 0;  // the unit's scan (carried here so the report need not reload it)

  void save(const std::string& path) const;
  static UnitTokens load(const std::string& path);
};

// Encodes one unit's kept documents; writes its tokens (int32) to the two files.
UnitTokens encode_unit(const PrepareOptions& o, const Tokenizer& tok, const CorpusFile& unit,
                       int64_t unit_index, const UnitFiles& files, const Plan& plan,
                       const std::string& train_tokens, const std::string& val_tokens);

// Writes shard `index` of `split` (tokens [index x max_shard_tokens, ...) of the units' token
// files, in unit order) to out_dir and returns its manifest entry.
ShardEntry assemble_shard(const PrepareOptions& o, const std::string& split, int64_t index,
                          int64_t vocab_size, const std::vector<std::string>& token_files,
                          const std::vector<int64_t>& unit_tokens);

void save_shard_entry(const std::string& path, const ShardEntry& entry);
ShardEntry load_shard_entry(const std::string& path);

}  // namespace strata::data
