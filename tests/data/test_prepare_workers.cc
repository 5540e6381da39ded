// The prepare's units and workers (prepare.h, prepare_stages.h, prepare_work.h): JSON Lines ranges
// read every line once whatever their boundaries; the output is byte-identical whatever the
// number of workers, run at once (threads standing in for processes) or stage by stage (a SLURM
// array job); and an interrupted prepare resumes from its records to the same output.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "data/corpus.h"
#include "data/file_util.h"
#include "data/prepare.h"
#include "data/prepare_work.h"
#include "test_util.h"

namespace strata::data {
namespace {

namespace fs = std::filesystem;
using testing::make_corpus;
using testing::TempDir;

std::vector<std::string> read_all(const CorpusFile& file, const CorpusOptions& o, BadRecords& bad) {
  std::vector<std::string> docs;
  const auto reader = open_documents(file, o, bad);
  Document d;
  while (reader->next(d)) docs.emplace_back(d.text);
  return docs;
}

TEST(CorpusRanges, EveryLineIsReadOnceWhateverTheBoundaries) {
  TempDir dir;
  std::string jsonl;
  std::vector<std::string> docs;
  for (int i = 0; i < 40; ++i) {
    docs.push_back(make_corpus(1 + i % 4, 70 + i));
    jsonl += nlohmann::json{{"text", docs.back()}}.dump() + "\n";
    if (i % 7 == 0) jsonl += "\n";  // blank lines are no documents
  }
  jsonl.pop_back();  // the last line without its newline
  write_file_atomic(dir.file("c.jsonl"), jsonl);
  const CorpusOptions o;
  const auto size = static_cast<int64_t>(jsonl.size());
  // Every cut point, alone, and runs of cuts of every small step (boundaries on newlines, inside
  // lines, ranges holding no line start at all).
  for (int64_t step : {int64_t{1}, int64_t{7}, int64_t{100}, size / 3, size}) {
    std::vector<std::string> got;
    BadRecords bad(0);
    for (int64_t begin = 0; begin < size; begin += step) {
      CorpusFile f{dir.file("c.jsonl"), CorpusFormat::jsonl, begin,
                   begin + step >= size ? -1 : begin + step};
      for (std::string& d : read_all(f, o, bad)) got.push_back(std::move(d));
    }
    EXPECT_EQ(got, docs) << "ranges of " << step << " bytes";
  }
  // split_into_units cuts only uncompressed JSON Lines, into ranges that cover the file.
  write_file_atomic(dir.file("t.txt"), jsonl);
  const std::vector<CorpusFile> units = split_into_units(
      {{dir.file("c.jsonl"), CorpusFormat::jsonl}, {dir.file("t.txt"), CorpusFormat::text}}, 1000);
  ASSERT_EQ(static_cast<int64_t>(units.size()), (size + 999) / 1000 + 1);
  EXPECT_EQ(units.front().begin, 0);
  for (size_t i = 0; i + 2 < units.size(); ++i) EXPECT_EQ(units[i].end, units[i + 1].begin);
  EXPECT_EQ(units[units.size() - 2].end, -1);
  EXPECT_EQ(units.back().path, dir.file("t.txt"));
  EXPECT_EQ(units.back().end, -1);
}

TEST(CorpusRanges, ABadRecordInALaterRangeIsNamedByItsByteOffset) {
  TempDir dir;
  const std::string good = nlohmann::json{{"text", "fine"}}.dump() + "\n";
  const std::string text = good + good + "{broken\n" + good;
  write_file_atomic(dir.file("b.jsonl"), text);
  const int64_t at = static_cast<int64_t>(2 * good.size());
  BadRecords bad(0);
  try {
    read_all({dir.file("b.jsonl"), CorpusFormat::jsonl, at - 3, -1}, CorpusOptions(), bad);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(cat("b.jsonl (the line at byte ", at, ")")),
              std::string::npos)
        << e.what();
  }
  BadRecords from_start(0);
  EXPECT_THROW(
      try {
        read_all({dir.file("b.jsonl"), CorpusFormat::jsonl}, CorpusOptions(), from_start);
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("b.jsonl:3"), std::string::npos) << e.what();
        throw;
      },
      Error);
}

