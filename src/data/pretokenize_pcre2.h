// A split pattern with no hand-written matcher (pretokenize.h), run on PCRE2 (JIT, UTF + UCP).
// tokenizers runs Oniguruma; for the constructs these patterns use (alternation, classes with
// \p{..}, \s, quantifiers, lookahead, (?i:...)) the two agree, PCRE2 is a Debian package with a
// JIT, and it turns a pattern strata has never seen into a working tokenizer instead of an
// error. Known difference: PCRE2's \s also takes U+180E, which Oniguruma's (the White_Space
// property) does not; the pattern is rewritten so that \s and \S mean White_Space here too
// (pcre2_pattern in the .cc; tests/data/test_tokenizer_hf.cc fails without it).
// PCRE2 needs valid UTF-8: tokenizers that use it replace invalid bytes first (InvalidUtf8).
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace strata::data {

class RegexSplitter {
 public:
  // Compiles `pattern`; throws strata::Error naming `source`, the pattern and PCRE2's message.
  RegexSplitter(const std::string& pattern, const std::string& source);
  ~RegexSplitter();
  RegexSplitter(const RegexSplitter&) = delete;
  RegexSplitter& operator=(const RegexSplitter&) = delete;

  // Appends the pieces of `text` (valid UTF-8) as tokenizers' Split with behavior Isolated makes
  // them: every match, and every stretch of text between matches, in order; none empty.
  void split(std::string_view text, std::vector<std::string_view>& out) const;
  const std::string& pattern() const { return pattern_; }

 private:
  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code_8 (the header stays out of this one)
};

}  // namespace strata::data
