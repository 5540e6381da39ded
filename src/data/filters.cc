#include "data/filters.h"

#include <algorithm>
#include <bit>

#include "data/unicode.h"

namespace strata::data {

std::vector<std::string_view> split_documents(std::string_view text, const std::string& separator) {
  std::vector<std::string_view> docs;
  if (separator.empty()) {
    if (!text.empty()) docs.push_back(text);
    return docs;
  }
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t end = text.find(separator, pos);
    if (end == std::string_view::npos) end = text.size();
    if (end > pos) docs.push_back(text.substr(pos, end - pos));
    pos = end + separator.size();
  }
  return docs;
}

const char* verdict_name(Verdict v) {
  switch (v) {
    case Verdict::kept:
      return "kept";
    case Verdict::invalid_utf8:
      return "invalid_utf8";
    case Verdict::too_short:
      return "too_short";
    case Verdict::too_long:
      return "too_long";
    case Verdict::repetitive:
      return "repetitive";
    case Verdict::nonprint:
      return "nonprint";
    case Verdict::duplicate:
      return "duplicate";
    case Verdict::near_duplicate:
      return "near_duplicate";
  }
  return "?";
}

int64_t count_chars(std::string_view doc) {
  int64_t n = 0;
  for (char c : doc) n += (static_cast<uint8_t>(c) & 0xC0) != 0x80;  // skip continuation bytes
  return n;
}

namespace {

uint64_t mix(uint64_t x) {  // splitmix64 finalizer
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// An open-addressing set of non-zero 64-bit hashes; insert() says whether it was already there.
class HashSet {
 public:
  explicit HashSet(size_t expected) : slots_(std::bit_ceil(2 * expected + 2), 0) {}
  bool insert(uint64_t h) {
    h |= 1;  // 0 marks an empty slot
    const size_t mask = slots_.size() - 1;
    for (size_t i = mix(h) & mask;; i = (i + 1) & mask) {
      if (slots_[i] == h) return true;
      if (slots_[i] == 0) {
        slots_[i] = h;
        return false;
      }
    }
  }

 private:
  std::vector<uint64_t> slots_;
};

double duplicate_line_fraction(std::string_view doc) {
  std::vector<std::string_view> lines;
  for (size_t pos = 0; pos < doc.size();) {
    size_t end = doc.find('\n', pos);
    if (end == std::string_view::npos) end = doc.size();
    const std::string_view line = doc.substr(pos, end - pos);
    if (line.find_first_not_of(" \t\r") != std::string_view::npos) lines.push_back(line);
    pos = end + 1;
  }
  if (lines.size() < 2) return 0.0;
  HashSet seen(lines.size());
  size_t repeats = 0;
  for (std::string_view line : lines) repeats += seen.insert(std::hash<std::string_view>{}(line));
  return static_cast<double>(repeats) / static_cast<double>(lines.size());
}

double duplicate_window_fraction(std::string_view doc) {
  constexpr size_t kWindow = 32;
  if (doc.size() < 2 * kWindow) return 0.0;
  // Polynomial rolling hash over bytes (mod 2^64); kPow = kBase^(kWindow-1) removes a byte.
  constexpr uint64_t kBase = 0x100000001b3ull;
  uint64_t pow = 1;
  for (size_t i = 1; i < kWindow; ++i) pow *= kBase;
  const size_t windows = doc.size() - kWindow + 1;
  HashSet seen(windows);
  uint64_t h = 0;
  for (size_t i = 0; i < kWindow; ++i) h = h * kBase + static_cast<uint8_t>(doc[i]);
  size_t repeats = seen.insert(mix(h));
  for (size_t i = kWindow; i < doc.size(); ++i) {
    h = (h - pow * static_cast<uint8_t>(doc[i - kWindow])) * kBase + static_cast<uint8_t>(doc[i]);
    repeats += seen.insert(mix(h));
  }
  return static_cast<double>(repeats) / static_cast<double>(windows);
}

}  // namespace

double repeat_fraction(std::string_view doc) {
  return std::max(duplicate_line_fraction(doc), duplicate_window_fraction(doc));
}

double nonprint_fraction(std::string_view doc) {
  int64_t chars = 0, control = 0;
  for (size_t pos = 0; pos < doc.size();) {
    uint32_t cp;
    bool valid;
    pos += decode_utf8(doc, pos, &cp, &valid);
    ++chars;
    const bool c0 = cp < 0x20 && cp != '\t' && cp != '\n' && cp != '\r';
    control += valid && (c0 || (cp >= 0x7F && cp <= 0x9F));
  }
  return chars == 0 ? 0.0 : static_cast<double>(control) / static_cast<double>(chars);
}

Verdict judge_document(std::string_view doc, const FilterConfig& filters) {
  if (!is_valid_utf8(doc)) return Verdict::invalid_utf8;
  const int64_t chars = count_chars(doc);
  if (chars < filters.min_doc_chars) return Verdict::too_short;
  if (chars > filters.max_doc_chars) return Verdict::too_long;
  if (repeat_fraction(doc) > filters.max_repeat_fraction) return Verdict::repetitive;
  if (nonprint_fraction(doc) > filters.max_nonprint_fraction) return Verdict::nonprint;
  return Verdict::kept;
}

}  // namespace strata::data
