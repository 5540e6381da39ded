// Hugging Face tokenizer.json families beyond what strata trains: the Llama 3 and Qwen2 split
// patterns, PCRE2 for other patterns, NFC, ignore_merges, added tokens and their flags, the
// document separator, invalid UTF-8, and the errors for what strata does not run.
// tests/data/check_hf_tokenizer_exact.py holds the whole pipeline to `tokenizers` on real text.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "data/file_util.h"
#include "data/normalize.h"
#include "data/pretokenize.h"
#include "data/pretokenize_pcre2.h"
#include "data/tokenizer.h"
#include "data/tokenizer_added.h"
#include "data/unicode.h"
#include "test_util.h"

namespace strata::data {
namespace {

using testing::TempDir;
using V = std::vector<std::string>;

V split(std::string_view s, SplitPattern p) {
  V out;
  for (std::string_view w : pretokenize(s, p)) out.emplace_back(w);
  return out;
}

V regex_split(const RegexSplitter& re, std::string_view s) {
  std::vector<std::string_view> pieces;
  re.split(s, pieces);
  return V(pieces.begin(), pieces.end());
}

// Expected splits worked out from the regexes of pretokenize.h, alternative by alternative.
TEST(PretokenizeLlama3, Contractions) {
  // Any case (GPT-2 keeps "'M" apart as "'" "M"); "'sup" is "'s" + "up" as in the regex.
  EXPECT_EQ(split("I'M don'T they'RE WE'LL 'sup", SplitPattern::llama3),
            (V{"I", "'M", " don", "'T", " they", "'RE", " WE", "'LL", " '", "sup"}));
  EXPECT_EQ(split("x's'", SplitPattern::llama3), (V{"x", "'s", "'"}));
  // U+017F (long s) folds to "s", so it completes a contraction too.
  EXPECT_EQ(split("x'\u017fx", SplitPattern::llama3), (V{"x", "'\u017f", "x"}));
  EXPECT_EQ(split("x'\u017fx", SplitPattern::gpt2), (V{"x", "'", "\u017fx"}));
}

TEST(PretokenizeLlama3, DigitRunsOfAtMostThree) {
  EXPECT_EQ(split("12345 1234567", SplitPattern::llama3), (V{"123", "45", " ", "123", "456", "7"}));
  EXPECT_EQ(split("3.14 \u0663\u0664\u0665\u0666", SplitPattern::llama3),  // Arabic-Indic
            (V{"3", ".", "14", " ", "\u0663\u0664\u0665", "\u0666"}));
}

TEST(PretokenizeLlama3, LineBreaksAndWhitespace) {
  EXPECT_EQ(split("a\r\n\r\nb", SplitPattern::llama3), (V{"a", "\r\n\r\n", "b"}));
  // \s*[\r\n]+ ends at the last line break of the run; the spaces after it go to the word.
  EXPECT_EQ(split(" \r\n  x", SplitPattern::llama3), (V{" \r\n", " ", " x"}));
  EXPECT_EQ(split("x\n\n\ny", SplitPattern::llama3), (V{"x", "\n\n\n", "y"}));
  EXPECT_EQ(split("\r\nx", SplitPattern::llama3), (V{"\r\n", "x"}));
  EXPECT_EQ(split("word\r\n", SplitPattern::llama3), (V{"word", "\r\n"}));
  EXPECT_EQ(split("  hi", SplitPattern::llama3), (V{" ", " hi"}));
  EXPECT_EQ(split("end.  ", SplitPattern::llama3), (V{"end", ".", "  "}));
  // A tab, like any non-letter non-digit other than \r \n, may lead a word.
  EXPECT_EQ(split("\t\tx", SplitPattern::llama3), (V{"\t", "\tx"}));
  // Punctuation takes the line breaks after it.
  EXPECT_EQ(split("hi!!!\n\nok", SplitPattern::llama3), (V{"hi", "!!!\n\n", "ok"}));
  EXPECT_EQ(split("?\r\n\r\n  x", SplitPattern::llama3), (V{"?\r\n\r\n", " ", " x"}));
}

TEST(PretokenizeLlama3, OneNonLetterLeadsAWord) {
  EXPECT_EQ(split("\u00bfQu\u00e9? \u00a1S\u00ed!", SplitPattern::llama3),
            (V{"\u00bfQu\u00e9", "?", " \u00a1", "S\u00ed", "!"}));
  EXPECT_EQ(split("(x)", SplitPattern::llama3), (V{"(x", ")"}));
  EXPECT_EQ(split("a,b", SplitPattern::llama3), (V{"a", ",b"}));
  EXPECT_EQ(split("a ,b", SplitPattern::llama3), (V{"a", " ,", "b"}));
  EXPECT_EQ(split("\u00a0x", SplitPattern::llama3), (V{"\u00a0x"}));  // NBSP is \s but not \r\n
  EXPECT_EQ(split("x \u00a0y", SplitPattern::llama3), (V{"x", " ", "\u00a0y"}));
  // A combining mark is neither letter nor digit: it leads the next word.
  EXPECT_EQ(split("e\u0301t", SplitPattern::llama3), (V{"e", "\u0301t"}));
}

TEST(PretokenizeLlama3, CjkAndEmoji) {
  EXPECT_EQ(split("日本語のテキスト", SplitPattern::llama3), (V{"日本語のテキスト"}));
  EXPECT_EQ(split("😀😀 x👨\u200d👩\u200d👧", SplitPattern::llama3), (V{"😀😀", " x", "👨\u200d👩\u200d👧"}));
}

TEST(PretokenizeQwen2, OneDigitPerWordOtherwiseLlama3) {
  EXPECT_EQ(split("12345 67", SplitPattern::qwen2), (V{"1", "2", "3", "4", "5", " ", "6", "7"}));
  EXPECT_EQ(split("3.14", SplitPattern::qwen2), (V{"3", ".", "1", "4"}));
  EXPECT_EQ(split("I'M don'T\r\n\r\n  x", SplitPattern::qwen2),
            (V{"I", "'M", " don", "'T", "\r\n\r\n", " ", " x"}));
  EXPECT_EQ(split("x's'", SplitPattern::qwen2), (V{"x", "'s", "'"}));
}

TEST(PretokenizeLlama3, InvalidBytesAreOtherCharacters) {
  const std::string s = "ab\xff\xfe cd\xc3";
  std::string joined;
  for (const auto& w : split(s, SplitPattern::llama3)) joined += w;
  EXPECT_EQ(joined, s);
  EXPECT_EQ(split(s, SplitPattern::llama3), (V{"ab", "\xff\xfe", " cd", "\xc3"}));
}

TEST(Pretokenize, KnownPatternsAreFoundByTheirRegex) {
  for (const SplitPattern p : {SplitPattern::gpt2, SplitPattern::llama3, SplitPattern::qwen2})
    EXPECT_EQ(find_split_pattern(split_regex(p)), p);
  EXPECT_FALSE(find_split_pattern(R"(\p{N}{1,2}|\s+)").has_value());
}

// The three hand-written matchers against PCRE2 running their regexes, on random strings drawn
// from the characters where the alternatives differ.
TEST(PretokenizePcre2, AgreesWithTheHandWrittenMatchers) {
  const std::vector<std::string> pool = {
      "a",  "Z",  "é",      "日",     "'",      "s",      "S",      "t",      "re", "VE",   "ll",
      "M",  "d",  "\u017f", "1",      "9",      "\u0663", "²",      " ",      " ",  " ",    "\t",
      "\n", "\r", "\r\n",   "\u00a0", "\u3000", "\u0085", "\u2028", "\u180e", ".",  ",",    "!",
      "?",  "(",  "-",      "😀",      "\u200d", "\u0301", "\u00bf", "_",      "#",  "\x0b", "\x0c"};
  uint64_t state = 12345;
  const auto next = [&](uint64_t n) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return (state >> 33) % n;
  };
  for (const SplitPattern p : {SplitPattern::gpt2, SplitPattern::llama3, SplitPattern::qwen2}) {
    const RegexSplitter re(std::string(split_regex(p)), "test");
    for (int i = 0; i < 3000; ++i) {
      std::string s;
      const auto len = 1 + next(24);
      for (uint64_t k = 0; k < len; ++k) s += pool[next(pool.size())];
      ASSERT_EQ(regex_split(re, s), split(s, p)) << split_pattern_name(p) << " on \"" << s << "\"";
    }
  }
}

TEST(PretokenizePcre2, SplitsAndGapsAsTokenizers) {
  // Text no alternative matches becomes pieces of its own (Split, behavior Isolated).
  const RegexSplitter digits(R"(\p{N}{1,2})", "test");
  EXPECT_EQ(regex_split(digits, "ab12345c6"), (V{"ab", "12", "34", "5", "c", "6"}));
  // An empty match right after a match moves on by one character, and no piece is empty.
  const RegexSplitter maybe(R"(x*)", "test");
  EXPECT_EQ(regex_split(maybe, "axxbx"), (V{"a", "xx", "b", "x"}));
  EXPECT_THROW(RegexSplitter("(unclosed", "f.json"), Error);
}

TEST(Unicode, ReplacesInvalidUtf8AsPython) {
  const std::string r = "\xef\xbf\xbd";  // U+FFFD
  // Expected: Python's bytes.decode("utf-8", errors="replace").
  EXPECT_EQ(replace_invalid_utf8("\xe2\x82"
                                 "A"),
            r + "A");                                                  // a truncated sequence: one
  EXPECT_EQ(replace_invalid_utf8("\xf4\x90\x80\x80"), r + r + r + r);  // > U+10FFFF: each byte
  EXPECT_EQ(replace_invalid_utf8("\xed\xa0\x80"), r + r + r);          // a surrogate
  EXPECT_EQ(replace_invalid_utf8("\xc0\xaf"), r + r);                  // overlong
  EXPECT_EQ(replace_invalid_utf8("\xf0\x9f\x98"), r);
  EXPECT_EQ(replace_invalid_utf8("\xf0\x9f\x98x"), r + "x");
  EXPECT_EQ(replace_invalid_utf8("\xe0\x80"), r + r);
  EXPECT_EQ(replace_invalid_utf8("\xe1\x80\xe1\x80\x80"), r + "\u1000");
  EXPECT_EQ(replace_invalid_utf8("ok 日本 😀"), "ok 日本 😀");
  EXPECT_TRUE(is_ascii("plain text, 25 chars long"));
  EXPECT_FALSE(is_ascii("plain text, 25 chars long\x80"));
}

TEST(Normalize, Nfc) {
  EXPECT_EQ(nfc("e\u0301"), "\u00e9");
  EXPECT_EQ(nfc("\u212b"), "\u00c5");               // ANGSTROM SIGN is a singleton
  EXPECT_EQ(nfc("\u1100\u1161"), "\uac00");         // Hangul jamo compose
  EXPECT_EQ(nfc("a\u0323\u0307"), "\u1ea1\u0307");  // canonical order, then composition
  EXPECT_EQ(nfc(std::string("nul\0inside", 10)), std::string("nul\0inside", 10));
  EXPECT_THROW(nfc("\xff\xc3\xa9"), Error);
}

// --- Added tokens: tokenizers' own AddedVocabulary tests (lower-cased input, as their Lowercase
// normalizer would give it), with the pieces they expect.
std::vector<std::pair<std::string, int32_t>> pieces(const AddedTokenSplitter& s,
                                                    std::string_view text, bool parse_special) {
  std::vector<AddedTokenSplitter::Piece> out;
  s.split(text, parse_special, out);
  std::vector<std::pair<std::string, int32_t>> result;
  for (const auto& p : out)
    result.emplace_back(std::string(text.substr(p.begin, p.end - p.begin)), p.id);
  return result;
}

AddedToken added(int32_t id, std::string content, bool special) {
  AddedToken t;
  t.id = id;
  t.content = std::move(content);
  t.special = special;
  return t;
}

TEST(AddedTokens, StripAndSingleWordAsTokenizers) {
  AddedTokenSplitter s;
  AddedToken my = added(0, "my", false), ony = added(2, "ony", false);
  my.lstrip = my.rstrip = true;
  ony.single_word = true;
  for (const AddedToken& t :
       {my, added(1, "name", false), ony, added(3, "[CLS]", true), added(4, "[SEP]", true)})
    s.add(t, t.content);
  using P = std::vector<std::pair<std::string, int32_t>>;
  EXPECT_EQ(pieces(s, "[CLS] my name is anthony [SEP]", true),
            (P{{"[CLS]", 3}, {" my ", 0}, {"name", 1}, {" is anthony ", -1}, {"[SEP]", 4}}));
  // Specials not parsed: their text is text; other added tokens are still found.
  EXPECT_EQ(pieces(s, "[CLS] my name", false), (P{{"[CLS]", -1}, {" my ", 0}, {"name", 1}}));
  EXPECT_FALSE(s.idle(false));

  AddedTokenSplitter mask;
  AddedToken m = added(0, "<mask>", false);
  m.single_word = true;
  mask.add(m, m.content);
  EXPECT_EQ(pieces(mask, "<mask> my name <mask> a<mask> <mask>ony <mask>", true),
            (P{{"<mask>", 0},
               {" my name ", -1},
               {"<mask>", 0},
               {" a<mask> <mask>ony ", -1},
               {"<mask>", 0}}));
  // Punctuation is not a word character; a combining mark is.
  EXPECT_EQ(pieces(mask, "<mask>, <mask>- \u25cc\u0330<mask>", true),
            (P{{"<mask>", 0}, {", ", -1}, {"<mask>", 0}, {"- \u25cc\u0330<mask>", -1}}));

  AddedTokenSplitter strip;
  m.lstrip = m.rstrip = true;
  strip.add(m, m.content);
  EXPECT_EQ(
      pieces(strip, "hi <mask> there\t<mask>\t<mask>\u2000", true),
      (P{{"hi", -1}, {" <mask> ", 0}, {"there", -1}, {"\t<mask>\t", 0}, {"<mask>\u2000", 0}}));
}

TEST(AddedTokens, LeftmostLongest) {
  AddedTokenSplitter s;
  for (const AddedToken& t :
       {added(0, "<|a|>", true), added(1, "<|a|><|b|>", true), added(2, "|>", true)})
    s.add(t, t.content);
  using P = std::vector<std::pair<std::string, int32_t>>;
  EXPECT_EQ(pieces(s, "x<|a|><|b|>y<|a|>z|>", true),
            (P{{"x", -1}, {"<|a|><|b|>", 1}, {"y", -1}, {"<|a|>", 0}, {"z", -1}, {"|>", 2}}));
  EXPECT_TRUE(s.idle(false));  // all special
}

// --- Whole tokenizers from hand-written tokenizer.json files.

// The 256 byte tokens in byte order, then "bc" 256, "ab" 257, "abc" 258, " a" 259, from the
// merges b+c, a+b, ab+c, " "+a in that order; a GPT-2 style pipeline, no added tokens.
nlohmann::json base_json() {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[to_byte_level(std::string(1, static_cast<char>(b)))] = b;
  vocab["bc"] = 256;
  vocab["ab"] = 257;
  vocab["abc"] = 258;
  vocab["Ġa"] = 259;
  nlohmann::json j;
  j["version"] = "1.0";
  j["added_tokens"] = nlohmann::json::array();
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  j["decoder"] = {{"type", "ByteLevel"}};
  j["model"] = {{"type", "BPE"},
                {"ignore_merges", false},
                {"vocab", vocab},
                {"merges", {"b c", "a b", "ab c", "Ġ a"}}};
  return j;
}

nlohmann::json added_json(int64_t id, const std::string& content, bool special = true) {
  return {{"id", id},        {"content", content},     {"single_word", false}, {"lstrip", false},
          {"rstrip", false}, {"normalized", !special}, {"special", special}};
}

nlohmann::json split_step(const std::string& regex) {
  return {{"type", "Split"},
          {"pattern", {{"Regex", regex}}},
          {"behavior", "Isolated"},
          {"invert", false}};
}

// Llama 3's layout: its pre-tokenizer, ignore_merges, and specials only in added_tokens, after
// model.vocab (ids 260, 261, ...).
nlohmann::json llama3_json() {
  nlohmann::json j = base_json();
  j["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers",
                         {split_step(std::string(split_regex(SplitPattern::llama3))),
                          {{"type", "ByteLevel"},
                           {"add_prefix_space", false},
                           {"trim_offsets", true},
                           {"use_regex", false}}}}};
  j["model"]["ignore_merges"] = true;
  j["added_tokens"] = {added_json(260, "<|begin_of_text|>"), added_json(261, "<|end_of_text|>"),
                       added_json(262, "<|reserved_special_token_0|>")};
  return j;
}

