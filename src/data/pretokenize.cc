#include "data/pretokenize.h"

#include "data/unicode.h"

namespace strata::data {

namespace {

struct Char {
  CharClass klass;
  int len;
};

Char char_at(std::string_view text, size_t pos) {
  const auto b = static_cast<uint8_t>(text[pos]);
  if (b < 0x80) return {char_class(b), 1};
  uint32_t cp;
  bool valid;
  const int len = decode_utf8(text, pos, &cp, &valid);
  return {valid ? char_class(cp) : kOther, len};
}

// End of the run of characters of class `klass` starting at pos.
size_t run_end(std::string_view text, size_t pos, CharClass klass) {
  while (pos < text.size()) {
    const Char c = char_at(text, pos);
    if (c.klass != klass) break;
    pos += c.len;
  }
  return pos;
}

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

}  // namespace

size_t next_pretoken(std::string_view text, size_t pos) {
  if (const size_t n = contraction(text, pos)) return pos + n;

  // " ?\p{L}+", " ?\p{N}+", " ?[^\s\p{L}\p{N}]+": one optional leading space, then a run.
  const size_t start = (text[pos] == ' ' && pos + 1 < text.size()) ? pos + 1 : pos;
  const Char first = char_at(text, start);
  if (first.klass != kSpace) return run_end(text, start + first.len, first.klass);

  // Whitespace. "\s+(?!\S)" leaves the last space of a run that is followed by a word for the
  // word (" the"); "\s+" takes a lone whitespace character such as the "\n" before a word.
  size_t last = pos;  // start of the last whitespace character of the run
  size_t end = pos;
  while (end < text.size()) {
    const Char c = char_at(text, end);
    if (c.klass != kSpace) break;
    last = end;
    end += c.len;
  }
  if (end == text.size() || last == pos) return end;
  return last;
}

std::vector<std::string_view> pretokenize(std::string_view text) {
  std::vector<std::string_view> words;
  for (size_t pos = 0; pos < text.size();) {
    const size_t end = next_pretoken(text, pos);
    words.push_back(text.substr(pos, end - pos));
    pos = end;
  }
  return words;
}

}  // namespace strata::data
