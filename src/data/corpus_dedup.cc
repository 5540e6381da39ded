#include "data/corpus_dedup.h"

namespace strata::data {

// The budget is split between the two key sorts (filled together by the plan's first pass) and
// the two flag sorts (filled while the key sorts are merged, so only their read buffers remain).
CorpusDedup::CorpusDedup(const std::string& dir, int64_t memory_bytes)
    : exact_(dir, "exact", memory_bytes / 4),
      bands_(dir, "bands", memory_bytes / 2),
      exact_flags_{ExternalSort<int64_t>(dir, "exact_flags", memory_bytes / 8)},
      near_flags_{ExternalSort<int64_t>(dir, "near_flags", memory_bytes / 8)} {}

void CorpusDedup::add_exact(const DocKey& key, int64_t doc) {
  exact_.add({key.a, key.b, doc});
}

void CorpusDedup::add_bands(const uint64_t* bands, size_t n, int64_t doc) {
  for (size_t i = 0; i < n; ++i) bands_.add({bands[i], doc});
}

void CorpusDedup::finish() {
  exact_.finish();
  ExactEntry e{}, first{};
  bool any = false;
  while (exact_.next(e)) {
    if (any && e.a == first.a && e.b == first.b) {
      exact_flags_.sorted.add(e.doc);
      ++exact_found_;
    } else {
      first = e;
      any = true;
    }
  }
  bands_.finish();
  BandEntry b{}, original{};
  any = false;
  int64_t last_flagged = -1;  // a document flagged by two of its bands is flagged once per key
  while (bands_.next(b)) {
    if (any && b.key == original.key) {
      // The same document twice under one key (two of its bands equal) is not its own copy.
      if (b.doc != original.doc && b.doc != last_flagged) {
        near_flags_.sorted.add(b.doc);
        last_flagged = b.doc;
      }
    } else {
      original = b;
      last_flagged = -1;
      any = true;
    }
  }
  for (Flags* f : {&exact_flags_, &near_flags_}) {
    f->sorted.finish();
    if (!f->sorted.next(f->next)) f->next = -1;
  }
}

bool CorpusDedup::Flags::contains(int64_t doc) {
  bool found = false;
  while (next >= 0 && next <= doc) {
    found = found || next == doc;
    if (!sorted.next(next)) next = -1;
  }
  return found;
}

Verdict CorpusDedup::verdict(int64_t doc) {
  const bool exact = exact_flags_.contains(doc);
  const bool near = near_flags_.contains(doc);
  if (exact) return Verdict::duplicate;
  return near ? Verdict::near_duplicate : Verdict::kept;
}

size_t CorpusDedup::runs() const {
  return exact_.runs() + bands_.runs() + exact_flags_.sorted.runs() + near_flags_.sorted.runs();
}

}  // namespace strata::data
