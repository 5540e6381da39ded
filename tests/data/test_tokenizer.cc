#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "data/file_util.h"
#include "data/pretokenize.h"
#include "data/tokenizer.h"
#include "data/unicode.h"
#include "test_util.h"

namespace strata::data {
namespace {

using testing::make_corpus;
using testing::TempDir;

std::vector<std::string> split(std::string_view s) {
  std::vector<std::string> out;
  for (std::string_view w : pretokenize(s)) out.emplace_back(w);
  return out;
}

// Expected splits are what Hugging Face's ByteLevel pre-tokenizer (GPT-2 regex) produces.
TEST(Pretokenize, MatchesGpt2Regex) {
  using V = std::vector<std::string>;
  EXPECT_EQ(split("Hello world"), (V{"Hello", " world"}));
  EXPECT_EQ(split("I'm don't they're WE'LL 'sup"),
            (V{"I", "'m", " don", "'t", " they", "'re", " WE", "'", "LL", " '", "sup"}));
  EXPECT_EQ(split("a  b"), (V{"a", " ", " b"}));
  EXPECT_EQ(split("a\n\nb"), (V{"a", "\n", "\n", "b"}));
  EXPECT_EQ(split("x   "), (V{"x", "   "}));
  EXPECT_EQ(split("123 4567"), (V{"123", " 4567"}));
  EXPECT_EQ(split("hi!!! ok"), (V{"hi", "!!!", " ok"}));
  EXPECT_EQ(split("  hi"), (V{" ", " hi"}));
  EXPECT_EQ(split("über café"), (V{"über", " café"}));
  EXPECT_EQ(split("日本語 text"), (V{"日本語", " text"}));
  EXPECT_EQ(split("😀😀 x"), (V{"😀😀", " x"}));
  EXPECT_EQ(split("\t\tx"), (V{"\t", "\t", "x"}));
  EXPECT_EQ(split(" \n x"), (V{" \n", " x"}));
  EXPECT_EQ(split("a ,b"), (V{"a", " ,", "b"}));
  EXPECT_EQ(split("x's'"), (V{"x", "'s", "'"}));
  EXPECT_EQ(split("3.14"), (V{"3", ".", "14"}));
  EXPECT_EQ(split(" "), (V{" "}));
  EXPECT_EQ(split("\u00a0x"), (V{"\u00a0", "x"}));
  EXPECT_EQ(split("x\u00a0 y"), (V{"x", "\u00a0", " y"}));
  EXPECT_EQ(split("e\u0301t"), (V{"e", "\u0301", "t"}));  // a combining mark is not a letter
}

TEST(Pretokenize, InvalidBytesAreOtherCharacters) {
  const std::string s = "ab\xff\xfe cd\xc3";
  std::string joined;
  for (auto w : split(s)) joined += w;
  EXPECT_EQ(joined, s);
  EXPECT_EQ(split(s), (std::vector<std::string>{"ab", "\xff\xfe", " cd", "\xc3"}));
}

TEST(Unicode, ByteMappingIsGpt2s) {
  EXPECT_EQ(byte_to_unicode()[' '], "Ġ");
  EXPECT_EQ(byte_to_unicode()['\n'], "Ċ");
  EXPECT_EQ(byte_to_unicode()['A'], "A");
  for (int b = 0; b < 256; ++b) {
    uint32_t cp;
    bool valid;
    decode_utf8(byte_to_unicode()[b], 0, &cp, &valid);
    ASSERT_TRUE(valid);
    EXPECT_EQ(unicode_to_byte(cp), b);
  }
}

TEST(Unicode, Utf8Validation) {
  size_t bad = 0;
  EXPECT_TRUE(is_valid_utf8("plain ascii, ümlaut, 日本, 😀"));
  EXPECT_FALSE(is_valid_utf8("ok\xc0\xaf", &bad));  // overlong '/'
  EXPECT_EQ(bad, 2u);
  EXPECT_FALSE(is_valid_utf8("\xed\xa0\x80"));      // surrogate
  EXPECT_FALSE(is_valid_utf8("\xf4\x90\x80\x80"));  // > U+10FFFF
  EXPECT_FALSE(is_valid_utf8("abc\xe6\x97"));       // truncated
}

const Tokenizer& small_tokenizer() {
  static const Tokenizer tok = Tokenizer::train({make_corpus(3000, 1), make_corpus(500, 2)}, 600);
  return tok;
}

TEST(Tokenizer, TrainsRequestedVocabAndCompresses) {
  const Tokenizer& tok = small_tokenizer();
  EXPECT_EQ(tok.vocab_size(), 600);
  EXPECT_EQ(tok.eot_id(), 599);
  EXPECT_EQ(tok.decode_token(tok.eot_id()), kEndOfText);
  const std::string text = make_corpus(200, 99);  // unseen text from the same distribution
  const auto ids = tok.encode(text);
  EXPECT_LT(ids.size() * 3, text.size()) << "expected > 3 bytes per token";
  EXPECT_EQ(tok.decode(ids), text);
}

TEST(Tokenizer, RoundTripsArbitraryBytes) {
  const Tokenizer& tok = small_tokenizer();
  std::vector<std::string> samples = {
      "",
      "The garden's river, 1999 people!",
      "emoji 😀👍🏽 and 日本語 and ümlaut",
      "invalid \xff\xfe\xc3 utf-8 \xed\xa0\x80 bytes",
      std::string("nul \0 inside", 12),
      "\n\n\t  trailing spaces   ",
      std::string(5000, 'a') + std::string(3000, ' '),  // long words are not cached
  };
  std::string all_bytes;
  for (int b = 0; b < 256; ++b) all_bytes += static_cast<char>(b);
  samples.push_back(all_bytes);
  uint64_t s = 7;
  std::string random;
  for (int i = 0; i < 20000; ++i) {
    s = s * 6364136223846793005ull + 1;
    random += static_cast<char>(s >> 56);
  }
  samples.push_back(random);
  for (const std::string& text : samples) {
    const auto ids = tok.encode(text);
    for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < tok.eot_id());
    EXPECT_EQ(tok.decode(ids), text);
  }
}

TEST(Tokenizer, EndOfTextInTextIsOrdinaryText) {
  const Tokenizer& tok = small_tokenizer();
  const auto ids = tok.encode("a<|endoftext|>b");
  EXPECT_EQ(std::count(ids.begin(), ids.end(), tok.eot_id()), 0);
  EXPECT_EQ(tok.decode(ids), "a<|endoftext|>b");
}

TEST(Tokenizer, BatchEncodingMatchesSingle) {
  const Tokenizer& tok = small_tokenizer();
  std::vector<std::string> texts;
  for (int i = 0; i < 50; ++i) texts.push_back(make_corpus(5 + i, 100 + i));
  const std::vector<std::string_view> views(texts.begin(), texts.end());
  const auto batch = tok.encode_batch(views);
  ASSERT_EQ(batch.size(), texts.size());
  for (size_t i = 0; i < texts.size(); ++i) EXPECT_EQ(batch[i], tok.encode(texts[i]));
}

TEST(Tokenizer, DecodeRejectsUnknownIds) {
  const Tokenizer& tok = small_tokenizer();
  EXPECT_THROW(tok.decode_token(600), Error);
  EXPECT_THROW(tok.decode({1, -1}), Error);
}

TEST(Tokenizer, TrainingIsDeterministic) {
  const std::vector<std::string> docs = {make_corpus(400, 5)};
  const Tokenizer a = Tokenizer::train(docs, 400), b = Tokenizer::train(docs, 400);
  for (int32_t id = 0; id < 400; ++id) ASSERT_EQ(a.decode_token(id), b.decode_token(id));
}

TEST(Tokenizer, StopsEarlyWhenTextRunsOutOfPairs) {
  const Tokenizer tok = Tokenizer::train({"abab"}, 1000);
  EXPECT_LT(tok.vocab_size(), 1000);
  EXPECT_EQ(tok.decode(tok.encode("abab")), "abab");
  EXPECT_EQ(tok.encode("abab").size(), 1u);
}

// Reference BPE: recount every pair after every merge; same tie-break (count, then smallest
// (a, b)). The incremental trainer must learn exactly the same tokens.
std::vector<std::string> naive_bpe(const std::vector<std::string>& docs, int64_t vocab_size) {
  std::map<std::string, int64_t> counts;
  for (const auto& d : docs)
    for (auto w : pretokenize(d)) ++counts[std::string(w)];
  std::vector<std::pair<std::vector<int32_t>, int64_t>> words;
  for (const auto& [w, c] : counts) {
    std::vector<int32_t> sym;
    for (char ch : w) sym.push_back(static_cast<uint8_t>(ch));
    words.emplace_back(sym, c);
  }
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.emplace_back(1, static_cast<char>(b));
  while (static_cast<int64_t>(tokens.size()) < vocab_size - 1) {
    std::map<std::pair<int32_t, int32_t>, int64_t> pairs;
    for (const auto& [sym, c] : words)
      for (size_t i = 0; i + 1 < sym.size(); ++i) pairs[{sym[i], sym[i + 1]}] += c;
    if (pairs.empty()) break;
    auto best = pairs.begin();
    for (auto it = pairs.begin(); it != pairs.end(); ++it)
      if (it->second > best->second) best = it;
    const auto [a, b] = best->first;
    const auto z = static_cast<int32_t>(tokens.size());
    tokens.push_back(tokens[a] + tokens[b]);
    for (auto& [sym, c] : words) {
      std::vector<int32_t> out;
      for (size_t i = 0; i < sym.size(); ++i) {
        if (i + 1 < sym.size() && sym[i] == a && sym[i + 1] == b) {
          out.push_back(z);
          ++i;
        } else {
          out.push_back(sym[i]);
        }
      }
      sym = out;
    }
  }
  return tokens;
}

TEST(Tokenizer, IncrementalTrainingMatchesNaiveBpe) {
  const std::vector<std::string> docs = {make_corpus(300, 11), "aaaaaaa aaaa aaa bbbbbb ab ab",
                                         "emoji 😀😀😀 ümlaut ümlaut"};
  const std::vector<std::string> want = naive_bpe(docs, 420);
  const Tokenizer tok = Tokenizer::train(docs, 420);
  ASSERT_EQ(tok.vocab_size(), static_cast<int64_t>(want.size()) + 1);
  for (size_t id = 0; id < want.size(); ++id)
    ASSERT_EQ(tok.decode_token(static_cast<int32_t>(id)), want[id]) << "token " << id;
}

TEST(Tokenizer, SaveLoadRoundTrip) {
  TempDir dir;
  const Tokenizer& tok = small_tokenizer();
  tok.save(dir.file("tokenizer.json"));
  const Tokenizer loaded = Tokenizer::load(dir.file("tokenizer.json"));
  EXPECT_EQ(loaded.vocab_size(), tok.vocab_size());
  EXPECT_EQ(loaded.eot_id(), tok.eot_id());
  EXPECT_EQ(loaded.num_merges(), tok.num_merges());
  const std::string text = make_corpus(300, 42) + " 😀 \xff\xfe bytes";
  EXPECT_EQ(loaded.encode(text), tok.encode(text));
  for (int32_t id = 0; id < tok.vocab_size(); ++id)
    ASSERT_EQ(loaded.decode_token(id), tok.decode_token(id));

  const auto j = nlohmann::json::parse(read_file(dir.file("tokenizer.json")));
  EXPECT_EQ(j["model"]["type"], "BPE");
  EXPECT_EQ(j["pre_tokenizer"]["type"], "ByteLevel");
  EXPECT_EQ(j["decoder"]["type"], "ByteLevel");
  EXPECT_EQ(j["added_tokens"][0]["content"], kEndOfText);
  EXPECT_EQ(j["added_tokens"][0]["id"], tok.eot_id());
  EXPECT_EQ(j["model"]["vocab"]["Ġ"], ' ');  // byte tokens spelled the GPT-2 way
}

// A GPT-2 style file: byte tokens in GPT-2's order (not byte order), merges as [a, b] pairs or
// "a b" strings, <|endoftext|> only in added_tokens. It must encode the same text identically.
TEST(Tokenizer, LoadsGpt2StyleFiles) {
  TempDir dir;
  const Tokenizer& tok = small_tokenizer();
  tok.save(dir.file("ours.json"));
  auto j = nlohmann::json::parse(read_file(dir.file("ours.json")));
  // Renumber: byte tokens sorted by their unicode spelling (GPT-2 puts "!" first), then the rest.
  std::vector<std::pair<std::string, int64_t>> entries;
  for (auto& [s, id] : j["model"]["vocab"].items()) entries.emplace_back(s, id.get<int64_t>());
  std::stable_sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) {
    const bool a_byte = a.second < 256, b_byte = b.second < 256;
    if (a_byte != b_byte) return a_byte;
    return a_byte ? a.first < b.first : a.second < b.second;
  });
  std::map<int64_t, int64_t> new_id;  // old -> new
  nlohmann::json vocab = nlohmann::json::object();
  for (size_t i = 0; i < entries.size(); ++i) new_id[entries[i].second] = static_cast<int64_t>(i);
  for (size_t i = 0; i < entries.size(); ++i)
    if (entries[i].first != kEndOfText) vocab[entries[i].first] = i;
  j["model"]["vocab"] = vocab;
  j["added_tokens"][0]["id"] = new_id[tok.eot_id()];
  for (const bool pairs : {true, false}) {
    nlohmann::json merges = nlohmann::json::array();
    for (const auto& m : j["model"]["merges"]) {
      const std::string s = m.is_string() ? m.get<std::string>()
                                          : m[0].get<std::string>() + " " + m[1].get<std::string>();
      const size_t space = s.find(' ');
      if (pairs)
        merges.push_back({s.substr(0, space), s.substr(space + 1)});
      else
        merges.push_back(s);
    }
    j["model"]["merges"] = merges;
    write_file_atomic(dir.file("gpt2.json"), j.dump());
    const Tokenizer loaded = Tokenizer::load(dir.file("gpt2.json"));
    EXPECT_EQ(loaded.vocab_size(), tok.vocab_size());
    EXPECT_EQ(loaded.eot_id(), new_id[tok.eot_id()]);
    const std::string text = make_corpus(100, 3) + " 😀 \x01";
    const auto want = tok.encode(text);
    const auto got = loaded.encode(text);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], new_id[want[i]]);
    EXPECT_EQ(loaded.decode(got), text);
  }
}

TEST(Tokenizer, LoadErrorsNameTheFile) {
  TempDir dir;
  const auto expect_error = [&](const std::string& content, const std::string& needle) {
    const std::string path = dir.file("bad.json");
    write_file_atomic(path, content);
    try {
      Tokenizer::load(path);
      FAIL() << "expected an error for " << content;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_error("{not json", "not valid JSON");
  expect_error(R"({"model": {"type": "WordPiece"}})", "only BPE");
  expect_error(R"({"pre_tokenizer": {"type": "Whitespace"}, "model": {"type": "BPE",
      "vocab": {}, "merges": []}})",
               "ByteLevel");
  EXPECT_THROW(Tokenizer::load(dir.file("missing.json")), Error);
}

}  // namespace
}  // namespace strata::data
