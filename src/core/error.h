// Errors: one exception type whose message says what went wrong, where, and what to do.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace strata {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// Concatenates any streamable values into one string: cat("step ", 3, ": ", x).
template <typename... Args>
std::string cat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}

template <typename... Args>
[[noreturn]] void fail(const Args&... args) {
  throw Error(cat(args...));
}

}  // namespace strata

// STRATA_CHECK(cond, "message parts", ...) throws strata::Error naming the message when cond is
// false.
#define STRATA_CHECK(cond, ...)               \
  do {                                        \
    if (!(cond)) ::strata::fail(__VA_ARGS__); \
  } while (0)
