// RunConfig from TOML, `--set` overrides and JSON. Every key lives in one table (config_fields.cc):
// the TOML reader, the override path, the JSON writer and reader and the "did you mean" hints
// all walk it, so a new field is one line there and cannot be forgotten by any of them.
#include "run/config.h"

#include <toml++/toml.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <span>
#include <sstream>
#include <type_traits>
#include <variant>

#include "core/enum_names.h"
#include "core/error.h"
#include "run/config_fields.h"
#include "run/config_validate.h"
#include "run/toml_guard.h"

namespace strata {

namespace {

// ---- "did you mean" -------------------------------------------------------------------------

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

std::string leaf(const std::string& key) {
  const size_t dot = key.rfind('.');
  return dot == std::string::npos ? key : key.substr(dot + 1);
}

std::string section_of(const std::string& key) {
  const size_t dot = key.rfind('.');
  return dot == std::string::npos ? "" : key.substr(0, dot);
}

// The known key closest to `key`, comparing whole keys (typos), the last component alone (a right
// name in the wrong section, or with no section), and prefixes (a shortened name: 'optim.warmup'
// for 'optim.warmup_steps'); empty if nothing is close.
std::string closest_key(const std::string& key) {
  std::string best;
  size_t best_distance = SIZE_MAX;
  for (const Field& f : config_fields()) {
    const std::string candidate = f.key;
    const size_t other_section = section_of(key) == section_of(candidate) ? 0 : 2;
    size_t d = std::min(edit_distance(key, candidate),
                        edit_distance(leaf(key), leaf(candidate)) + other_section);
    if (leaf(key).size() >= 3 && leaf(candidate).starts_with(leaf(key)))
      d = std::min(d, 1 + other_section);
    if (d < best_distance) {
      best_distance = d;
      best = candidate;
    }
  }
  return best_distance <= std::max<size_t>(3, leaf(key).size() / 2) ? best : "";
}

[[noreturn]] void unknown_key(const std::string& where, const std::string& key) {
  const std::string hint = closest_key(key);
  if (hint.empty()) fail(where, ": unknown key '", key, "'");
  fail(where, ": unknown key '", key, "' (did you mean '", hint, "'?)");
}

// ---- values from TOML -----------------------------------------------------------------------

std::string toml_type_name(const toml::node& node) {
  switch (node.type()) {
    case toml::node_type::string:
      return "string";
    case toml::node_type::integer:
      return "integer";
    case toml::node_type::floating_point:
      return "float";
    case toml::node_type::boolean:
      return "boolean";
    case toml::node_type::array:
      return "array";
    case toml::node_type::table:
      return "table";
    case toml::node_type::date:
      return "date";
    case toml::node_type::time:
      return "time";
    case toml::node_type::date_time:
      return "date-time";
    case toml::node_type::none:
      break;
  }
  return "nothing";
}

// "float 5.5", "string \"abc\"": the type and, briefly, the value, so the user can find it.
std::string describe(const toml::node& node) {
  std::ostringstream text;
  node.visit([&](const auto& n) { text << n; });
  std::string value = text.str();
  if (value.size() > 40) value = value.substr(0, 37) + "...";
  return toml_type_name(node) + " " + value;
}

// What each field needs, in words, for type errors.
struct ExpectedName {
  std::string operator()(int64_t*) const { return "an integer"; }
  std::string operator()(uint64_t*) const { return "a non-negative integer"; }
  std::string operator()(float*) const { return "a number"; }
  std::string operator()(double*) const { return "a number"; }
  std::string operator()(bool*) const { return "a boolean (true or false)"; }
  std::string operator()(std::string*) const { return "a string"; }
  std::string operator()(std::vector<std::string>*) const { return "an array of strings"; }
  std::string operator()(std::vector<int64_t>*) const { return "an array of integers"; }
  std::string operator()(const EnumRef& e) const {
    return "a string (" + quoted_names(e.names) + ")";
  }
};

// Finite numbers only: inf or nan in a learning rate or epsilon is never intended, and a double
// like 1e300 would silently become inf in a float field.
template <typename T>
T finite_number(double v, const std::string& where, const std::string& key) {
  const T out = static_cast<T>(v);
  if (!std::isfinite(out)) fail(where, ": ", key, ": must be a finite number, got ", v);
  return out;
}

struct TomlAssign {
  const toml::node& node;
  const std::string& where;
  const std::string& key;