// A corpus of three JSON Lines files with exact and near copies across them, cut into many units.
struct Corpus {
  TempDir dir;
  PrepareOptions options;

  Corpus() {
    for (int f = 0; f < 3; ++f) {
      std::string jsonl;
      for (int i = 0; i < 60; ++i) {
        std::string doc = make_corpus(3 + i % 6, 1000 * f + i);
        if (i % 9 == 4) doc = make_corpus(3 + i % 6, i);  // the same text in every file
        jsonl += nlohmann::json{{"text", doc}}.dump() + "\n";
      }
      write_file_atomic(dir.file(cat("part", f, ".jsonl")), jsonl);
    }
    options.inputs = {dir.file("part*.jsonl")};
    options.vocab_size = 400;
    options.val_fraction = 0.1;
    options.dedup = DedupMode::minhash;
    options.range_bytes = 2000;  // several ranges per file
    options.tokenizer_sample_bytes = 6000;
    options.max_shard_tokens = 3000;  // several shards per split
    options.batch_bytes = 1500;
  }
  PrepareOptions at(const std::string& out) const {
    PrepareOptions o = options;
    o.out_dir = dir.file(out);
    return o;
  }
  // Every output file but the report (which holds times), by name.
  std::map<std::string, std::string> output(const std::string& out) const {
    std::map<std::string, std::string> files;
    for (const auto& e : fs::directory_iterator(dir.file(out))) {
      const std::string name = e.path().filename().string();
      if (name != "prepare_report.json") files[name] = read_file(e.path().string());
    }
    return files;
  }
};

TEST(PrepareWorkers, TheOutputIsTheSameWhateverTheWorkers) {
  Corpus c;
  const PrepareReport one = prepare(c.at("one"));
  EXPECT_GT(one.units, 6);
  EXPECT_GT(one.duplicate.documents + one.near_duplicate.documents, 10);
  EXPECT_GT(one.train_shards, 2);
  EXPECT_FALSE(fs::exists(c.dir.file("one/.prepare")));  // the work folder goes when done
  const auto expected = c.output("one");
  ASSERT_TRUE(expected.count("manifest.json"));

  // Three workers at once (as mpirun's ranks would be).
  std::vector<PrepareReport> reports(3);
  std::vector<std::thread> threads;
  for (int w = 0; w < 3; ++w)
    threads.emplace_back([&, w] {
      PrepareOptions o = c.at("three");
      o.workers = 3;
      o.worker = w;
      reports[static_cast<size_t>(w)] = prepare(o);
    });
  for (std::thread& t : threads) t.join();
  EXPECT_TRUE(reports[0].complete);
  EXPECT_EQ(reports[0].reused, 0);  // a fresh run, however its workers raced
  EXPECT_FALSE(reports[1].complete);
  EXPECT_GT(reports[1].units_scanned, 0);
  EXPECT_EQ(reports[0].kept.documents, one.kept.documents);
  EXPECT_EQ(reports[0].train_tokens, one.train_tokens);
  EXPECT_TRUE(c.output("three") == expected);

  // The deduplication's sorts spilled to many runs on disk: the same output.
  PrepareOptions spilled = c.at("spilled");
  spilled.dedup_memory_bytes = 512;
  prepare(spilled);
  EXPECT_TRUE(c.output("spilled") == expected);

  // Stage by stage, as a SLURM array job runs it: scan and encode by two tasks, the rest by one.
  auto stage = [&](PrepareStage s, int workers, int worker) {
    PrepareOptions o = c.at("staged");
    o.stage = s;
    o.workers = workers;
    o.worker = worker;
    return prepare(o);
  };
  // A stage before its predecessor finished says so.
  stage(PrepareStage::scan, 2, 1);
  EXPECT_THROW(stage(PrepareStage::plan, 1, 0), Error);
  stage(PrepareStage::scan, 2, 0);
  stage(PrepareStage::plan, 1, 0);
  EXPECT_THROW(stage(PrepareStage::assemble, 1, 0), Error);
  stage(PrepareStage::encode, 2, 0);
  stage(PrepareStage::encode, 2, 1);
  const PrepareReport last = stage(PrepareStage::assemble, 1, 0);
  EXPECT_TRUE(last.complete);
  EXPECT_TRUE(c.output("staged") == expected);
}

