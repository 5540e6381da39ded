// Near-duplicate removal by MinHash with locality-sensitive hashing (`strata prepare --dedup
// minhash`), as GPT-3, RefinedWeb and datatrove do it: a document is the set of its word 5-grams
// (shingles) after a light normalisation (ASCII lower-cased; ASCII punctuation and whitespace
// separate words); its signature is the minimum of each of bands x rows hash functions over that
// set; each band of `rows` minima is hashed into one key. Two documents that share any band key
// are duplicates: with Jaccard similarity s they share one with probability 1 - (1 - s^rows)^bands
// (14 bands of 8, datatrove's default: 50% at s = 0.72, 96% at s = 0.85, 0.2% at s = 0.5).
//
// In corpus order, a document whose band keys include one seen before (from any earlier document,
// kept or not, so a chain of near copies goes with its first member) is removed; the first is
// kept. The prepare finds them with sorted band files on disk, as datatrove does, in bounded
// memory (corpus_dedup.h); NearDedup below, every key in one hash table (~224 bytes a document at
// 14 bands), is the reference it is tested against.
#pragma once
#include <cstdint>
#include <string_view>
#include <vector>

namespace strata::data {

struct MinHashOptions {
  int ngram = 5;   // words per shingle
  int bands = 14;  // band keys per document
  int rows = 8;    // minima per band
  uint64_t seed = 1;
};

class MinHasher {
 public:
  explicit MinHasher(const MinHashOptions& options);
  // The document's band keys, options.bands of them (thread-safe). A document without words has
  // none (keys is left empty): it is never a near duplicate.
  void band_keys(std::string_view doc, std::vector<uint64_t>& keys) const;
  // The bands x rows minima (tests, and the estimate of Jaccard similarity below).
  std::vector<uint64_t> signature(std::string_view doc) const;
  const MinHashOptions& options() const { return o_; }

 private:
  MinHashOptions o_;
  std::vector<uint64_t> a_, b_;  // the permutations (a x + b) mod (2^61 - 1)
};

// The fraction of equal minima of two signatures: an estimate of the Jaccard similarity.
double estimated_jaccard(const std::vector<uint64_t>& x, const std::vector<uint64_t>& y);

// The band keys seen so far (one growable open-addressing table).
class NearDedup {
 public:
  // True when any of `keys` was seen before; records all of them either way.
  bool seen(const std::vector<uint64_t>& keys);

 private:
  bool insert(uint64_t key);
  void grow();
  std::vector<uint64_t> slots_ = std::vector<uint64_t>(1024, 0);
  int64_t used_ = 0;
};

}  // namespace strata::data
