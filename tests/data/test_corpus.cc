// Corpus readers (corpus.h, byte_stream.h), the streaming prepare on JSON Lines, the tokenizer
// sample and the manifest the loader checks.
#include <gtest/gtest.h>
#include <zlib.h>
#include <zstd.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "data/byte_stream.h"
#include "data/corpus.h"
#include "data/dedup.h"
#include "data/file_util.h"
#include "data/filters.h"
#include "data/manifest.h"
#include "data/prepare.h"
#include "data/shard.h"
#include "data/tokenizer.h"
#include "test_util.h"

namespace strata::data {
namespace {

namespace fs = std::filesystem;
using testing::make_corpus;
using testing::TempDir;

void write_gzip(const std::string& path, const std::string& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())),
            static_cast<int>(bytes.size()));
  gzclose(f);
}

std::string zstd_frame(const std::string& bytes) {
  std::string out(ZSTD_compressBound(bytes.size()), '\0');
  const size_t n = ZSTD_compress(out.data(), out.size(), bytes.data(), bytes.size(), 3);
  EXPECT_FALSE(ZSTD_isError(n));
  out.resize(n);
  return out;
}

std::vector<std::string> read_all(const CorpusFile& file, const CorpusOptions& o, BadRecords& bad) {
  std::vector<std::string> docs;
  const auto reader = open_documents(file, o, bad);
  Document d;
  while (reader->next(d)) docs.emplace_back(d.oversize_bytes > 0 ? "<oversize>" : d.text);
  return docs;
}

std::string jsonl_of(const std::vector<std::string>& docs) {
  std::string out;
  for (size_t i = 0; i < docs.size(); ++i)
    out += nlohmann::json{{"id", i}, {"meta", {{"content", docs[i]}}}, {"text", docs[i]}}.dump() +
           "\n";
  return out;
}

std::vector<std::string> some_docs(int n) {
  std::vector<std::string> docs;
  for (int i = 0; i < n; ++i) docs.push_back(make_corpus(3 + i % 5, 50 + i));
  docs.push_back("unicode: \u00e9\u4e2d\u6587 \U0001F600 \"quoted\" \\ back\tslash");
  return docs;
}

TEST(Corpus, JsonLinesPlainGzipAndZstdReadTheSameDocuments) {
  TempDir dir;
  const std::vector<std::string> docs = some_docs(30);
  const std::string text = jsonl_of(docs);
  write_file_atomic(dir.file("a.jsonl"), text);
  write_gzip(dir.file("a.jsonl.gz"), text);
  // Two zstd frames in one file, split mid-line (zstd -c a b > c does that).
  write_file_atomic(dir.file("a.jsonl.zst"),
                    zstd_frame(text.substr(0, 1000)) + zstd_frame(text.substr(1000)));
  // A misnamed file is still read by its magic bytes.
  write_gzip(dir.file("misnamed.jsonl"), text);
  for (const char* name : {"a.jsonl", "a.jsonl.gz", "a.jsonl.zst", "misnamed.jsonl"}) {
    BadRecords bad(0);
    CorpusOptions o;
    EXPECT_EQ(read_all({dir.file(name), CorpusFormat::jsonl}, o, bad), docs) << name;
    o.field = "meta.content";
    EXPECT_EQ(read_all({dir.file(name), CorpusFormat::jsonl}, o, bad), docs) << name;
    EXPECT_EQ(bad.count(), 0);
  }
  EXPECT_EQ(sniff_compression(dir.file("a.jsonl.zst")), Compression::zstd);
  EXPECT_EQ(sniff_compression(dir.file("misnamed.jsonl")), Compression::gzip);
  EXPECT_EQ(sniff_compression(dir.file("a.jsonl")), Compression::none);
}

