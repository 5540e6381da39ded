#include "data/tokenizer_added.h"

#include <utf8proc.h>

#include <algorithm>

#include "data/unicode.h"

namespace strata::data {

namespace {

// The code point that ends text (-1 if empty or not valid UTF-8 there).
int64_t last_char(std::string_view text) {
  size_t start = text.size();
  while (start > 0 && text.size() - start < 4) {
    --start;
    if ((static_cast<uint8_t>(text[start]) & 0xC0) != 0x80) break;
  }
  if (start == text.size()) return -1;
  uint32_t cp;
  bool valid;
  const int len = decode_utf8(text, start, &cp, &valid);
  return valid && start + static_cast<size_t>(len) == text.size() ? cp : -1;
}

int64_t first_char(std::string_view text) {
  if (text.empty()) return -1;
  uint32_t cp;
  bool valid;
  decode_utf8(text, 0, &cp, &valid);
  return valid ? cp : -1;
}

// The Rust regex crate's \w (what tokenizers' single_word checks use): Alphabetic, marks,
// decimal digits, connector punctuation and the joiners. Alphabetic is taken as the letters, Nl,
// and the symbols with Other_Alphabetic (circled and squared Latin letters); its other members
// are marks, which are in \w anyway.
bool is_word_char(int64_t cp) {
  if (cp < 0) return false;
  if (cp < 0x80)
    return (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || (cp >= '0' && cp <= '9') ||
           cp == '_';
  if (cp == 0x200C || cp == 0x200D) return true;
  if ((cp >= 0x24B6 && cp <= 0x24E9) || (cp >= 0x1F130 && cp <= 0x1F149) ||
      (cp >= 0x1F150 && cp <= 0x1F169) || (cp >= 0x1F170 && cp <= 0x1F189))
    return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return false;
  }
}

bool is_space(int64_t cp) {
  return cp >= 0 && char_class(static_cast<uint32_t>(cp)) == kSpace;
}

// Where the whitespace at the end of text starts (regex \s*$).
size_t trailing_space_start(std::string_view text) {
  size_t end = text.size();
  while (end > 0) {
    const int64_t cp = last_char(text.substr(0, end));
    if (!is_space(cp)) break;
    end -= cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
  }
  return end;
}

// Length of the whitespace at the start of text (regex ^\s*).
size_t leading_space_len(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    uint32_t cp;
    bool valid;
    const int len = decode_utf8(text, pos, &cp, &valid);
    if (!valid || char_class(cp) != kSpace) break;
    pos += static_cast<size_t>(len);
  }
  return pos;
}

}  // namespace

void AddedTokenSplitter::add(const AddedToken& token, std::string pattern) {
  if (pattern.empty()) return;  // matches nowhere
  const auto index = static_cast<uint32_t>(entries_.size());
  auto& bucket = by_first_byte_[static_cast<uint8_t>(pattern[0])];
  const size_t len = pattern.size();
  entries_.push_back({std::move(pattern), token});
  if (!token.special) ++num_non_special_;
  // After the longer and equally long patterns: longest first, then in the order added.
  const auto at = std::upper_bound(bucket.begin(), bucket.end(), len, [&](size_t n, uint32_t i) {
    return n > entries_[i].pattern.size();
  });
  bucket.insert(at, index);
}

void AddedTokenSplitter::split(std::string_view text, bool parse_special,
                               std::vector<Piece>& out) const {
  size_t start_offset = 0;  // end of the last piece
  size_t search = 0;        // where the next match may start
  while (search < text.size()) {
    // The leftmost position where a pattern occurs, and the longest pattern there.
    const Entry* entry = nullptr;
    size_t at = search;
    for (; at < text.size() && !entry; ++at) {
      for (const uint32_t i : by_first_byte_[static_cast<uint8_t>(text[at])]) {
        if (text.compare(at, entries_[i].pattern.size(), entries_[i].pattern) == 0) {
          entry = &entries_[i];
          break;
        }
      }
    }
    if (!entry) break;
    size_t start = at - 1, stop = start + entry->pattern.size();
    search = stop;
    const AddedToken& token = entry->token;
    if (token.special && !parse_special) continue;
    if (token.single_word) {
      const bool space_before = start == 0 || !is_word_char(last_char(text.substr(0, start)));
      const bool space_after = stop == text.size() || !is_word_char(first_char(text.substr(stop)));
      if (!space_before || !space_after) continue;
    }
    if (token.lstrip) start = std::max(trailing_space_start(text.substr(0, start)), start_offset);
    if (token.rstrip) stop += leading_space_len(text.substr(stop));
    if (start > start_offset) out.push_back({start_offset, start, -1});
    out.push_back({start, stop, token.id});
    start_offset = stop;
  }
  if (start_offset < text.size()) out.push_back({start_offset, text.size(), -1});
}

}  // namespace strata::data