  [[noreturn]] void wrong_type(const FieldRef& ref) const {
    fail(where, ": ", key, ": expected ", std::visit(ExpectedName{}, ref), ", found ",
         describe(node));
  }

  // Integers are never converted from floats: "steps = 1e3" or "batch_size = 8.5" is a mistake
  // worth hearing about, not something to round.
  void operator()(int64_t* out) const {
    if (!node.is_integer()) wrong_type(out);
    *out = node.as_integer()->get();
  }
  void operator()(uint64_t* out) const {
    if (!node.is_integer()) wrong_type(out);
    const int64_t v = node.as_integer()->get();
    if (v < 0) fail(where, ": ", key, ": must be non-negative, got ", v);
    *out = static_cast<uint64_t>(v);
  }
  template <typename T>
  void number(T* out) const {
    if (node.is_integer())
      *out = finite_number<T>(static_cast<double>(node.as_integer()->get()), where, key);
    else if (node.is_floating_point())
      *out = finite_number<T>(node.as_floating_point()->get(), where, key);
    else
      wrong_type(out);
  }
  void operator()(float* out) const { number(out); }
  void operator()(double* out) const { number(out); }
  void operator()(bool* out) const {
    if (!node.is_boolean()) wrong_type(out);
    *out = node.as_boolean()->get();
  }
  void operator()(std::string* out) const {
    if (!node.is_string()) wrong_type(out);
    *out = node.as_string()->get();
  }
  void operator()(std::vector<std::string>* out) const {
    // One file may be given as a plain string: data.text = "corpus.txt".
    if (node.is_string()) {
      *out = {node.as_string()->get()};
      return;
    }
    if (!node.is_array()) wrong_type(out);
    std::vector<std::string> items;
    for (const toml::node& item : *node.as_array()) {
      if (!item.is_string())
        fail(where, ": ", key, ": expected an array of strings, found an element that is ",
             describe(item));
      items.push_back(item.as_string()->get());
    }
    *out = std::move(items);
  }
  void operator()(std::vector<int64_t>* out) const {
    if (!node.is_array()) wrong_type(out);
    std::vector<int64_t> items;
    for (const toml::node& item : *node.as_array()) {
      if (!item.is_integer())
        fail(where, ": ", key, ": expected an array of integers, found an element that is ",
             describe(item));
      items.push_back(item.as_integer()->get());
    }
    *out = std::move(items);
  }
  void operator()(const EnumRef& out) const {
    if (!node.is_string()) wrong_type(out);
    out.assign(where, key, node.as_string()->get());
  }
};

// Parsing state beyond the struct itself: whether a key whose default depends on other keys
// was given explicitly.
struct Reader {
  RunConfig config;
  bool tie_embeddings_given = false;

  // Assigns `node` at dotted `key`, descending into tables that are sections.
  void assign(const std::string& key, const toml::node& node, const std::string& where) {
    if (const Field* f = find_field(key)) {
      std::visit(TomlAssign{node, where, key}, f->ref(config));
      if (key == "model.tie_embeddings") tie_embeddings_given = true;
      return;
    }
    if (is_section(key)) {
      if (!node.is_table())
        fail(where, ": '", key, "' is a section and must be a table ([", key, "]), found ",
             describe(node));
      for (const auto& [name, child] : *node.as_table())
        assign(key + "." + std::string(name.str()), child, where);
      return;
    }
    unknown_key(where, key);
  }

