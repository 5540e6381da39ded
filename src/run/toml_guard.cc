#include "run/toml_guard.h"

namespace strata {

namespace {

bool starts(std::string_view text, size_t i, std::string_view with) {
  return text.substr(i, with.size()) == with;
}

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\r';
}

// Where the scanner is in TOML's grammar, as far as quotes care: a key (a line's start, a table
// header, after '{' or after ',' in an inline table) or a value (after '=', in an array). After
// '.', a quote starts a string only in a key (`a."b" = 1`); in a value the '.' belongs to a
// number and toml++ reads the quote as part of the bare value (`1."x`).
struct Nesting {
  std::string open;  // '[' an array, 'h' a table header, '{' an inline table
  bool key = true;
  void newline() {
    if (open.empty()) key = true;
  }
  void on(char c) {
    switch (c) {
      case '=':
        key = false;
        break;
      case '{':
        open.push_back('{');
        key = true;
        break;
      case '[':
        open.push_back(key && (open.empty() || open.back() == 'h') ? 'h' : '[');
        break;
      case ']':
      case '}':
        if (!open.empty()) open.pop_back();
        if (c == '}') key = false;
        break;
      case ',':
        key = !open.empty() && open.back() == '{';
        break;
      default:
        break;
    }
  }
};

}  // namespace

std::optional<TomlHazard> find_toml_hazard(std::string_view text) {
  enum class In { code, comment, basic, literal, ml_basic, ml_literal };
  In in = In::code;
  // The last character of code, spaces and comments skipped ('\n' at a line's start). A quote
  // starts a string only where TOML has one: a key at the start of a line, after '=', '[', '{'
  // or ',', or after the '.' of a dotted key (Nesting). Elsewhere toml++ reads it as part of a
  // bare value (`2"x"`, `1."x"`), asking of each character after it whether it ends the value, so
  // what follows is code here too.
  char prev = '\n';
  Nesting nesting;
  int64_t line = 1;
  size_t line_start = 0;
  const auto hazard = [&](size_t i, const char* what) {
    return TomlHazard{line, static_cast<int64_t>(i - line_start) + 1, what};
  };
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\n') {
      ++line;
      line_start = i + 1;
      if (in == In::comment || in == In::basic || in == In::literal) in = In::code;
      if (in == In::code) {
        prev = '\n';
        nesting.newline();
      }
      continue;
    }
    switch (in) {
      case In::code:
        if (static_cast<unsigned char>(c) >= 0x80)
          return hazard(i,
                        "a non-ASCII character outside a string or comment (TOML allows them "
                        "only inside quotes and after #)");
        if (is_space(c)) {
          // between tokens
        } else if (c == '#') {
          in = In::comment;
        } else if ((c == '"' || c == '\'') &&
                   (std::string_view("\n=[{,").find(prev) != std::string_view::npos ||
                    (prev == '.' && nesting.key))) {
          const bool multi = starts(text, i, c == '"' ? "\"\"\"" : "'''");
          if (c == '"')
            in = multi ? In::ml_basic : In::basic;
          else
            in = multi ? In::ml_literal : In::literal;
          if (multi) i += 2;
        } else {
          prev = c;
          nesting.on(c);
        }
        break;
      case In::comment:
        break;
      case In::basic:
        if (c == '\\') {
          ++i;  // an escape: the next character is not the closing quote
        } else if (c == '"') {
          in = In::code;
          prev = c;
        }
        break;
      case In::literal:
        if (c == '\'') {
          in = In::code;
          prev = c;
        }
        break;
      case In::ml_basic:
        if (c == '\\') {
          // After a backslash toml++ asks of the next character, and of every one after a run of
          // whitespace (a line-ending backslash), whether it is whitespace: the first one that
          // is not must be ASCII. An empty run is an ordinary escape.
          size_t j = i + 1;
          while (j < text.size() && (is_space(text[j]) || text[j] == '\n')) {
            if (text[j] == '\n') {
              ++line;
              line_start = j + 1;
            }
            ++j;
          }
          if (j < text.size() && static_cast<unsigned char>(text[j]) >= 0x80)
            return hazard(j,
                          "a non-ASCII character right after a backslash (and the whitespace "
                          "after it) in a \"\"\" string, which toml++ 3.3 cannot read safely; "
                          "write it as \\uXXXX");
          i = j == i + 1 ? j : j - 1;  // an escape skips its character; a run ends before j
        } else if (starts(text, i, "\"\"\"")) {
          i += 2;
          while (i + 1 < text.size() && text[i + 1] == '"') ++i;  // up to two quotes of content
          in = In::code;
          prev = '"';
        }
        break;
      case In::ml_literal:
        if (starts(text, i, "'''")) {
          i += 2;
          while (i + 1 < text.size() && text[i + 1] == '\'') ++i;
          in = In::code;
          prev = '\'';
        }
        break;
    }
  }
  return std::nullopt;
}

}  // namespace strata
