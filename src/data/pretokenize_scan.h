// The character scanning the hand-written pre-tokenizers share (pretokenize.cc: GPT-2,
// pretokenize_llama3.cc: Llama 3 and Qwen2). Inline: they run once or twice per byte of text.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "data/unicode.h"

namespace strata::data::scan {

struct Char {
  CharClass klass;
  int len;
};

// The class and length of the character at pos. A byte that does not start valid UTF-8 is an
// "other" character of one byte, so any byte string splits (tokenizers that keep invalid bytes).
inline Char char_at(std::string_view text, size_t pos) {
  const auto b = static_cast<uint8_t>(text[pos]);
  if (b < 0x80) return {char_class(b), 1};
  uint32_t cp;
  bool valid;
  const int len = decode_utf8(text, pos, &cp, &valid);
  return {valid ? char_class(cp) : kOther, len};
}

// End of the run of characters of class `klass` starting at pos.
inline size_t run_end(std::string_view text, size_t pos, CharClass klass) {
  while (pos < text.size()) {
    const Char c = char_at(text, pos);
    if (c.klass != klass) break;
    pos += c.len;
  }
  return pos;
}

// "\s+(?!\S)|\s+" at pos, a whitespace character: the run, less its last character when a word
// follows and the run has more than one (the space before " the" belongs to the word).
inline size_t whitespace_end(std::string_view text, size_t pos) {
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

}  // namespace strata::data::scan