class HfFile : public ::testing::Test {
 protected:
  Tokenizer load(const nlohmann::json& j, const std::string& separator = "") {
    write_file_atomic(path(), j.dump());
    return Tokenizer::load(path(), separator);
  }
  // Loading fails with a message naming the file and containing `needle`.
  void expect_error(const nlohmann::json& j, const std::string& needle) {
    write_file_atomic(path(), j.dump());
    try {
      Tokenizer::load(path());
      ADD_FAILURE() << "expected an error containing \"" << needle << "\" for " << j.dump();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(path()), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  }
  std::string path() const { return dir_.file("tokenizer.json"); }
  TempDir dir_;
};

TEST_F(HfFile, IgnoreMergesTakesAWordThatIsInTheVocabulary) {
  nlohmann::json j = base_json();
  j["added_tokens"] = nlohmann::json::array({added_json(260, kEndOfText)});
  // Merges alone: b+c comes first, and a + bc is no merge.
  EXPECT_EQ(load(j).encode("abc"), (std::vector<int32_t>{'a', 256}));
  j["model"]["ignore_merges"] = true;
  const Tokenizer tok = load(j);
  EXPECT_EQ(tok.encode("abc"), (std::vector<int32_t>{258}));
  EXPECT_EQ(tok.encode("abcabc"), (std::vector<int32_t>{'a', 256, 'a', 256}));  // not a token
  // " abc" is no token: BPE makes " " + a (rank 3) only after b + c (rank 0).
  EXPECT_EQ(tok.encode("abc abc"), (std::vector<int32_t>{258, 259, 256}));
}

TEST_F(HfFile, Llama3SpecialsPastTheVocabularyAndTheSeparator) {
  const Tokenizer tok = load(llama3_json());
  EXPECT_EQ(tok.vocab_size(), 263);
  EXPECT_EQ(tok.eot_id(), 261);  // <|end_of_text|>: there is no <|endoftext|>
  EXPECT_EQ(tok.decode_token(262), "<|reserved_special_token_0|>");
  EXPECT_EQ(load(llama3_json(), "<|begin_of_text|>").eot_id(), 260);
  EXPECT_THROW(load(llama3_json(), "<|eot_id|>"), Error);
  Tokenizer named = load(llama3_json());
  named.set_separator("<|reserved_special_token_0|>");
  EXPECT_EQ(named.eot_id(), 262);
  named.set_separator("abc");  // a vocabulary token's bytes also do
  EXPECT_EQ(named.eot_id(), 258);
  EXPECT_THROW(named.set_separator("<|nope|>"), Error);

  nlohmann::json none = llama3_json();
  none["added_tokens"] = nlohmann::json::array({added_json(260, "<|eot_id|>")});
  expect_error(none, "name the token to use");
  // `tokenizers` numbers added tokens itself; a file that says otherwise is refused.
  nlohmann::json gap = llama3_json();
  gap["added_tokens"][1]["id"] = 300;
  expect_error(gap, "but `tokenizers` gives it id 261");
}

TEST_F(HfFile, SpecialsAreTextUnlessParsed) {
  const Tokenizer tok = load(llama3_json());
  const std::string text = "ab<|end_of_text|>abc<|begin_of_text|";
  const auto plain = tok.encode(text);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 261), 0);
  EXPECT_EQ(tok.decode(plain), text);
  // "ab" | <|end_of_text|> | "abc" (one token: ignore_merges) | the rest as text.
  const auto parsed = tok.encode(text, {.parse_special = true});
  ASSERT_GE(parsed.size(), 3u);
  EXPECT_EQ((std::vector<int32_t>(parsed.begin(), parsed.begin() + 3)),
            (std::vector<int32_t>{257, 261, 258}));
  EXPECT_EQ(tok.decode(parsed), text);
  // Batches follow the same option.
  const std::vector<std::string_view> views = {text, "x<|reserved_special_token_0|>"};
  const auto batch = tok.encode_batch(views, {.parse_special = true});
  EXPECT_EQ(batch[0], parsed);
  EXPECT_EQ(batch[1], (std::vector<int32_t>{'x', 262}));
}