  void assign_root(const toml::table& root, const std::string& where) {
    for (const auto& [name, child] : root) {
      const std::string key(name.str());
      // A known section name or field is handled by assign; anything else at the top level is
      // unknown (a key with no section, or a misspelt section).
      if (is_section(key) || find_field(key)) {
        assign(key, child, where);
      } else if (child.is_table() && !child.as_table()->empty()) {
        // [trian] steps = 5: report the first full key so the hint can say 'train.steps'.
        const auto first = child.as_table()->cbegin();
        unknown_key(where, key + "." + std::string(first->first.str()));
      } else {
        unknown_key(where, key);
      }
    }
  }
};

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  const size_t e = s.find_last_not_of(" \t");
  return s.substr(b, e - b + 1);
}

// "section.key=value": the value in TOML syntax ("5", "1e-3", "[\"a\", \"b\"]", "\"x\"") or a
// bare string ("runs/x", "llama"). For string fields any unquoted value is taken literally, so
// `sample.prompt=1984` is the text "1984", not a type error.
void apply_override(Reader& reader, const std::string& text) {
  const std::string where = "--set " + text;
  const size_t eq = text.find('=');
  const std::string key = eq == std::string::npos ? "" : trim(text.substr(0, eq));
  const size_t dot = key.find('.');
  if (eq == std::string::npos || dot == std::string::npos || dot == 0 || dot + 1 == key.size())
    fail("malformed override '", text,
         "': expected section.key=value (e.g. train.steps=5 or run.dir=runs/x)");
  const std::string value = trim(text.substr(eq + 1));

  const Field* field = find_field(key);
  if (field == nullptr && !is_section(key)) unknown_key(where, key);
  const bool string_field =
      field != nullptr &&
      (std::holds_alternative<std::string*>(field->ref(reader.config)) ||
       std::holds_alternative<std::vector<int64_t>*>(field->ref(reader.config)) ||
       std::holds_alternative<EnumRef>(field->ref(reader.config)) ||
       std::holds_alternative<std::vector<std::string>*>(field->ref(reader.config)));

  toml::table parsed;
  bool is_toml = false;
  // Something that starts like an array, table or quoted string was meant as TOML; taking it as
  // a literal string would hide the typo.
  const bool meant_as_toml =
      !value.empty() && std::string("[{\"'").find(value[0]) != std::string::npos;
  const std::string doc = "v = " + value + "\n";
  if (const auto hazard = find_toml_hazard(doc)) {  // run/toml_guard.h: not valid TOML
    if (meant_as_toml) fail(where, ": the value is not valid TOML: ", hazard->description);
  } else {
    try {
      parsed = toml::parse(std::string_view(doc), std::string_view("override"));
      is_toml = parsed.size() == 1 && parsed.contains("v");
    } catch (const toml::parse_error& e) {
      if (meant_as_toml) fail(where, ": the value is not valid TOML: ", e.description());
    }
  }
  if (is_toml && !(string_field && !parsed["v"].is_string() && !parsed["v"].is_array())) {
    reader.assign(key, *parsed.get("v"), where);
  } else {
    reader.assign(key, toml::value<std::string>(value), where);
  }
}

// ---- JSON -----------------------------------------------------------------------------------

// A float goes into JSON as the double nearest its shortest decimal form (6e-4f -> 0.0006, not
// 0.0005999999848427251): readable in config.json, and it still converts back to the same float.
double float_for_json(float v) {
  char buf[32];
  auto res = std::to_chars(buf, buf + sizeof buf, v);
  double d = 0;
  std::from_chars(buf, res.ptr, d);
  return d;
}

struct ToJson {
  nlohmann::json operator()(const int64_t* v) const { return *v; }
  nlohmann::json operator()(const uint64_t* v) const { return *v; }
  nlohmann::json operator()(const float* v) const { return float_for_json(*v); }
  nlohmann::json operator()(const double* v) const { return *v; }
  nlohmann::json operator()(const bool* v) const { return *v; }
  nlohmann::json operator()(const std::string* v) const { return *v; }
  nlohmann::json operator()(const std::vector<std::string>* v) const { return *v; }
  nlohmann::json operator()(const std::vector<int64_t>* v) const { return *v; }
  nlohmann::json operator()(const EnumRef& v) const { return std::string(v.name()); }
};

struct FromJson {
  const nlohmann::json& j;
  const std::string& key;

  [[noreturn]] void wrong_type(const FieldRef& ref) const {
    fail("config (JSON): ", key, ": expected ", std::visit(ExpectedName{}, ref), ", found ",
         j.type_name(), " ", j.dump());
  }
  void operator()(int64_t* out) const {
    if (!j.is_number_integer()) wrong_type(out);
    *out = j.get<int64_t>();
  }
  void operator()(uint64_t* out) const {
    if (!j.is_number_unsigned()) wrong_type(out);
    *out = j.get<uint64_t>();
  }
  void operator()(float* out) const {
    if (!j.is_number()) wrong_type(out);
    *out = static_cast<float>(j.get<double>());
  }
  void operator()(double* out) const {
    if (!j.is_number()) wrong_type(out);
    *out = j.get<double>();
  }
  void operator()(bool* out) const {
    if (!j.is_boolean()) wrong_type(out);
    *out = j.get<bool>();
  }
  void operator()(std::string* out) const {
    if (!j.is_string()) wrong_type(out);
    *out = j.get<std::string>();
  }
  void operator()(std::vector<std::string>* out) const {
    if (!j.is_array()) wrong_type(out);
    out->clear();
    for (const auto& item : j) {
      if (!item.is_string()) wrong_type(out);
      out->push_back(item.get<std::string>());
    }
  }
  void operator()(std::vector<int64_t>* out) const {
    if (!j.is_array()) wrong_type(out);
    out->clear();
    for (const auto& item : j) {
      if (!item.is_number_integer()) wrong_type(out);
      out->push_back(item.get<int64_t>());
    }
  }
  void operator()(const EnumRef& out) const {
    if (!j.is_string()) wrong_type(out);
    out.assign("config (JSON)", key, j.get<std::string>());
  }
};

void read_json_object(RunConfig& c, const nlohmann::json& j, const std::string& prefix) {
  if (!j.is_object())
    fail("config (JSON): '", prefix.empty() ? "config" : prefix, "' must be an object, found ",
         j.type_name());
  for (const auto& [name, value] : j.items()) {
    const std::string key = prefix.empty() ? name : prefix + "." + name;
    if (const Field* f = find_field(key)) {
      std::visit(FromJson{value, key}, f->ref(c));
    } else if (is_section(key)) {
      read_json_object(c, value, key);
    } else {
      unknown_key("config (JSON)", key);
    }
  }
}

}  // namespace

