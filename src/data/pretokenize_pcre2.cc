#include "data/pretokenize_pcre2.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "core/error.h"
#include "data/unicode.h"

namespace strata::data {

namespace {

pcre2_code* code_of(void* p) {
  return static_cast<pcre2_code*>(p);
}

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof(buf));
  return reinterpret_cast<const char*>(buf);
}

// Oniguruma's \s: the White_Space property (the kSpace class of unicode.h), as class members.
constexpr std::string_view kWhiteSpace =
    R"(\t-\r\x20\x{85}\x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000})";

// The pattern with \s and \S spelled out as White_Space, so PCRE2 agrees with Oniguruma on
// U+180E, which PCRE2's \s still counts as space (Unicode dropped it from White_Space in 6.3).
// Everything else is passed through: escapes are copied whole, and classes are tracked only to
// know which spelling \s needs. \S inside a class has no spelling without class subtraction and
// keeps PCRE2's meaning.
std::string pcre2_pattern(const std::string& pattern) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char e = pattern[++i];
      // Appended piece by piece: GCC 12's -Wrestrict misfires on `"[" + std::string(...)`.
      if (e == 's') {
        if (!in_class) out.push_back('[');
        out.append(kWhiteSpace);
        if (!in_class) out.push_back(']');
      } else if (e == 'S' && !in_class) {
        out.append("[^");
        out.append(kWhiteSpace);
        out.push_back(']');
      } else {
        out += c;
        out += e;
      }
      continue;
    }
    out += c;
    if (!in_class && c == '[') {
      in_class = true;
      // A ']' first in the class (after an optional '^') is a member, not the end.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];
    } else if (in_class && c == '[' && i + 1 < pattern.size() && pattern[i + 1] == ':') {
      const size_t close = pattern.find(":]", i + 2);  // a POSIX class such as [:alpha:]
      if (close != std::string::npos) {
        out.append(pattern, i + 1, close + 2 - (i + 1));
        i = close + 1;
      }
    } else if (in_class && c == ']') {
      in_class = false;
    }
  }
  return out;
}

// Per-thread match state: match data for the whole match only, and a JIT stack larger than the
// default 32 KiB, which long words (a megabyte of spaces) would overflow.
struct MatchState {
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  pcre2_jit_stack* stack = pcre2_jit_stack_create(64 * 1024, 64 * 1024 * 1024, nullptr);
  MatchState() { pcre2_jit_stack_assign(context, nullptr, stack); }
  ~MatchState() {
    pcre2_jit_stack_free(stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
  }
  MatchState(const MatchState&) = delete;
  MatchState& operator=(const MatchState&) = delete;
};

}  // namespace

RegexSplitter::RegexSplitter(const std::string& pattern, const std::string& source)
    : pattern_(pattern) {
  const std::string compiled = pcre2_pattern(pattern);
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(compiled.data()), compiled.size(),
                                   PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
  STRATA_CHECK(code != nullptr, source, ": the split pattern \"", pattern,
               "\" does not compile in PCRE2 (", pcre2_message(error), " at offset ", offset,
               " of \"", compiled, "\")");
  code_ = code;
  // Without a JIT (an architecture PCRE2 has none for) the interpreter gives the same matches.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
}

RegexSplitter::~RegexSplitter() {
  pcre2_code_free(code_of(code_));
}

// tokenizers' Split: onig's find_iter (successive matches, each searched from where the last one
// ended; an empty match right where the last match ended is skipped by one character), then the
// matches and the gaps between them as pieces, empty ones dropped.
void RegexSplitter::split(std::string_view text, std::vector<std::string_view>& out) const {
  thread_local MatchState state;
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(state.data);
  size_t search_from = 0, prev = 0;
  bool matched = false;
  size_t last_match_end = 0;
  while (search_from <= text.size()) {
    const int rc = pcre2_match(code_of(code_), subject, text.size(), search_from,
                               PCRE2_NO_UTF_CHECK, state.data, state.context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    STRATA_CHECK(rc >= 0, "split pattern \"", pattern_, "\": PCRE2 match failed (",
                 pcre2_message(rc), ")");
    const size_t start = ovector[0], end = ovector[1];
    if (start == end && matched && last_match_end == end) {
      if (search_from >= text.size()) break;
      uint32_t cp;
      bool valid;
      search_from += static_cast<size_t>(decode_utf8(text, search_from, &cp, &valid));
      continue;
    }
    search_from = end;
    matched = true;
    last_match_end = end;
    if (start > prev) out.push_back(text.substr(prev, start - prev));
    if (end > start) out.push_back(text.substr(start, end - start));
    prev = end;
  }
  if (prev < text.size()) out.push_back(text.substr(prev));
}

}  // namespace strata::data