TEST_F(HfFile, AddedTokensThatAreNotSpecialAreAlwaysFound) {
  nlohmann::json j = base_json();
  j["added_tokens"] = {added_json(260, kEndOfText), added_json(261, "xyz", false)};
  const Tokenizer tok = load(j);
  EXPECT_EQ(tok.encode("axyzb"), (std::vector<int32_t>{'a', 261, 'b'}));
  EXPECT_EQ(tok.encode("axyzb", {.parse_special = true}), (std::vector<int32_t>{'a', 261, 'b'}));
}

TEST_F(HfFile, AddPrefixSpaceGoesBeforeEachPiece) {
  nlohmann::json j = base_json();
  j["added_tokens"] = nlohmann::json::array({added_json(260, kEndOfText)});
  j["pre_tokenizer"]["add_prefix_space"] = true;
  const Tokenizer tok = load(j);
  // " a" is a token (259): the text and the piece after a parsed special each get a space.
  EXPECT_EQ(tok.encode("a"), (std::vector<int32_t>{259}));
  EXPECT_EQ(tok.encode(" a"), (std::vector<int32_t>{259}));
  EXPECT_EQ(tok.encode("a<|endoftext|>a", {.parse_special = true}),
            (std::vector<int32_t>{259, 260, 259}));
}

