// Exact deduplication of documents (`strata prepare --dedup exact`): a document whose normalised
// text equals an earlier document's is removed, the first one in corpus order kept. Normalised:
// ASCII letters lower-cased, every run of whitespace (space, tab, newline, carriage return, form
// feed, vertical tab) one space, none at either end, so copies that differ only in case or
// spacing (re-wrapped lines, trailing newlines) count as the same. Documents are compared by a
// 128-bit key (XXH3 and XXH64 of the normalised bytes, two independent 64-bit hashes): at 10^9
// documents a false match has a probability around 10^-21.
//
// ExactDedup below is the obvious form, a set of every key seen, which grows with the corpus (~32
// bytes a distinct document): the reference that the prepare's bounded-memory deduplication
// (corpus_dedup.h, sorted keys on disk) is tested against.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <unordered_set>

namespace strata::data {

struct DocKey {
  uint64_t a = 0, b = 0;
  bool operator==(const DocKey&) const = default;
};

// The key of `doc`'s normalised text (thread-safe: no shared state).
DocKey dedup_key(std::string_view doc);

class ExactDedup {
 public:
  // True when an earlier document had this key (the caller drops this one); records it if not.
  bool seen(const DocKey& key) { return !keys_.insert(key).second; }
  int64_t distinct() const { return static_cast<int64_t>(keys_.size()); }

 private:
  struct Hash {
    size_t operator()(const DocKey& k) const { return static_cast<size_t>(k.a); }
  };
  std::unordered_set<DocKey, Hash> keys_;
};

}  // namespace strata::data
