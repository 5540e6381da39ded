// Options with a fixed set of values are enums, and each enum's names (as written in config files,
// JSON and messages) are one table beside it: EnumNames<E>::names, in the enum's order. The config
// parser, the JSON writer, reports and error messages all read that table, so a value is parsed
// once and a bad one is answered with the key and every name it could have been.
#pragma once
#include <cstddef>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <string_view>

namespace strata {

// Specialised beside each option enum:
//   template <> struct EnumNames<Precision> {
//     static constexpr std::string_view names[] = {"f32", "bf16", "fp16"};
//   };
template <class E>
struct EnumNames;

template <class E>
constexpr std::span<const std::string_view> enum_names() {
  return EnumNames<E>::names;
}

// The name of a value; the names are string literals, so .data() is NUL-terminated.
template <class E>
constexpr std::string_view enum_name(E value) {
  const auto names = enum_names<E>();
  const auto i = static_cast<size_t>(value);
  return i < names.size() ? names[i] : std::string_view("?");
}

template <class E>
constexpr std::optional<E> enum_from_name(std::string_view name) {
  const auto names = enum_names<E>();
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i] == name) return static_cast<E>(i);
  return std::nullopt;
}

// An option enum prints as its name (in messages built with cat(), logs and reports).
template <class E>
requires requires {
  EnumNames<E>::names;
}
std::ostream& operator<<(std::ostream& out, E value) {
  return out << enum_name(value);
}

// JSON (nlohmann, found by argument-dependent lookup): an option enum is written as its name. The
// build defines JSON_DISABLE_ENUM_SERIALIZATION, so an enum without names does not compile rather
// than being written as a number that no reader could interpret.
template <class Json, class E>
requires requires {
  EnumNames<E>::names;
}
void to_json(Json& j, E value) {
  j = std::string(enum_name(value));
}

// "\"a\", \"b\" or \"c\"".
std::string quoted_names(std::span<const std::string_view> names);

// Throws: "KEY: unknown value 'VALUE' (expected "a", "b" or "c")".
[[noreturn]] void unknown_enum_value(std::string_view key, std::string_view value,
                                     std::span<const std::string_view> names);

// The value named `name`, or an error naming `key` and the names.
template <class E>
E parse_enum(std::string_view key, std::string_view name) {
  if (const std::optional<E> v = enum_from_name<E>(name)) return *v;
  unknown_enum_value(key, name, enum_names<E>());
}

}  // namespace strata