TEST_F(HfFile, NfcNormalizerAndInvalidUtf8) {
  nlohmann::json j = llama3_json();
  j["normalizer"] = {{"type", "NFC"}};
  j["pre_tokenizer"]["pretokenizers"][0] =
      split_step(std::string(split_regex(SplitPattern::qwen2)));
  Tokenizer tok = load(j);
  EXPECT_EQ(tok.encode("caf"
                       "e\u0301"),
            tok.encode("caf\u00e9"));
  EXPECT_NE(tok.encode("caf"
                       "e\u0301"),
            tok.encode("cafe"));
  // Invalid bytes read as Python's errors="replace" reads them.
  EXPECT_EQ(tok.invalid_utf8(), InvalidUtf8::replace);
  EXPECT_EQ(tok.encode("a\xe2\x82"
                       "b\xff"),
            tok.encode("a\ufffd"
                       "b\ufffd"));
  EXPECT_THROW(tok.set_invalid_utf8(InvalidUtf8::keep_bytes), Error);  // NFC needs valid text
  // Normalization runs on each piece between specials on its own (no composing across them).
  const auto ids = tok.encode("e<|end_of_text|>\u0301", {.parse_special = true});
  EXPECT_EQ(ids[1], 261);
}

TEST_F(HfFile, InvalidUtf8KeptByStrataPipelineReplacedByOthers) {
  nlohmann::json gpt2 = base_json();
  gpt2["added_tokens"] = nlohmann::json::array({added_json(260, kEndOfText)});
  Tokenizer tok = load(gpt2);
  const std::string bytes = "ab\xff\xe2\x82 abc";
  EXPECT_EQ(tok.invalid_utf8(), InvalidUtf8::keep_bytes);
  EXPECT_EQ(tok.decode(tok.encode(bytes)), bytes);
  tok.set_invalid_utf8(InvalidUtf8::replace);
  EXPECT_EQ(tok.encode(bytes), tok.encode("ab\ufffd\ufffd abc"));

  Tokenizer llama = load(llama3_json());
  EXPECT_EQ(llama.invalid_utf8(), InvalidUtf8::replace);
  EXPECT_EQ(llama.encode(bytes), llama.encode("ab\ufffd\ufffd abc"));
  llama.set_invalid_utf8(InvalidUtf8::keep_bytes);  // its matcher can keep them
  EXPECT_EQ(llama.decode(llama.encode(bytes)), bytes);
}