RunConfig parse_config(const std::string& toml_text, const std::string& source,
                       const std::vector<std::string>& overrides) {
  return parse_config(toml_text, source, overrides, nullptr);
}

RunConfig parse_config(const std::string& toml_text, const std::string& source,
                       const std::vector<std::string>& overrides,
                       std::vector<std::string>* engine_limits) {
  if (const auto hazard = find_toml_hazard(toml_text))  // run/toml_guard.h
    fail(source, ":", hazard->line, ":", hazard->column,
         ": TOML syntax error: ", hazard->description);
  toml::table root;
  try {
    root = toml::parse(std::string_view(toml_text), std::string_view(source));
  } catch (const toml::parse_error& e) {
    fail(source, ":", e.source().begin.line, ":", e.source().begin.column,
         ": TOML syntax error: ", e.description());
  }
  Reader reader;
  reader.assign_root(root, source);
  for (const std::string& o : overrides) apply_override(reader, o);
  // STRATA_FAULT_<KEY>=value: fault injection from the environment (forwarded by the launcher).
  for (char** e = environ; *e; ++e) {
    const std::string var(*e);
    const std::string prefix = "STRATA_FAULT_";
    const size_t eq = var.find('=');
    if (var.rfind(prefix, 0) != 0 || eq == std::string::npos) continue;
    std::string key = var.substr(prefix.size(), eq - prefix.size());
    std::transform(key.begin(), key.end(), key.begin(),
                   [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
    apply_override(reader, "fault." + key + "=" + var.substr(eq + 1));
  }
  RunConfig& c = reader.config;
  // The family decides the default: GPT-2 ties the output head to the embedding, Llama does not.
  if (!reader.tie_embeddings_given) c.model.tie_embeddings = c.model.family == ModelFamily::gpt2;
  validate_config(c, source, engine_limits);
  return c;
}

namespace {
std::string read_config_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    fail("cannot read config file '", path, "': ", std::strerror(errno),
         " (start from configs/tiny.toml, e.g. copy it and edit)");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}
}  // namespace

RunConfig load_config(const std::string& path, const std::vector<std::string>& overrides) {
  return parse_config(read_config_file(path), path, overrides);
}

RunConfig load_config_for_plan(const std::string& path, const std::vector<std::string>& overrides,
                               std::vector<std::string>& engine_limits) {
  return parse_config(read_config_file(path), path, overrides, &engine_limits);
}

nlohmann::json config_to_json(const RunConfig& config) {
  RunConfig copy = config;  // the field table hands out mutable pointers
  nlohmann::json j = nlohmann::json::object();
  for (const Field& f : config_fields()) {
    nlohmann::json* node = &j;
    const std::string key = f.key;
    size_t start = 0;
    for (size_t dot; (dot = key.find('.', start)) != std::string::npos; start = dot + 1)
      node = &(*node)[key.substr(start, dot - start)];
    (*node)[key.substr(start)] = std::visit([](const auto& v) { return ToJson{}(v); }, f.ref(copy));
  }
  return j;
}

// Keys and types are checked as strictly as in TOML, but values are not re-validated or
// finalized: the JSON was written from a validated config, and a round trip must be exact.
// Keys missing from the JSON keep their defaults, so configs saved by older versions still load.
RunConfig config_from_json(const nlohmann::json& j) {
  RunConfig c;
  read_json_object(c, j, "");
  return c;
}

}  // namespace strata
