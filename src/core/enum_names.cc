#include "core/enum_names.h"

#include "core/error.h"

namespace strata {

std::string quoted_names(std::span<const std::string_view> names) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += i + 1 == names.size() ? " or " : ", ";
    out += '"';
    out += names[i];
    out += '"';
  }
  return out;
}

void unknown_enum_value(std::string_view key, std::string_view value,
                        std::span<const std::string_view> names) {
  fail(key, ": unknown value '", value, "' (expected ", quoted_names(names), ")");
}

}  // namespace strata