TEST_F(HfFile, OtherPatternsRunOnPcre2) {
  nlohmann::json j = llama3_json();
  j["pre_tokenizer"]["pretokenizers"][0] = split_step(R"(\p{N}{1,2}|\p{L}+|\s+|[^\s\p{L}\p{N}]+)");
  Tokenizer tok = load(j);
  EXPECT_EQ(tok.encode("12345"), (std::vector<int32_t>{'1', '2', '3', '4', '5'}));  // no merges
  // Splits chain: a second Split runs on each piece of the first.
  j["pre_tokenizer"]["pretokenizers"].insert(j["pre_tokenizer"]["pretokenizers"].begin(),
                                             split_step(R"(\s+)"));
  const Tokenizer chained = load(j);
  EXPECT_EQ(chained.decode(chained.encode("ab 12 c")), "ab 12 c");
  EXPECT_THROW(tok.set_invalid_utf8(InvalidUtf8::keep_bytes), Error);
  nlohmann::json bad = llama3_json();
  bad["pre_tokenizer"]["pretokenizers"][0] = split_step("(unclosed");
  expect_error(bad, "(unclosed");
}

TEST_F(HfFile, SaveKeepsThePipeline) {
  nlohmann::json j = llama3_json();
  j["normalizer"] = {{"type", "NFC"}};
  const Tokenizer tok = load(j);
  tok.save(dir_.file("saved.json"));
  const Tokenizer again = Tokenizer::load(dir_.file("saved.json"));
  const std::string text = "abc 12345 e\u0301<|end_of_text|>\r\n\r\n  x'S \xff";
  for (const bool parse : {false, true})
    EXPECT_EQ(again.encode(text, {.parse_special = parse}),
              tok.encode(text, {.parse_special = parse}));
  EXPECT_EQ(again.eot_id(), tok.eot_id());
  const auto saved = nlohmann::json::parse(read_file(dir_.file("saved.json")));
  EXPECT_EQ(saved["model"]["ignore_merges"], true);
  EXPECT_EQ(saved["normalizer"]["type"], "NFC");
  EXPECT_EQ(saved["pre_tokenizer"]["type"], "Sequence");
  EXPECT_EQ(saved["added_tokens"].size(), 3u);
  EXPECT_FALSE(saved["model"]["vocab"].contains("<|end_of_text|>"));  // as in the file read
}

