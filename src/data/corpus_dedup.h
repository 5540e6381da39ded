// Duplicates across a whole corpus in bounded memory (the plan stage's deduplication,
// prepare_stages.h). Every document the filters kept has a number in corpus order; its exact key
// (dedup.h) and, with MinHash, its band keys (minhash.h) are added with that number to external
// sorts (external_sort.h). Sorted, equal keys sit together: the first document of each key is the
// original, every later one is flagged. The flagged numbers are sorted again, and the plan reads
// the verdicts back in corpus order.
//
// The same answer as a set of every key seen so far, walked in corpus order (a document is an
// exact duplicate when its key was seen; a near duplicate when any of its band keys was, from any
// earlier document, kept or not, so a chain of near copies goes with its first), but memory is the
// sorts' budget whatever the corpus: datatrove's sorted signature files, in one process. The
// disk holds 24 bytes a document (exact) plus 16 per band key (MinHash) while the plan runs.
#pragma once
#include <cstdint>
#include <string>

#include "data/dedup.h"
#include "data/external_sort.h"
#include "data/filters.h"

namespace strata::data {

class CorpusDedup {
 public:
  // Run files go to `dir` (which must exist); memory_bytes bounds what the sorts hold at once.
  CorpusDedup(const std::string& dir, int64_t memory_bytes);

  // Adds document `doc` (numbers ascending from 0, every kept document once).
  void add_exact(const DocKey& key, int64_t doc);
  void add_bands(const uint64_t* bands, size_t n, int64_t doc);

  // After every add: sorts, and finds the flagged documents.
  void finish();
  // The verdict of document `doc` (kept, duplicate or near_duplicate; an exact duplicate is
  // reported as such even when it is also a near one). Asked in ascending order of doc.
  Verdict verdict(int64_t doc);

  int64_t duplicates() const { return exact_found_; }  // exact duplicates found by finish()
  size_t runs() const;  // run files written (0: all sorted in memory)

 private:
  struct ExactEntry {
    uint64_t a, b;
    int64_t doc;
    bool operator<(const ExactEntry& o) const {
      if (a != o.a) return a < o.a;
      if (b != o.b) return b < o.b;
      return doc < o.doc;
    }
  };
  struct BandEntry {
    uint64_t key;
    int64_t doc;
    bool operator<(const BandEntry& o) const { return key != o.key ? key < o.key : doc < o.doc; }
  };
  // The flagged documents of one kind, read back in ascending order.
  struct Flags {
    ExternalSort<int64_t> sorted;
    int64_t next = -1;  // the smallest not yet passed; -1: none left
    bool contains(int64_t doc);
  };

  ExternalSort<ExactEntry> exact_;
  ExternalSort<BandEntry> bands_;
  Flags exact_flags_, near_flags_;
  int64_t exact_found_ = 0;
};

}  // namespace strata::data
