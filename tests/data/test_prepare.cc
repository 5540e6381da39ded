#include <gtest/gtest.h>

#include <set>

#include "data/file_util.h"
#include "data/filters.h"
#include "data/manifest.h"
#include "data/prepare.h"
#include "data/shard.h"
#include "data/shard_writer.h"
#include "data/tokenizer.h"
#include "test_util.h"

namespace strata::data {
namespace {

using testing::make_corpus;
using testing::TempDir;

std::string repeat(const std::string& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

TEST(Filters, SplitDocuments) {
  using V = std::vector<std::string_view>;
  EXPECT_EQ(split_documents("a\n\n\nb\n\n\n\n\n\nc\n\n\n", "\n\n\n"), (V{"a", "b", "c"}));
  EXPECT_EQ(split_documents("a\n\nb", "\n\n\n"), (V{"a\n\nb"}));
  EXPECT_EQ(split_documents("whole", ""), (V{"whole"}));
  EXPECT_EQ(split_documents("", "\n"), V{});
}

TEST(Filters, EachFilterCatchesItsCase) {
  FilterConfig f;
  f.min_doc_chars = 5;
  f.max_doc_chars = 200;
  EXPECT_EQ(judge_document("A normal short document.", f), Verdict::kept);
  EXPECT_EQ(judge_document("bad \xff byte here", f), Verdict::invalid_utf8);
  EXPECT_EQ(judge_document("abcd", f), Verdict::too_short);
  EXPECT_EQ(judge_document("éééé", f), Verdict::too_short);  // 4 characters, 8 bytes
  EXPECT_EQ(judge_document("ééééé", f), Verdict::kept);
  EXPECT_EQ(judge_document(std::string(201, 'x'), f), Verdict::too_long);
  EXPECT_EQ(judge_document("ctrl \x01\x02\x03\x04 chars", f), Verdict::nonprint);
  EXPECT_EQ(judge_document("tabs\tand\nnewlines\r\nare fine", f), Verdict::kept);
  const std::string dup_lines = "first line\nsame line\nsame line\nsame line\nlast line\n";
  EXPECT_EQ(judge_document(dup_lines, f), Verdict::repetitive);
  EXPECT_EQ(judge_document(repeat("buy now ", 20), f), Verdict::repetitive);  // one line
}

TEST(Filters, Fractions) {
  EXPECT_DOUBLE_EQ(repeat_fraction("a\nb\na\na\n\n\n"), 0.5);  // blank lines do not count
  EXPECT_GT(repeat_fraction(repeat("spam and eggs! ", 40)), 0.9);
  EXPECT_LT(repeat_fraction(make_corpus(100, 1)), 0.1);  // ordinary text
  EXPECT_DOUBLE_EQ(nonprint_fraction("ab\x01\x7f"), 0.5);
  EXPECT_DOUBLE_EQ(nonprint_fraction("\xc2\x85ok"), 1.0 / 3);  // C1 control U+0085
  EXPECT_DOUBLE_EQ(nonprint_fraction(""), 0.0);
}

struct Fixture {
  TempDir dir;
  std::vector<std::string> files;
  std::set<std::string> good;
  FilterConfig filters;

  Fixture() {
    filters.min_doc_chars = 20;
    filters.max_doc_chars = 20000;
    std::vector<std::string> docs;
    for (int i = 0; i < 40; ++i) {
      docs.push_back(make_corpus(10 + i % 7, 1000 + i));
      docs.back().pop_back();
      good.insert(docs.back());
    }
    docs.insert(docs.begin() + 3, "broken \xc3\x28 utf-8 in an otherwise fine document");
    docs.insert(docs.begin() + 9, "bad \xff\xff bytes, long enough to pass the length filter");
    docs.insert(docs.begin() + 5, "too short");
    docs.insert(docs.begin() + 7, "short too");
    docs.insert(docs.begin() + 20, make_corpus(1000, 5));  // > 20000 characters
    docs.insert(docs.begin() + 11, repeat("click here to win a prize\n", 30));
    docs.insert(docs.begin() + 30, repeat("ha", 500));
    docs.insert(docs.begin() + 25, "binary\x01\x02\x03\x04\x05\x06\x07\x08 junk \x0e\x0f\x10");
    std::string a, b;
    for (std::string& d : docs) {
      if (d.back() == '\n') d.pop_back();  // it would merge into the "\n\n\n" separator
    }
    for (size_t i = 0; i < docs.size(); ++i) (i % 2 ? b : a) += docs[i] + "\n\n\n";
    files = {dir.file("a.txt"), dir.file("b.txt")};
    write_file_atomic(files[0], a);
    write_file_atomic(files[1], b);
  }
};

TEST(Prepare, EndToEnd) {
  const Fixture fx;
  const std::string out = fx.dir.file("out/nested");
  const PrepareReport r = prepare_text(fx.files, out, 400, 0.1, 7, "\n\n\n", fx.filters);

  EXPECT_EQ(r.files, 2);
  EXPECT_EQ(r.seen.documents, 48);
  EXPECT_EQ(r.invalid_utf8.documents, 2);
  EXPECT_EQ(r.too_short.documents, 2);
  EXPECT_EQ(r.too_long.documents, 1);
  EXPECT_EQ(r.repetitive.documents, 2);
  EXPECT_EQ(r.nonprint.documents, 1);
  EXPECT_EQ(r.kept.documents, 40);
  EXPECT_EQ(r.too_short.bytes, 18);
  EXPECT_EQ(r.seen.bytes, r.kept.bytes + r.invalid_utf8.bytes + r.too_short.bytes +
                              r.too_long.bytes + r.repetitive.bytes + r.nonprint.bytes);
  EXPECT_EQ(r.train.documents + r.val.documents, 40);
  EXPECT_GE(r.val.documents, 1);
  EXPECT_EQ(r.vocab_size, 400);

  const Tokenizer tok = Tokenizer::load(out + "/tokenizer.json");
  EXPECT_EQ(tok.vocab_size(), 400);
  const auto train = read_shard(out + "/train_000.bin", 400);
  const auto val = read_shard(out + "/val_000.bin", 400);
  EXPECT_EQ(static_cast<int64_t>(train.size()), r.train_tokens);
  EXPECT_EQ(static_cast<int64_t>(val.size()), r.val_tokens);
  EXPECT_LT(r.train_tokens, r.train.bytes);  // the tokenizer compresses
  // Each split is its documents, each followed by <|endoftext|>, all of them good ones.
  for (const auto* split : {&train, &val}) {
    ASSERT_EQ(split->back(), tok.eot_id());
    std::vector<int32_t> doc;
    int64_t docs = 0;
    for (int32_t id : *split) {
      if (id != tok.eot_id()) {
        doc.push_back(id);
        continue;
      }
      EXPECT_TRUE(fx.good.count(tok.decode(doc))) << tok.decode(doc);
      doc.clear();
      ++docs;
    }
    EXPECT_EQ(docs, split == &train ? r.train.documents : r.val.documents);
  }
  const auto report = nlohmann::json::parse(read_file(out + "/prepare_report.json"));
  EXPECT_EQ(report["removed"]["repetitive"]["documents"], 2);
  EXPECT_EQ(report["train"]["tokens"], r.train_tokens);
  EXPECT_NE(r.summary().find("repetitive 2"), std::string::npos) << r.summary();
}

TEST(Prepare, DeterministicBySeed) {
  const Fixture fx;
  const auto a = prepare_text(fx.files, fx.dir.file("a"), 300, 0.2, 1, "\n\n\n", fx.filters);
  const auto b = prepare_text(fx.files, fx.dir.file("b"), 300, 0.2, 1, "\n\n\n", fx.filters);
  const auto c = prepare_text(fx.files, fx.dir.file("c"), 300, 0.2, 2, "\n\n\n", fx.filters);
  EXPECT_EQ(read_file(fx.dir.file("a/train_000.bin")), read_file(fx.dir.file("b/train_000.bin")));
  EXPECT_EQ(read_file(fx.dir.file("a/val_000.bin")), read_file(fx.dir.file("b/val_000.bin")));
  EXPECT_EQ(read_file(fx.dir.file("a/tokenizer.json")), read_file(fx.dir.file("b/tokenizer.json")));
  EXPECT_NE(read_file(fx.dir.file("a/val_000.bin")), read_file(fx.dir.file("c/val_000.bin")));
  EXPECT_EQ(a.val.documents, b.val.documents);
  (void)c;
}

TEST(Prepare, ValGetsAtLeastOneDocument) {
  TempDir dir;
  write_file_atomic(dir.file("t.txt"), make_corpus(20, 1) + "\n\n\n" + make_corpus(20, 2));
  const auto r =
      prepare_text({dir.file("t.txt")}, dir.file("out"), 300, 0.0001, 3, "\n\n\n", FilterConfig{});
  EXPECT_EQ(r.val.documents, 1);
  EXPECT_EQ(r.train.documents, 1);
}

TEST(Prepare, SingleDocumentHasNoValShard) {
  TempDir dir;
  write_file_atomic(dir.file("t.txt"), make_corpus(30, 1));
  const auto r = prepare_text({dir.file("t.txt")}, dir.file("out"), 300, 0.5, 3, "\n\n\n", {});
  EXPECT_EQ(r.train.documents, 1);
  EXPECT_EQ(r.val_shards, 0);
  EXPECT_TRUE(list_shards(dir.file("out"), "val").empty());
  EXPECT_EQ(list_shards(dir.file("out"), "train").size(), 1u);
}

TEST(Prepare, Errors) {
  TempDir dir;
  try {
    prepare_text({dir.file("missing.txt")}, dir.file("out"), 300, 0.1, 1, "\n", FilterConfig{});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("missing.txt"), std::string::npos) << e.what();
  }
  write_file_atomic(dir.file("short.txt"), std::string("a\nb\nc\n"));
  FilterConfig f;
  f.min_doc_chars = 10;
  EXPECT_THROW(prepare_text({dir.file("short.txt")}, dir.file("out"), 300, 0.1, 1, "\n", f), Error);
  EXPECT_THROW(prepare_text({dir.file("short.txt")}, dir.file("out"), 300, 1.0, 1, "\n", {}),
               Error);
}

std::vector<ShardEntry> write_tokens(const std::string& dir, const std::vector<int32_t>& tokens,
                                     int64_t max_tokens) {
  ShardWriter w(dir, "train", 100, max_tokens);
  // In pieces of 7, so a shard boundary falls inside a piece.
  for (size_t i = 0; i < tokens.size(); i += 7)
    w.append(tokens.data() + i, static_cast<int64_t>(std::min<size_t>(7, tokens.size() - i)));
  return w.finish();
}

TEST(ShardWriter, StreamsShardsRecordsThemAndRemovesStaleOnes) {
  TempDir dir;
  std::vector<int32_t> tokens(25);
  for (int i = 0; i < 25; ++i) tokens[i] = i;
  const std::vector<ShardEntry> three = write_tokens(dir.path(), tokens, 10);
  ASSERT_EQ(three.size(), 3u);
  EXPECT_EQ(find_shards(dir.path(), "train").size(), 3u);
  EXPECT_EQ(read_shard(dir.file("train_002.bin"), 100), (std::vector<int32_t>{20, 21, 22, 23, 24}));
  EXPECT_EQ(three[2].file, "train_002.bin");
  EXPECT_EQ(three[2].tokens, 5);
  for (const ShardEntry& e : three) EXPECT_EQ(shard_checksum(dir.file(e.file)), e.xxh3) << e.file;
  EXPECT_NE(three[0].xxh3, three[1].xxh3);
  EXPECT_EQ(write_tokens(dir.path(), tokens, 100).size(), 1u);
  EXPECT_EQ(find_shards(dir.path(), "train").size(), 1u);
  EXPECT_EQ(read_shard(dir.file("train_000.bin"), 100), tokens);
  EXPECT_TRUE(write_tokens(dir.path(), {}, 100).empty());  // no tokens, no shards
  EXPECT_TRUE(list_shards(dir.path(), "train").empty());
  ShardWriter w(dir.path(), "train", 100, 10);
  const int32_t bad = 100;
  EXPECT_THROW(w.append(&bad, 1), Error);
}

}  // namespace
}  // namespace strata::data