TEST_F(HfFile, UnsupportedFeaturesAreNamed) {
  nlohmann::json j = base_json();
  j["added_tokens"] = nlohmann::json::array({added_json(260, kEndOfText)});
  const auto with = [&](const char* where, const char* key, const nlohmann::json& value) {
    nlohmann::json k = j;
    if (std::string(where).empty())
      k[key] = value;
    else
      k[where][key] = value;
    return k;
  };
  expect_error(with("model", "type", "WordPiece"), "only BPE");
  expect_error(with("model", "type", "Unigram"), "only BPE");
  expect_error(with("model", "byte_fallback", true), "byte_fallback");
  expect_error(with("model", "dropout", 0.1), "dropout");
  expect_error(with("model", "continuing_subword_prefix", "##"), "continuing_subword_prefix");
  expect_error(with("model", "end_of_word_suffix", "</w>"), "end_of_word_suffix");
  expect_error(with("", "normalizer", {{"type", "Lowercase"}}), "Lowercase");
  expect_error(with("", "normalizer", {{"type", "NFKC"}}), "NFKC");
  expect_error(with("", "pre_tokenizer", {{"type", "Metaspace"}}), "Metaspace");
  nlohmann::json removed = llama3_json();
  removed["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed";
  expect_error(removed, "Isolated");
  nlohmann::json not_last = llama3_json();
  std::swap(not_last["pre_tokenizer"]["pretokenizers"][0],
            not_last["pre_tokenizer"]["pretokenizers"][1]);
  expect_error(not_last, "ByteLevel");
  EXPECT_NO_THROW(load(with("model", "dropout", nullptr)));
}

// Found by fuzzing (tests/fuzz/tokenizer/regress-*): values of the wrong JSON type escaped as
// nlohmann exceptions, and deep nesting overflowed the stack; each is one strata error naming the
// file.
TEST_F(HfFile, MalformedValuesAreNamedErrors) {
  nlohmann::json j = base_json();
  j["added_tokens"] = nlohmann::json::array({added_json(260, kEndOfText)});
  nlohmann::json k = j;
  k["model"]["vocab"]["bc"] = nullptr;
  expect_error(k, "integer id");
  k = j;
  k["added_tokens"][0]["id"] = "260";
  expect_error(k, "integer \"id\"");
  k = j;
  k["added_tokens"] = {7};
  expect_error(k, "integer \"id\"");
  k = j;
  k["model"]["type"] = 5;
  expect_error(k, "malformed tokenizer.json");
  k = j;
  k["added_tokens"][0]["special"] = "yes";
  expect_error(k, "malformed tokenizer.json");
  const std::string deep = std::string(200000, '[') + std::string(200000, ']');
  write_file_atomic(path(),
                    R"({"model": {"vocab": {}, "merges": []}, "normalizer": )" + deep + "}");
  try {
    Tokenizer::load(path());
    ADD_FAILURE() << "a deeply nested tokenizer.json loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("nested deeper than 128"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace strata::data
