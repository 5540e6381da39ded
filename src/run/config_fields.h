// The table of RunConfig's keys (config_fields.cc): one Field per key, naming it as TOML and JSON
// write it and pointing into a RunConfig. config.cc's TOML reader, `--set` path, JSON writer and
// reader and "did you mean" hints all walk it, so a new field is one line there.
#pragma once
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>
#include <vector>

#include "core/enum_names.h"
#include "core/error.h"
#include "run/config.h"

namespace strata {

// A field whose values are the names of an enum (core/enum_names.h), type-erased so that every
// option enum shares one path through TOML, --set and JSON: a value is parsed once, here, and a
// bad one names the key and every accepted name.
struct EnumRef {
  void* value;
  std::span<const std::string_view> names;
  size_t (*get)(const void*);
  void (*set)(void*, size_t);

  template <class E>
  static EnumRef of(E* p) {
    return {p, enum_names<E>(),
            [](const void* v) { return static_cast<size_t>(*static_cast<const E*>(v)); },
            [](void* v, size_t i) { *static_cast<E*>(v) = static_cast<E>(i); }};
  }
  std::string_view name() const { return names[get(value)]; }
  void assign(const std::string& where, const std::string& key, std::string_view name) const {
    for (size_t i = 0; i < names.size(); ++i)
      if (names[i] == name) return set(value, i);
    fail(where, ": ", key, ": unknown value '", name, "' (expected ", quoted_names(names), ")");
  }
};

using FieldRef = std::variant<int64_t*, uint64_t*, float*, double*, bool*, std::string*,
                              std::vector<std::string>*, std::vector<int64_t>*, EnumRef>;

template <class T>
FieldRef field_ref(T* p) {
  if constexpr (std::is_enum_v<T>)
    return EnumRef::of(p);
  else
    return p;
}

struct Field {
  const char* key;  // "section.name", as written in TOML and JSON
  FieldRef (*ref)(RunConfig&);
};

// Every key, in the order the JSON writer emits them.
std::span<const Field> config_fields();
// The field of a "section.name" key; null when there is none.
const Field* find_field(const std::string& key);
// `key` names a section ("model", "data.filters", ...), not a field.
bool is_section(const std::string& key);

}  // namespace strata
