#include "data/pretokenize.h"

#include "data/pretokenize_scan.h"

namespace strata::data {

namespace {

using scan::Char;
using scan::char_at;
using scan::run_end;

// Length of the contraction ('s 't 're 've 'm 'll 'd, lower case only as in GPT-2) at pos, or 0.
size_t contraction(std::string_view text, size_t pos) {
  if (text[pos] != '\'' || pos + 1 >= text.size()) return 0;
  const char a = text[pos + 1];
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if (pos + 2 >= text.size()) return 0;
  const char b = text[pos + 2];
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  return 0;
}

constexpr std::string_view kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr std::string_view kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|)"
    R"( ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|)"
    R"( ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

}  // namespace

std::string_view split_regex(SplitPattern pattern) {
  switch (pattern) {
    case SplitPattern::gpt2:
      return kGpt2Regex;
    case SplitPattern::llama3:
      return kLlama3Regex;
    case SplitPattern::qwen2:
      return kQwen2Regex;
  }
  return {};
}

std::optional<SplitPattern> find_split_pattern(std::string_view regex) {
  for (const SplitPattern p : {SplitPattern::gpt2, SplitPattern::llama3, SplitPattern::qwen2})
    if (regex == split_regex(p)) return p;
  return std::nullopt;
}

const char* split_pattern_name(SplitPattern pattern) {
  switch (pattern) {
    case SplitPattern::gpt2:
      return "GPT-2";
    case SplitPattern::llama3:
      return "Llama 3";
    case SplitPattern::qwen2:
      return "Qwen2";
  }
  return "?";
}

size_t next_pretoken(std::string_view text, size_t pos) {
  if (const size_t n = contraction(text, pos)) return pos + n;

  // " ?\p{L}+", " ?\p{N}+", " ?[^\s\p{L}\p{N}]+": one optional leading space, then a run.
  const size_t start = (text[pos] == ' ' && pos + 1 < text.size()) ? pos + 1 : pos;
  const Char first = char_at(text, start);
  if (first.klass != kSpace) return run_end(text, start + first.len, first.klass);

  // Whitespace. "\s+(?!\S)" leaves the last space of a run that is followed by a word for the
  // word (" the"); "\s+" takes a lone whitespace character such as the "\n" before a word.
  return scan::whitespace_end(text, pos);
}

size_t next_pretoken(SplitPattern pattern, std::string_view text, size_t pos) {
  switch (pattern) {
    case SplitPattern::gpt2:
      return next_pretoken(text, pos);
    case SplitPattern::llama3:
      return next_pretoken_llama3(text, pos);
    case SplitPattern::qwen2:
      return next_pretoken_qwen2(text, pos);
  }
  return text.size();
}

std::vector<std::string_view> pretokenize(std::string_view text, SplitPattern pattern) {
  std::vector<std::string_view> words;
  for (size_t pos = 0; pos < text.size();) {
    const size_t end = next_pretoken(pattern, text, pos);
    words.push_back(text.substr(pos, end - pos));
    pos = end;
  }
  return words;
}

}  // namespace strata::data
