// The Llama 3 and Qwen2 split patterns by hand (pretokenize.h has them in full). They differ only
// in how many digits a number word takes: \p{N}{1,3} (Llama 3, also GPT-4's cl100k) or \p{N}.
// The alternatives are tried in the regex's order at each word start; where the regex would
// backtrack, the comment says what that leaves.
#include "data/pretokenize.h"
#include "data/pretokenize_scan.h"

namespace strata::data {

namespace {

using scan::Char;
using scan::char_at;
using scan::run_end;

bool is_crlf(char c) {
  return c == '\r' || c == '\n';
}

// (?i:'s|'t|'re|'ve|'m|'ll|'d): its length at pos, or 0. Case-insensitive as Oniguruma folds
// case: besides upper case, "s" also matches U+017F LATIN SMALL LETTER LONG S (which folds to
// "s"); no other character folds to one of these letters.
size_t contraction_any_case(std::string_view text, size_t pos) {
  if (text[pos] != '\'' || pos + 1 >= text.size()) return 0;
  const char a = static_cast<char>(text[pos + 1] | 0x20);  // ASCII lower case (letters only below)
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if (text.compare(pos + 1, 2, "\xC5\xBF") == 0) return 3;  // 'ſ
  if (pos + 2 >= text.size()) return 0;
  const char b = static_cast<char>(text[pos + 2] | 0x20);
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  return 0;
}

template <int kMaxDigits>
size_t next_word(std::string_view text, size_t pos) {
  if (const size_t n = contraction_any_case(text, pos)) return pos + n;
  const Char c = char_at(text, pos);

  // [^\r\n\p{L}\p{N}]?\p{L}+ : letters, with one character before them that is neither a letter,
  // a digit nor \r \n (a space, punctuation, a tab: " the", "¿Qué", "\tif").
  if (c.klass == kLetter) return run_end(text, pos + c.len, kLetter);
  if (c.klass != kDigit && !is_crlf(text[pos]) && pos + c.len < text.size()) {
    const Char d = char_at(text, pos + c.len);
    if (d.klass == kLetter) return run_end(text, pos + c.len + d.len, kLetter);
  }

  // \p{N}{1,3} or \p{N}: up to kMaxDigits digits.
  if (c.klass == kDigit) {
    size_t end = pos + c.len;
    for (int n = 1; n < kMaxDigits && end < text.size(); ++n) {
      const Char d = char_at(text, end);
      if (d.klass != kDigit) break;
      end += d.len;
    }
    return end;
  }

  // " ?[^\s\p{L}\p{N}]+[\r\n]*": a run of other characters (with one space before it), and the
  // line breaks right after it. Without an other character after the space, the space is
  // whitespace for the alternatives below.
  size_t start = pos;
  if (text[pos] == ' ' && pos + 1 < text.size() && char_at(text, pos + 1).klass == kOther)
    start = pos + 1;
  if (start > pos || c.klass == kOther) {
    const Char o = start > pos ? char_at(text, start) : c;
    size_t end = run_end(text, start + o.len, kOther);
    while (end < text.size() && is_crlf(text[end])) ++end;
    return end;
  }

  // c is whitespace. "\s*[\r\n]+": \s* takes the whole run, then backtracks to the last \r or \n
  // in it, so the word ends right after that line break (" \n\n  x" -> " \n\n", "  x").
  size_t end = pos, after_break = 0;
  while (end < text.size()) {
    const Char w = char_at(text, end);
    if (w.klass != kSpace) break;
    if (is_crlf(text[end])) after_break = end + 1;
    end += w.len;
  }
  if (after_break) return after_break;
  // No line break in the run: "\s+(?!\S)|\s+" as in GPT-2.
  return scan::whitespace_end(text, pos);
}

}  // namespace

size_t next_pretoken_llama3(std::string_view text, size_t pos) {
  return next_word<3>(text, pos);
}
size_t next_pretoken_qwen2(std::string_view text, size_t pos) {
  return next_word<1>(text, pos);
}

}  // namespace strata::data
