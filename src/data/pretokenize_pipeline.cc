#include "data/pretokenize_pipeline.h"

#include <string>

namespace strata::data {

void PreTokenizer::add_split(SplitPattern pattern) {
  steps_.push_back({Step::split, pattern, nullptr});
}

void PreTokenizer::add_regex_split(std::shared_ptr<const RegexSplitter> regex) {
  steps_.push_back({Step::regex_split, SplitPattern::gpt2, std::move(regex)});
}

void PreTokenizer::add_prefix_space() {
  steps_.push_back({Step::prefix_space, SplitPattern::gpt2, nullptr});
}

std::optional<SplitPattern> PreTokenizer::single_pattern() const {
  if (steps_.size() == 1 && steps_[0].kind == Step::split) return steps_[0].pattern;
  return std::nullopt;
}

bool PreTokenizer::needs_valid_utf8() const {
  for (const Step& s : steps_)
    if (s.kind == Step::regex_split) return true;
  return false;
}

void PreTokenizer::for_each(std::string_view text,
                            const std::function<void(std::string_view)>& word) const {
  run(0, text, word);
}

// tokenizers drops empty pieces after every step, and so does this.
void PreTokenizer::run(size_t step, std::string_view text,
                       const std::function<void(std::string_view)>& word) const {
  if (text.empty()) return;
  if (step == steps_.size()) {
    word(text);
    return;
  }
  const Step& s = steps_[step];
  switch (s.kind) {
    case Step::prefix_space: {
      if (text[0] == ' ') return run(step + 1, text, word);
      std::string spaced(1, ' ');
      spaced.append(text);
      return run(step + 1, spaced, word);
    }
    case Step::regex_split: {
      std::vector<std::string_view> pieces;
      s.regex->split(text, pieces);
      for (const std::string_view piece : pieces) run(step + 1, piece, word);
      return;
    }
    case Step::split:
      for (size_t pos = 0; pos < text.size();) {
        const size_t end = next_pretoken(s.pattern, text, pos);
        run(step + 1, text.substr(pos, end - pos), word);
        pos = end;
      }
      return;
  }
}

}  // namespace strata::data