TEST(Corpus, TruncatedStreamsAreNamedErrors) {
  TempDir dir;
  const std::string text = jsonl_of(some_docs(200));
  write_gzip(dir.file("t.jsonl.gz"), text);
  std::string gz = read_file(dir.file("t.jsonl.gz"));
  write_file_atomic(dir.file("cut.jsonl.gz"), gz.substr(0, gz.size() / 2));
  const std::string zst = zstd_frame(text);
  write_file_atomic(dir.file("cut.jsonl.zst"), zst.substr(0, zst.size() / 2));
  std::string garbage = gz;
  for (size_t i = 20; i < 60; ++i) garbage[i] = static_cast<char>(i * 7);
  write_file_atomic(dir.file("garbage.jsonl.gz"), garbage);
  for (const char* name : {"cut.jsonl.gz", "cut.jsonl.zst", "garbage.jsonl.gz"}) {
    BadRecords bad(0.5);
    try {
      read_all({dir.file(name), CorpusFormat::jsonl}, CorpusOptions{}, bad);
      ADD_FAILURE() << name << " read without an error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
    }
  }
}

TEST(Corpus, BadRecordsAreNamedCountedAndBounded) {
  TempDir dir;
  const std::string lines =
      "{\"text\": \"one\"}\n"
      "{\"text\": \"two\", \"broken\": [1, 2\n"
      "\n"
      "{\"other\": \"no text field\"}\n"
      "{\"text\": 17}\n"
      "[\"not\", \"an object\"]\n"
      "{\"text\": \"six\"}";  // no final newline
  write_file_atomic(dir.file("bad.jsonl"), lines);
  const CorpusFile file{dir.file("bad.jsonl"), CorpusFormat::jsonl};
  {
    BadRecords strict(0);
    try {
      read_all(file, CorpusOptions{}, strict);
      FAIL();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("bad.jsonl:2: malformed JSON"), std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find("--max-bad-fraction"), std::string::npos);
    }
  }
  BadRecords bad(0.9);
  EXPECT_EQ(read_all(file, CorpusOptions{}, bad), (std::vector<std::string>{"one", "six"}));
  EXPECT_EQ(bad.count(), 4);
  EXPECT_EQ(bad.records(), 6);  // the blank line is not a record
  ASSERT_EQ(bad.examples().size(), 4u);
  EXPECT_NE(bad.examples()[1].find("bad.jsonl:4: no field 'text'"), std::string::npos);
  EXPECT_NE(bad.examples()[2].find("bad.jsonl:5: field 'text' is a number"), std::string::npos);
  EXPECT_NE(bad.examples()[3].find("bad.jsonl:6: not a JSON object"), std::string::npos);
  EXPECT_NO_THROW(bad.check());
  BadRecords tight(0.5);
  read_all(file, CorpusOptions{}, tight);
  EXPECT_THROW(tight.check(), Error);  // 4 of 6 > 0.5
}

TEST(Corpus, TextStreamsTheDocumentsSplitDocumentsFinds) {
  TempDir dir;
  // Over 2 MiB, so separators fall across the reader's 1 MiB reads, with runs of separators.
  std::string text;
  for (int i = 0; text.size() < (size_t{5} << 19); ++i)
    text += make_corpus(1 + i % 40, 7 + i) + std::string(i % 3 == 0 ? "\n\n\n\n" : "\n\n");
  write_file_atomic(dir.file("t.txt"), text);
  for (const std::string sep : {"\n\n", "\n\n\n", "zzz-not-there", ""}) {
    CorpusOptions o;
    o.document_separator = sep;
    o.max_document_bytes = int64_t{16} << 20;
    BadRecords bad(0);
    std::vector<std::string> want;
    for (std::string_view d : split_documents(text, sep)) want.emplace_back(d);
    EXPECT_EQ(read_all({dir.file("t.txt"), CorpusFormat::text}, o, bad), want)
        << "separator of " << sep.size() << " bytes";
  }
  // A document longer than the limit is skipped unread and reported as oversize.
  write_file_atomic(dir.file("long.txt"),
                    "short one\n\n" + std::string(3 << 20, 'x') + "\n\nlast one");
  CorpusOptions o;
  o.max_document_bytes = 1 << 20;
  BadRecords bad(0);
  EXPECT_EQ(read_all({dir.file("long.txt"), CorpusFormat::text}, o, bad),
            (std::vector<std::string>{"short one", "<oversize>", "last one"}));
}