TEST(PrepareWorkers, AnInterruptedPrepareResumesToTheSameOutput) {
  Corpus c;
  prepare(c.at("clean"));
  const auto expected = c.output("clean");

  // Half the units scanned by worker 0 of 2, then a run of one worker: it reuses them.
  PrepareOptions o = c.at("resumed");
  o.stage = PrepareStage::scan;
  o.workers = 2;
  const PrepareReport half = prepare(o);
  EXPECT_GT(half.units_scanned, 0);
  EXPECT_LT(half.units_scanned, half.units);
  PrepareOptions rest = c.at("resumed");
  const PrepareReport done = prepare(rest);
  EXPECT_EQ(done.reused, half.units_scanned);
  EXPECT_TRUE(c.output("resumed") == expected);

  // A record of another job (other options) is not reused: the folder starts over.
  PrepareOptions other = c.at("changed");
  other.stage = PrepareStage::scan;
  other.seed = 7;
  prepare(other);
  const PrepareReport fresh = prepare(c.at("changed"));
  EXPECT_EQ(fresh.reused, 0);
  EXPECT_TRUE(c.output("changed") == expected);

  // A torn or foreign record is an error that says what to do, not garbage.
  PrepareOptions torn = c.at("torn");
  torn.stage = PrepareStage::scan;
  prepare(torn);
  const PrepareWork work(torn.out_dir, read_file(torn.out_dir + "/.prepare/job.json"), 0);
  write_file_atomic(work.scan(0), std::string("not a record"));
  try {
    prepare(c.at("torn"));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("remove the folder's .prepare"), std::string::npos)
        << e.what();
  }
}

TEST(PrepareWorkers, AUnitShortOfItsSampleShareIsReadAgainToTheSameTokenizer) {
  // Two files of the same documents, once with a large field beside each text: by input bytes the
  // padded file takes nearly the whole sample budget, so the plain file's own share falls short
  // of the documents the sample needs from it, and the plan reads it again. The texts are the
  // same, so everything written must be too.
  TempDir dir;
  std::string plain_a, plain_b, padded_a;
  for (int i = 0; i < 80; ++i) {
    const std::string doc = make_corpus(4 + i % 5, 500 + i);
    std::string& plain = i % 2 ? plain_a : plain_b;
    plain += nlohmann::json{{"text", doc}}.dump() + "\n";
    if (i % 2)
      padded_a += nlohmann::json{{"text", doc}, {"meta", std::string(4000, 'x')}}.dump() + "\n";
  }
  write_file_atomic(dir.file("a.jsonl"), plain_a);
  write_file_atomic(dir.file("b.jsonl"), plain_b);
  fs::create_directories(dir.file("padded"));
  write_file_atomic(dir.file("padded/a.jsonl"), padded_a);
  write_file_atomic(dir.file("padded/b.jsonl"), plain_b);
  PrepareOptions o;
  o.vocab_size = 300;
  o.tokenizer_sample_bytes = 4000;
  o.inputs = {dir.file("a.jsonl"), dir.file("b.jsonl")};
  o.out_dir = dir.file("plain_out");
  const PrepareReport plain = prepare(o);
  o.inputs = {dir.file("padded/a.jsonl"), dir.file("padded/b.jsonl")};
  o.out_dir = dir.file("padded_out");
  const PrepareReport padded = prepare(o);
  EXPECT_EQ(plain.tokenizer_sample_rereads, 0);
  EXPECT_GT(padded.tokenizer_sample_rereads, 0);
  EXPECT_EQ(plain.tokenizer_sample.bytes, padded.tokenizer_sample.bytes);
  EXPECT_GT(plain.tokenizer_sample.documents, 3);
  for (const char* f : {"tokenizer.json", "train_000.bin", "val_000.bin", "manifest.json"})
    EXPECT_TRUE(read_file(dir.file(std::string("plain_out/") + f)) ==
                read_file(dir.file(std::string("padded_out/") + f)))
        << f;
}

}  // namespace
}  // namespace strata::data
