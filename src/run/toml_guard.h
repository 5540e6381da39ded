// A guard in front of toml++ (Debian 12's 3.3.0): its check for non-ASCII whitespace,
// is_non_ascii_horizontal_whitespace, reaches __builtin_unreachable() for most non-ASCII
// characters (U+00A1 '¡', 'é' as the first character of a line, ...), which is undefined behaviour
// in a release build (found by fuzzing, tests/fuzz/config/regress-toml-unreachable). The parser
// asks that question only outside strings and comments, and after a backslash in a """ string
// (of the next character, or of the first one after the whitespace of a line-ending backslash).
// TOML allows non-ASCII characters only inside strings and comments, so a text with one anywhere
// else is invalid anyway: the guard finds it first and the caller reports it as the syntax error it
// is, without handing the text to toml++.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace strata {

struct TomlHazard {
  int64_t line = 0, column = 0;  // 1-based, as toml++ reports positions
  std::string description;
};

// The first non-ASCII character of `text` where toml++ 3.3 would misbehave, or nullopt.
std::optional<TomlHazard> find_toml_hazard(std::string_view text);

}  // namespace strata
