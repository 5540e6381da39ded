// The prepare's bounded-memory deduplication (external_sort.h, corpus_dedup.h) against the obvious
// in-memory forms (ExactDedup, NearDedup), with budgets small enough to spill many runs.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <random>
#include <set>

#include "data/corpus_dedup.h"
#include "data/external_sort.h"
#include "data/minhash.h"
#include "test_util.h"

namespace strata::data {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

size_t files_in(const std::string& dir) {
  size_t n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++n;
  return n;
}

TEST(ExternalSort, SortsWhatSpillsAsWhatFitsAndLeavesNoFiles) {
  TempDir dir;
  std::mt19937_64 rng(7);
  for (const int64_t memory : {int64_t{1} << 20, int64_t{512}}) {
    std::vector<uint64_t> values(20000);
    for (uint64_t& v : values) v = rng() % 5000;  // many equal values
    {
      ExternalSort<uint64_t> sort(dir.path(), "t", memory);
      for (uint64_t v : values) sort.add(v);
      sort.finish();
      EXPECT_EQ(sort.runs() > 10, memory < 1024) << memory;
      EXPECT_EQ(files_in(dir.path()), sort.runs());
      std::vector<uint64_t> got;
      for (uint64_t v; sort.next(v);) got.push_back(v);
      std::sort(values.begin(), values.end());
      EXPECT_EQ(got, values);
    }
    EXPECT_EQ(files_in(dir.path()), 0u);  // the runs go with the sort
  }
  ExternalSort<uint64_t> empty(dir.path(), "e", 64);
  empty.finish();
  uint64_t v = 0;
  EXPECT_FALSE(empty.next(v));
}

// Random documents with exact and band-key collisions: the verdicts equal a walk in corpus order
// with every key held in a set, whatever the memory budget.
TEST(CorpusDedup, EqualsTheInMemoryWalkWhateverTheBudget) {
  TempDir dir;
  constexpr int kDocs = 3000, kBands = 5;
  std::mt19937_64 rng(11);
  std::vector<DocKey> keys(kDocs);
  std::vector<std::vector<uint64_t>> bands(kDocs);
  for (int d = 0; d < kDocs; ++d) {
    keys[d] = {rng() % 2000, 3};  // about a third repeat an earlier key
    if (d % 11 == 0) continue;    // a document without words has no bands
    for (int b = 0; b < kBands; ++b) bands[d].push_back(rng() % 40000);
  }
  bands[5] = {9, 9, 9, 9, 9};  // equal keys within one document do not make it a copy of itself
  std::vector<Verdict> want;
  {
    ExactDedup exact;
    NearDedup near;
    std::set<uint64_t> seen_bands;
    for (int d = 0; d < kDocs; ++d) {
      const bool dup = exact.seen(keys[d]);
      bool near_dup = false;
      for (uint64_t k : bands[d]) near_dup = near_dup || seen_bands.count(k);
      seen_bands.insert(bands[d].begin(), bands[d].end());
      want.push_back(dup ? Verdict::duplicate : near_dup ? Verdict::near_duplicate : Verdict::kept);
    }
  }
  const auto count = [&](Verdict v) { return std::count(want.begin(), want.end(), v); };
  ASSERT_GT(count(Verdict::duplicate), 500);
  ASSERT_GT(count(Verdict::near_duplicate), 300);
  ASSERT_GT(count(Verdict::kept), 500);
  for (const int64_t memory : {int64_t{64} << 20, int64_t{2048}}) {
    CorpusDedup dups(dir.path(), memory);
    for (int d = 0; d < kDocs; ++d) {
      dups.add_exact(keys[d], d);
      if (!bands[d].empty()) dups.add_bands(bands[d].data(), bands[d].size(), d);
    }
    dups.finish();
    EXPECT_EQ(dups.runs() > 20, memory < 4096) << memory;
    std::vector<Verdict> got;
    for (int d = 0; d < kDocs; ++d) got.push_back(dups.verdict(d));
    EXPECT_EQ(got, want) << "memory " << memory;
    EXPECT_EQ(dups.duplicates(), count(Verdict::duplicate));
  }
}

}  // namespace
}  // namespace strata::data