TEST(Corpus, InputsExpandInAFixedOrder) {
  TempDir dir;
  fs::create_directories(dir.file("d/sub"));
  fs::create_directories(dir.file("d/.hidden"));
  for (const char* f : {"d/b.jsonl.zst", "d/a.txt", "d/sub/c.json", "d/.hidden/x.txt", "d/.dot"})
    write_file_atomic(dir.file(f), std::string("x"));
  const auto files = expand_inputs({dir.file("d")}, CorpusFormat::auto_detect);
  ASSERT_EQ(files.size(), 3u);
  EXPECT_EQ(files[0].path, dir.file("d/a.txt"));
  EXPECT_EQ(files[0].format, CorpusFormat::text);
  EXPECT_EQ(files[1].format, CorpusFormat::jsonl);
  EXPECT_EQ(files[2].path, dir.file("d/sub/c.json"));
  const auto globbed =
      expand_inputs({dir.file("d/*.t*"), dir.file("d/b.jsonl.zst")}, CorpusFormat::text);
  ASSERT_EQ(globbed.size(), 2u);
  EXPECT_EQ(globbed[1].format, CorpusFormat::text);  // --format wins over the name
  EXPECT_THROW(expand_inputs({dir.file("d/*.nothing")}, CorpusFormat::auto_detect), Error);
  EXPECT_THROW(expand_inputs({dir.file("missing.txt")}, CorpusFormat::auto_detect), Error);
  write_file_atomic(dir.file("x.parquet"), std::string("PAR1"));
  try {
    expand_inputs({dir.file("x.parquet")}, CorpusFormat::auto_detect);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("parquet_to_jsonl"), std::string::npos) << e.what();
  }
  EXPECT_EQ(format_of("a/b.ndjson.gz"), CorpusFormat::jsonl);
  EXPECT_EQ(format_of("a/b.txt.zst"), CorpusFormat::text);
}

// The same documents as text files and as JSON Lines (zstd) prepare into the same shards.
TEST(PrepareStreaming, JsonLinesAndTextGiveTheSameShards) {
  TempDir dir;
  std::vector<std::string> docs;
  for (int i = 0; i < 60; ++i) docs.push_back(make_corpus(4 + i % 9, 900 + i));
  for (std::string& d : docs) d.pop_back();  // no trailing newline: it would touch "\n\n\n"
  std::string text;
  for (const std::string& d : docs) text += d + "\n\n\n";
  write_file_atomic(dir.file("t.txt"), text);
  std::string jsonl;
  for (const std::string& d : docs) jsonl += nlohmann::json{{"text", d}}.dump() + "\n";
  write_file_atomic(dir.file("t.jsonl.zst"), zstd_frame(jsonl));

  PrepareOptions a;
  a.inputs = {dir.file("t.txt")};
  a.out_dir = dir.file("a");
  a.vocab_size = 400;
  a.val_fraction = 0.1;
  a.corpus.document_separator = "\n\n\n";
  a.batch_bytes = 4096;  // many batches
  PrepareOptions b = a;
  b.inputs = {dir.file("t.jsonl.zst")};
  b.out_dir = dir.file("b");
  b.batch_bytes = int64_t{1} << 20;  // one batch
  const PrepareReport ra = prepare(a), rb = prepare(b);
  EXPECT_EQ(ra.kept.documents, 60);
  EXPECT_EQ(rb.kept.documents, 60);
  for (const char* f : {"tokenizer.json", "train_000.bin", "val_000.bin", "manifest.json"})
    EXPECT_EQ(read_file(dir.file(std::string("a/") + f)),
              read_file(dir.file(std::string("b/") + f)))
        << f;
  // And the config's entry point makes the same files from the text.
  prepare_text({dir.file("t.txt")}, dir.file("c"), 400, 0.1, 1337, "\n\n\n", FilterConfig{});
  EXPECT_TRUE(read_file(dir.file("a/train_000.bin")) == read_file(dir.file("c/train_000.bin")));

  // Encoding with the tokenizer just trained gives the same shards again.
  PrepareOptions c = a;
  c.out_dir = dir.file("d");
  c.tokenizer = dir.file("a/tokenizer.json");
  const PrepareReport rc = prepare(c);
  EXPECT_EQ(rc.tokenizer, dir.file("a/tokenizer.json"));
  EXPECT_TRUE(read_file(dir.file("a/train_000.bin")) == read_file(dir.file("d/train_000.bin")));
  EXPECT_TRUE(read_file(dir.file("a/tokenizer.json")) == read_file(dir.file("d/tokenizer.json")));
}

