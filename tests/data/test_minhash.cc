// MinHash LSH near-duplicate removal (data/minhash.h) and its place in the prepare.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>

#include "data/file_util.h"
#include "data/minhash.h"
#include "data/prepare.h"
#include "test_util.h"

namespace strata::data {
namespace {

using testing::make_corpus;
using testing::TempDir;

// `doc` with every k-th word replaced, so that about 5/k of its 5-word shingles change.
std::string edit_words(const std::string& doc, int k) {
  std::string out;
  int word = 0;
  bool in_word = false;
  for (char c : doc) {
    const bool letter = std::isalnum(static_cast<unsigned char>(c)) != 0;
    if (letter && !in_word && ++word % k == 0) out += "zebra";
    if (!(letter && word % k == 0)) out += c;
    in_word = letter;
  }
  return out;
}

// The true Jaccard similarity of two documents' 5-word shingle sets (lower-cased words).
double jaccard5(const std::string& a, const std::string& b) {
  auto shingles = [](const std::string& s) {
    std::vector<std::string> words;
    std::string w;
    for (char c : s + " ") {
      if (std::isalnum(static_cast<unsigned char>(c))) {
        w += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      } else if (!w.empty()) {
        words.push_back(w);
        w.clear();
      }
    }
    std::set<std::string> out;
    for (size_t i = 0; i + 5 <= words.size(); ++i)
      out.insert(words[i] + " " + words[i + 1] + " " + words[i + 2] + " " + words[i + 3] + " " +
                 words[i + 4]);
    return out;
  };
  const auto x = shingles(a), y = shingles(b);
  size_t both = 0;
  for (const auto& s : x) both += y.count(s);
  return static_cast<double>(both) / static_cast<double>(x.size() + y.size() - both);
}

TEST(MinHash, SignaturesEstimateJaccardAndNearCopiesShareABand) {
  const MinHasher h(MinHashOptions{});
  const std::string a = make_corpus(40, 11);
  const std::string near = edit_words(a, 40);  // a word in 40 changed: J around 0.8
  const std::string far = edit_words(a, 4);    // a word in 4: J near 0
  const std::string other = make_corpus(40, 12);
  for (const std::string* b : {&near, &far, &other}) {
    const double want = jaccard5(a, *b), got = estimated_jaccard(h.signature(a), h.signature(*b));
    EXPECT_NEAR(got, want, 0.12) << "true Jaccard " << want;  // 112 hashes: sd <= 0.05
  }
  EXPECT_GT(jaccard5(a, near), 0.75);
  EXPECT_LT(jaccard5(a, far), 0.1);
  std::vector<uint64_t> ka, kn, kf, ko;
  h.band_keys(a, ka);
  h.band_keys(near, kn);
  h.band_keys(far, kf);
  h.band_keys(other, ko);
  ASSERT_EQ(ka.size(), 14u);
  NearDedup d;
  EXPECT_FALSE(d.seen(ka));
  EXPECT_TRUE(d.seen(kn));
  EXPECT_FALSE(d.seen(kf));
  EXPECT_FALSE(d.seen(ko));
  // Case and punctuation do not matter; words do.
  std::vector<uint64_t> k1, k2;
  h.band_keys("The LORD is my shepherd; I shall not want.", k1);
  h.band_keys("the lord is my shepherd i shall not want", k2);
  EXPECT_EQ(k1, k2);
  h.band_keys("", k1);
  EXPECT_TRUE(k1.empty());  // no words, no keys
  // Another seed gives other permutations.
  MinHashOptions o;
  o.seed = 2;
  EXPECT_NE(MinHasher(o).signature(a), h.signature(a));
}

TEST(PrepareStreaming, MinHashRemovesNearCopiesAfterTheFirst) {
  TempDir dir;
  std::vector<std::string> docs;
  for (int i = 0; i < 40; ++i) docs.push_back(make_corpus(30, 2000 + i));
  std::vector<std::string> corpus = docs;
  corpus.push_back(edit_words(docs[3], 50));  // near copies of 3, 8 and 8 again
  corpus.push_back(edit_words(docs[8], 60));
  corpus.push_back(edit_words(docs[8], 45));
  corpus.push_back(docs[5]);                  // an exact copy
  corpus.push_back(edit_words(docs[12], 3));  // heavily edited: a different document
  std::string jsonl;
  for (const std::string& d : corpus) jsonl += nlohmann::json{{"text", d}}.dump() + "\n";
  write_file_atomic(dir.file("c.jsonl"), jsonl);
  PrepareOptions o;
  o.inputs = {dir.file("c.jsonl")};
  o.out_dir = dir.file("m");
  o.vocab_size = 300;
  o.dedup = DedupMode::minhash;
  const PrepareReport r = prepare(o);
  EXPECT_EQ(r.near_duplicate.documents, 3);
  EXPECT_EQ(r.duplicate.documents, 1);
  EXPECT_EQ(r.kept.documents, 41);
  const auto report = nlohmann::json::parse(read_file(dir.file("m/prepare_report.json")));
  EXPECT_EQ(report["removed"]["near_duplicate"]["documents"], 3);
  o.dedup = DedupMode::exact;
  o.out_dir = dir.file("e");
  const PrepareReport e = prepare(o);
  EXPECT_EQ(e.duplicate.documents, 1);
  EXPECT_EQ(e.near_duplicate.documents, 0);
  EXPECT_EQ(e.kept.documents, 44);
}

}  // namespace
}  // namespace strata::data
