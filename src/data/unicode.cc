#include "data/unicode.h"

#include <algorithm>
#include <cstring>

namespace strata::data {

CharClass char_class(uint32_t cp) {
  if (cp < 0x80) {
    if ((cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z')) return kLetter;
    if (cp >= '0' && cp <= '9') return kDigit;
    if (cp == ' ' || (cp >= '\t' && cp <= '\r')) return kSpace;
    return kOther;
  }
  const CodeRange* end = kCodeRanges + kNumCodeRanges;
  const CodeRange* it = std::upper_bound(
      kCodeRanges, end, cp, [](uint32_t c, const CodeRange& r) { return c < r.first; });
  if (it == kCodeRanges) return kOther;
  --it;
  return cp <= it->last ? it->klass : kOther;
}

int decode_utf8(std::string_view text, size_t pos, uint32_t* cp, bool* valid) {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(text[i]); };
  const uint8_t b0 = byte(pos);
  *cp = b0;
  *valid = true;
  if (b0 < 0x80) return 1;
  int len;
  uint32_t min;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2, min = 0x80, *cp = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3, min = 0x800, *cp = b0 & 0x0F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4, min = 0x10000, *cp = b0 & 0x07;
  } else {
    *cp = b0, *valid = false;
    return 1;
  }
  if (pos + len > text.size()) {
    *cp = b0, *valid = false;
    return 1;
  }
  for (int i = 1; i < len; ++i) {
    const uint8_t b = byte(pos + i);
    if ((b & 0xC0) != 0x80) {
      *cp = b0, *valid = false;
      return 1;
    }
    *cp = (*cp << 6) | (b & 0x3F);
  }
  if (*cp < min || *cp > 0x10FFFF || (*cp >= 0xD800 && *cp <= 0xDFFF)) {
    *cp = b0, *valid = false;
    return 1;
  }
  return len;
}

bool is_valid_utf8(std::string_view text, size_t* bad_offset) {
  size_t pos = 0;
  while (pos < text.size()) {
    if (static_cast<uint8_t>(text[pos]) < 0x80) {  // fast path for ASCII
      ++pos;
      continue;
    }
    uint32_t cp;
    bool valid;
    const int len = decode_utf8(text, pos, &cp, &valid);
    if (!valid) {
      if (bad_offset) *bad_offset = pos;
      return false;
    }
    pos += len;
  }
  return true;
}

namespace {
// Bytes of the maximal subpart at pos, which does not start a valid sequence: the lead byte and
// the continuation bytes that could still complete it (the second byte's range depends on the
// lead byte: E0 A0-BF, ED 80-9F, F0 90-BF, F4 80-8F, others 80-BF), at least 1.
size_t maximal_subpart(std::string_view text, size_t pos) {
  const auto b0 = static_cast<uint8_t>(text[pos]);
  size_t len;
  uint8_t lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3, lo = b0 == 0xE0 ? 0xA0 : 0x80, hi = b0 == 0xED ? 0x9F : 0xBF;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4, lo = b0 == 0xF0 ? 0x90 : 0x80, hi = b0 == 0xF4 ? 0x8F : 0xBF;
  } else {
    return 1;
  }
  size_t n = 1;
  for (; n < len && pos + n < text.size(); ++n) {
    const auto b = static_cast<uint8_t>(text[pos + n]);
    if (n == 1 ? (b < lo || b > hi) : (b & 0xC0) != 0x80) break;
  }
  return n;
}
}  // namespace

std::string replace_invalid_utf8(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 16);
  for (size_t pos = 0; pos < text.size();) {
    uint32_t cp;
    bool valid;
    const int len = decode_utf8(text, pos, &cp, &valid);
    if (valid) {
      out.append(text, pos, static_cast<size_t>(len));
      pos += static_cast<size_t>(len);
    } else {
      out += "\xEF\xBF\xBD";  // U+FFFD
      pos += maximal_subpart(text, pos);
    }
  }
  return out;
}

bool is_ascii(std::string_view text) {
  // Eight bytes at a time: ASCII text (most corpora) is the common case.
  size_t pos = 0;
  for (; pos + 8 <= text.size(); pos += 8) {
    uint64_t word;
    std::memcpy(&word, text.data() + pos, 8);
    if (word & 0x8080808080808080ull) return false;
  }
  for (; pos < text.size(); ++pos)
    if (static_cast<uint8_t>(text[pos]) >= 0x80) return false;
  return true;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

namespace {
// GPT-2's bytes_to_unicode(): printable Latin-1 bytes map to themselves, the other 68 bytes to
// U+0100 upwards in byte order.
std::array<uint32_t, 256> make_byte_code_points() {
  std::array<uint32_t, 256> cps{};
  uint32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    cps[b] = printable ? static_cast<uint32_t>(b) : next++;
  }
  return cps;
}
const std::array<uint32_t, 256> kByteCodePoints = make_byte_code_points();
}  // namespace

const std::array<std::string, 256>& byte_to_unicode() {
  static const std::array<std::string, 256> table = [] {
    std::array<std::string, 256> t;
    for (int b = 0; b < 256; ++b) append_utf8(t[b], kByteCodePoints[b]);
    return t;
  }();
  return table;
}

int unicode_to_byte(uint32_t cp) {
  if (cp < 0x100) return kByteCodePoints[cp] == cp ? static_cast<int>(cp) : -1;
  if (cp < 0x100 + 68) {
    for (int b = 0; b < 256; ++b)
      if (kByteCodePoints[b] == cp) return b;
  }
  return -1;
}

std::string to_byte_level(std::string_view bytes) {
  std::string s;
  for (char c : bytes) s += byte_to_unicode()[static_cast<uint8_t>(c)];
  return s;
}

bool from_byte_level(std::string_view spelled, std::string* bytes) {
  bytes->clear();
  for (size_t pos = 0; pos < spelled.size();) {
    uint32_t cp;
    bool valid;
    pos += static_cast<size_t>(decode_utf8(spelled, pos, &cp, &valid));
    const int b = valid ? unicode_to_byte(cp) : -1;
    if (b < 0) return false;
    *bytes += static_cast<char>(b);
  }
  return true;
}

}  // namespace strata::data