TEST(PrepareStreaming, TokenizerSampleIsBoundedAndIndependentOfFileOrder) {
  TempDir dir;
  std::string one, two;
  for (int i = 0; i < 80; ++i) (i % 2 ? one : two) += make_corpus(5 + i % 7, 300 + i) + "\n";
  write_file_atomic(dir.file("one.txt"), one);
  write_file_atomic(dir.file("two.txt"), two);
  PrepareOptions o;
  o.inputs = {dir.file("one.txt"), dir.file("two.txt")};
  o.out_dir = dir.file("a");
  o.vocab_size = 300;
  o.corpus.format = CorpusFormat::text;
  o.corpus.document_separator = "\n";  // a document per sentence
  o.tokenizer_sample_bytes = 2000;
  const PrepareReport a = prepare(o);
  EXPECT_LE(a.tokenizer_sample.bytes, 2000);
  EXPECT_GT(a.tokenizer_sample.documents, 5);
  EXPECT_LT(a.tokenizer_sample.bytes, a.train.bytes);
  PrepareOptions swapped = o;
  swapped.inputs = {dir.file("two.txt"), dir.file("one.txt")};
  swapped.out_dir = dir.file("b");
  const PrepareReport b = prepare(swapped);
  EXPECT_EQ(a.tokenizer_sample.bytes, b.tokenizer_sample.bytes);
  EXPECT_TRUE(read_file(dir.file("a/tokenizer.json")) == read_file(dir.file("b/tokenizer.json")));
  o.out_dir = dir.file("c");
  o.tokenizer_sample_bytes = int64_t{1} << 30;  // all of the train split
  const PrepareReport c = prepare(o);
  EXPECT_EQ(c.tokenizer_sample.bytes, c.train.bytes);
}

TEST(Dedup, KeysIgnoreCaseAndSpacingOnly) {
  EXPECT_EQ(dedup_key("The  Lord is\nmy shepherd.\n"), dedup_key("the lord is my shepherd."));
  EXPECT_EQ(dedup_key("\t a b \r\n"), dedup_key("A B"));
  EXPECT_FALSE(dedup_key("the lord is my shepherd") == dedup_key("the lord is my shepherd."));
  EXPECT_FALSE(dedup_key("ab") == dedup_key("a b"));
  EXPECT_FALSE(dedup_key("caf\u00e9") == dedup_key("CAF\u00c9"));  // ASCII only is folded
  ExactDedup d;
  EXPECT_FALSE(d.seen(dedup_key("one")));
  EXPECT_FALSE(d.seen(dedup_key("two")));
  EXPECT_TRUE(d.seen(dedup_key("ONE")));
  EXPECT_EQ(d.distinct(), 2);
}

