// A tokenizer.json pre_tokenizer as strata runs it: a list of steps applied in order, each to
// every piece the step before made. A step splits (a hand-written pattern of pretokenize.h, or a
// regex on PCRE2) or prepends a space to a piece that does not start with one (ByteLevel's
// add_prefix_space). ByteLevel's byte-to-unicode mapping itself needs no step: strata's tokens
// are bytes.
//   GPT-2:            [split GPT-2]                 ByteLevel (use_regex)
//   add_prefix_space: [prefix space, split GPT-2]   ByteLevel (add_prefix_space, use_regex)
//   Llama 3, Qwen2:   [split Llama 3 / Qwen2]       Sequence[Split(Regex, Isolated), ByteLevel]
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "data/pretokenize.h"
#include "data/pretokenize_pcre2.h"

namespace strata::data {

class PreTokenizer {
 public:
  PreTokenizer() = default;  // no steps: the whole text is one word

  void add_split(SplitPattern pattern);
  void add_regex_split(std::shared_ptr<const RegexSplitter> regex);
  void add_prefix_space();

  // The one hand-written pattern that is all this pre-tokenizer does, if so (encode's fast path).
  std::optional<SplitPattern> single_pattern() const;
  // True when a step runs on PCRE2, which needs valid UTF-8.
  bool needs_valid_utf8() const;

  // Calls word(w) for each pre-token of `text` in order; none is empty. A word may point into a
  // buffer of this call (after a prefix space), so `word` must copy what it keeps.
  void for_each(std::string_view text, const std::function<void(std::string_view)>& word) const;

 private:
  struct Step {
    enum Kind : uint8_t { split, regex_split, prefix_space } kind;
    SplitPattern pattern = SplitPattern::gpt2;
    std::shared_ptr<const RegexSplitter> regex;
  };
  void run(size_t step, std::string_view text,
           const std::function<void(std::string_view)>& word) const;
  std::vector<Step> steps_;
};

}  // namespace strata::data