// --dedup exact keeps the first of each set of copies, in both splits' order, and reports the rest.
TEST(PrepareStreaming, ExactDedupKeepsTheFirstCopy) {
  TempDir dir;
  std::vector<std::string> docs;
  for (int i = 0; i < 30; ++i) docs.push_back(make_corpus(3 + i % 4, 700 + i));
  std::vector<std::string> with_copies = docs;
  with_copies.push_back(docs[4]);           // an exact copy
  with_copies.push_back(docs[7] + "\n\n");  // differs in trailing whitespace only
  std::string upper = docs[9];
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  with_copies.push_back(upper);  // differs in case only
  std::string jsonl, jsonl_unique;
  for (const std::string& d : with_copies) jsonl += nlohmann::json{{"text", d}}.dump() + "\n";
  for (const std::string& d : docs) jsonl_unique += nlohmann::json{{"text", d}}.dump() + "\n";
  write_file_atomic(dir.file("dup.jsonl"), jsonl);
  write_file_atomic(dir.file("unique.jsonl"), jsonl_unique);
  PrepareOptions o;
  o.inputs = {dir.file("dup.jsonl")};
  o.out_dir = dir.file("dedup");
  o.vocab_size = 300;
  o.dedup = DedupMode::exact;
  const PrepareReport r = prepare(o);
  EXPECT_EQ(r.duplicate.documents, 3);
  EXPECT_EQ(r.kept.documents, 30);
  PrepareOptions u = o;
  u.inputs = {dir.file("unique.jsonl")};
  u.out_dir = dir.file("unique");
  prepare(u);
  for (const char* f : {"train_000.bin", "val_000.bin", "tokenizer.json"})
    EXPECT_TRUE(read_file(dir.file(std::string("dedup/") + f)) ==
                read_file(dir.file(std::string("unique/") + f)))
        << f;
  const auto report = nlohmann::json::parse(read_file(dir.file("dedup/prepare_report.json")));
  EXPECT_EQ(report["removed"]["duplicate"]["documents"], 3);
  o.dedup = DedupMode::none;  // the default keeps them
  o.out_dir = dir.file("none");
  EXPECT_EQ(prepare(o).kept.documents, 33);
}

TEST(Manifest, ListsEveryShardAndTheLoaderChecksIt) {
  TempDir dir;
  write_file_atomic(dir.file("t.txt"), make_corpus(400, 3));
  PrepareOptions o;
  o.inputs = {dir.file("t.txt")};
  o.out_dir = dir.file("out");
  o.vocab_size = 300;
  o.corpus.document_separator = "\n";
  o.max_shard_tokens = 1000;
  const PrepareReport r = prepare(o);
  const std::optional<Manifest> m = read_manifest(o.out_dir);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->vocab_size, r.vocab_size);
  EXPECT_EQ(m->tokens("train"), r.train_tokens);
  EXPECT_EQ(m->tokens("val"), r.val_tokens);
  EXPECT_EQ(static_cast<int64_t>(m->splits.at("train").size()), r.train_shards);
  EXPECT_GT(r.train_shards, 2);
  const PreparedShards shards = prepared_shards(o.out_dir, {});
  EXPECT_TRUE(shards.from_manifest);
  EXPECT_EQ(shards.train, find_shards(o.out_dir, "train"));

  auto error_of = [&](const VerifyOptions& v) -> std::string {
    try {
      prepared_shards(o.out_dir, v);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  // One flipped token byte: the checksum finds it (and only the checksum).
  const std::string shard1 = dir.file("out/train_001.bin");
  std::string bytes = read_file(shard1);
  bytes[kShardHeaderBytes + 10] ^= 1;
  write_file_atomic(shard1, bytes);
  EXPECT_NE(error_of({}).find("train_001.bin: XXH3"), std::string::npos) << error_of({});
  EXPECT_EQ(error_of({.checksums = false}), "");
  // A shorter (but valid) shard: its token count differs from the manifest's.
  write_shard(shard1, std::vector<int32_t>{1, 2, 3}, 300);
  EXPECT_NE(error_of({.checksums = false}).find("records"), std::string::npos);
  fs::remove(shard1);
  EXPECT_NE(error_of({}).find("train_001.bin' listed in manifest.json is missing"),
            std::string::npos)
      << error_of({});
  // Without a manifest (an older folder) the shards are read by name.
  fs::remove(dir.file("out/manifest.json"));
  EXPECT_FALSE(prepared_shards(o.out_dir, {}).from_manifest);
}

}  // namespace
}  // namespace strata::data
