// RunConfig from TOML, `--set` overrides and JSON. Every key lives in one table (kFields below):
// the TOML reader, the override path, the JSON writer and reader and the "did you mean" hints
// all walk it, so a new field is one line there and cannot be forgotten by any of them.
#include "train/config.h"

#include <toml++/toml.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>
#include <variant>

#include "core/error.h"
#include "parallel/pipeline_schedule.h"

namespace strata {

namespace {

using FieldRef = std::variant<int64_t*, uint64_t*, float*, double*, bool*, std::string*,
                              std::vector<std::string>*, std::vector<int64_t>*, ModelFamily*>;

struct Field {
  const char* key;  // "section.name", as written in TOML and JSON
  FieldRef (*ref)(RunConfig&);
};

#define STRATA_FIELD(section, name)                                               \
  Field {                                                                         \
#section "." #name, [](RunConfig & c) -> FieldRef { return &c.section.name; } \
  }

const Field kFields[] = {
    STRATA_FIELD(model, family),
    STRATA_FIELD(model, n_layer),
    STRATA_FIELD(model, n_head),
    STRATA_FIELD(model, n_kv_head),
    STRATA_FIELD(model, d_model),
    STRATA_FIELD(model, d_ff),
    STRATA_FIELD(model, vocab_size),
    STRATA_FIELD(model, max_seq_len),
    STRATA_FIELD(model, norm_eps),
    STRATA_FIELD(model, rope_theta),
    STRATA_FIELD(model, tie_embeddings),
    STRATA_FIELD(model, init_std),
    STRATA_FIELD(model, attention),
    STRATA_FIELD(train, steps),
    STRATA_FIELD(train, seed),
    STRATA_FIELD(train, batch_size),
    STRATA_FIELD(train, seq_len),
    STRATA_FIELD(train, grad_accum),
    STRATA_FIELD(train, eval_every),
    STRATA_FIELD(train, eval_batches),
    STRATA_FIELD(train, log_every),
    STRATA_FIELD(train, checkpoint_every),
    STRATA_FIELD(train, keep_last),
    STRATA_FIELD(train, precision),
    STRATA_FIELD(train, recompute),
    STRATA_FIELD(train, recompute_layers),
    STRATA_FIELD(optim, lr),
    STRATA_FIELD(optim, min_lr),
    STRATA_FIELD(optim, warmup_steps),
    STRATA_FIELD(optim, decay),
    STRATA_FIELD(optim, beta1),
    STRATA_FIELD(optim, beta2),
    STRATA_FIELD(optim, eps),
    STRATA_FIELD(optim, weight_decay),
    STRATA_FIELD(optim, grad_clip),
    STRATA_FIELD(optim, offload),
    STRATA_FIELD(optim, offload_dir),
    STRATA_FIELD(optim, offload_chunk_mb),
    STRATA_FIELD(data, source),
    STRATA_FIELD(data, text),
    STRATA_FIELD(data, dir),
    STRATA_FIELD(data, document_separator),
    STRATA_FIELD(data, val_fraction),
    STRATA_FIELD(data.filters, min_doc_chars),
    STRATA_FIELD(data.filters, max_doc_chars),
    STRATA_FIELD(data.filters, max_repeat_fraction),
    STRATA_FIELD(data.filters, max_nonprint_fraction),
    STRATA_FIELD(run, dir),
    STRATA_FIELD(run, resume),
    STRATA_FIELD(system, threads),
    STRATA_FIELD(parallel, tp),
    STRATA_FIELD(parallel, pp),
    STRATA_FIELD(parallel, dp),
    STRATA_FIELD(parallel, zero),
    STRATA_FIELD(parallel, sp),
    STRATA_FIELD(parallel, vpp),
    STRATA_FIELD(parallel, schedule),
    STRATA_FIELD(parallel, micro_batches),
    STRATA_FIELD(parallel, stage_layers),
    STRATA_FIELD(parallel, bucket_mb),
    STRATA_FIELD(parallel, overlap),
    STRATA_FIELD(parallel, comm_timeout_s),
    STRATA_FIELD(parallel, grad_reduce_dtype),
    STRATA_FIELD(system, memory_limit_mb),
    STRATA_FIELD(fp16, loss_scale),
    STRATA_FIELD(fp16, initial_scale_power),
    STRATA_FIELD(fp16, loss_scale_window),
    STRATA_FIELD(fp16, hysteresis),
    STRATA_FIELD(fp16, min_loss_scale),
    STRATA_FIELD(fp16, consecutive_hysteresis),
    STRATA_FIELD(sample, prompt),
    STRATA_FIELD(sample, max_new_tokens),
    STRATA_FIELD(sample, temperature),
    STRATA_FIELD(sample, top_k),
};

#undef STRATA_FIELD

const char* const kSections[] = {"model", "train",  "optim",    "data",   "data.filters",
                                 "run",   "system", "parallel", "sample", "fp16"};

const Field* find_field(const std::string& key) {
  for (const Field& f : kFields)
    if (key == f.key) return &f;
  return nullptr;
}

bool is_section(const std::string& key) {
  return std::find(std::begin(kSections), std::end(kSections), key) != std::end(kSections);
}

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
  for (const Field& f : kFields) {
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
  std::string operator()(ModelFamily*) const { return "a string (\"gpt2\" or \"llama\")"; }
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
  void operator()(ModelFamily* out) const {
    if (!node.is_string()) wrong_type(out);
    try {
      *out = family_from_name(node.as_string()->get());
    } catch (const Error& e) {
      fail(where, ": ", e.what());  // family_from_name already names model.family
    }
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
       std::holds_alternative<ModelFamily*>(field->ref(reader.config)) ||
       std::holds_alternative<std::vector<std::string>*>(field->ref(reader.config)));

  toml::table parsed;
  bool is_toml = false;
  try {
    const std::string doc = "v = " + value + "\n";
    parsed = toml::parse(std::string_view(doc), std::string_view("override"));
    is_toml = parsed.size() == 1 && parsed.contains("v");
  } catch (const toml::parse_error& e) {
    // Something that starts like an array, table or quoted string was meant as TOML; taking it
    // as a literal string would hide the typo.
    if (!value.empty() && std::string("[{\"'").find(value[0]) != std::string::npos)
      fail(where, ": the value is not valid TOML: ", e.description());
  }
  if (is_toml && !(string_field && !parsed["v"].is_string() && !parsed["v"].is_array())) {
    reader.assign(key, *parsed.get("v"), where);
  } else {
    reader.assign(key, toml::value<std::string>(value), where);
  }
}

// ---- consistency checks ---------------------------------------------------------------------

template <typename... Args>
void check(bool ok, const std::string& where, const Args&... args) {
  if (!ok) fail(where, ": ", args...);
}

void validate(RunConfig& c, const std::string& where) {
  try {
    c.model.finalize();
  } catch (const Error& e) {
    fail(where, ": ", e.what());  // finalize names the model.* key
  }
  const TrainConfig& t = c.train;
  check(t.steps >= 1, where, "train.steps: must be at least 1, got ", t.steps);
  check(t.batch_size >= 1, where, "train.batch_size: must be at least 1, got ", t.batch_size);
  check(t.seq_len >= 1, where, "train.seq_len: must be at least 1, got ", t.seq_len);
  check(t.seq_len <= c.model.max_seq_len, where, "train.seq_len: ", t.seq_len,
        " exceeds model.max_seq_len = ", c.model.max_seq_len,
        "; raise model.max_seq_len or lower train.seq_len");
  check(t.grad_accum >= 1, where, "train.grad_accum: must be at least 1, got ", t.grad_accum);
  check(t.eval_every >= 0, where, "train.eval_every: must be 0 (only at the end) or more, got ",
        t.eval_every);
  check(t.eval_batches >= 1, where, "train.eval_batches: must be at least 1, got ", t.eval_batches);
  check(t.log_every >= 1, where, "train.log_every: must be at least 1, got ", t.log_every);
  check(t.checkpoint_every >= 0, where,
        "train.checkpoint_every: must be 0 (only at the end) or more, got ", t.checkpoint_every);
  // At least one, or the final checkpoint would be deleted as soon as it was written.
  check(t.keep_last >= 1, where, "train.keep_last: must be at least 1, got ", t.keep_last);
  check(t.precision == "f32" || t.precision == "bf16" || t.precision == "fp16", where,
        "train.precision: unknown precision '", t.precision,
        "' (expected \"f32\", \"bf16\" or \"fp16\")");
  check(t.precision == "f32" || c.parallel.zero < 3, where, "train.precision = \"", t.precision,
        "\" with parallel.zero = 3 is not supported yet (the 16-bit working weights are not "
        "sharded); use parallel.zero <= 2 or train.precision = \"f32\"");
  check(c.optim.offload == "none" || c.optim.offload == "nvme", where, "optim.offload: '",
        c.optim.offload, "' (expected \"none\" or \"nvme\")");
  check(c.optim.offload_chunk_mb > 0, where, "optim.offload_chunk_mb: must be positive, got ",
        c.optim.offload_chunk_mb);
  const LossScalerConfig& ls = c.fp16;
  check(ls.loss_scale >= 0, where, "fp16.loss_scale: must be 0 (dynamic) or positive, got ",
        ls.loss_scale);
  check(ls.initial_scale_power >= 0 && ls.initial_scale_power <= 40, where,
        "fp16.initial_scale_power: must be in [0, 40], got ", ls.initial_scale_power);
  check(ls.loss_scale_window >= 1, where, "fp16.loss_scale_window: must be at least 1, got ",
        ls.loss_scale_window);
  check(ls.hysteresis >= 1, where, "fp16.hysteresis: must be at least 1, got ", ls.hysteresis);
  check(ls.min_loss_scale > 0, where, "fp16.min_loss_scale: must be positive, got ",
        ls.min_loss_scale);

  const OptimConfig& o = c.optim;
  check(o.lr > 0, where, "optim.lr: must be positive, got ", o.lr);
  check(o.min_lr >= 0 && o.min_lr <= o.lr, where, "optim.min_lr: must be in [0, optim.lr = ", o.lr,
        "], got ", o.min_lr);
  check(o.warmup_steps >= 0, where, "optim.warmup_steps: must be 0 or more, got ", o.warmup_steps);
  check(o.decay == "cosine" || o.decay == "linear" || o.decay == "constant", where,
        "optim.decay: unknown schedule '", o.decay,
        "' (expected \"cosine\", \"linear\" or \"constant\")");
  check(o.beta1 >= 0 && o.beta1 < 1, where, "optim.beta1: must be in [0, 1), got ", o.beta1);
  check(o.beta2 >= 0 && o.beta2 < 1, where, "optim.beta2: must be in [0, 1), got ", o.beta2);
  check(o.eps > 0, where, "optim.eps: must be positive, got ", o.eps);
  check(o.weight_decay >= 0, where, "optim.weight_decay: must be 0 or more, got ", o.weight_decay);
  check(o.grad_clip >= 0, where, "optim.grad_clip: must be 0 (off) or more, got ", o.grad_clip);

  const DataConfig& d = c.data;
  check(d.source == "synthetic" || d.source == "text" || d.source == "shards", where,
        "data.source: unknown source '", d.source,
        "' (expected \"synthetic\", \"text\" or \"shards\")");
  check(d.source != "text" || !d.text.empty(), where,
        "data.text: data.source = \"text\" needs at least one text file, e.g. "
        "data.text = [\"corpus.txt\"]");
  for (const std::string& file : d.text)
    check(!file.empty(), where, "data.text: file names must not be empty");
  check(!d.dir.empty(), where, "data.dir: must not be empty");
  check(!d.document_separator.empty(), where, "data.document_separator: must not be empty");
  check(d.val_fraction > 0 && d.val_fraction <= 0.5, where,
        "data.val_fraction: must be in (0, 0.5], got ", d.val_fraction);
  const FilterConfig& f = d.filters;
  check(f.min_doc_chars >= 0, where, "data.filters.min_doc_chars: must be 0 or more, got ",
        f.min_doc_chars);
  check(f.max_doc_chars >= f.min_doc_chars, where, "data.filters.max_doc_chars: ", f.max_doc_chars,
        " is less than data.filters.min_doc_chars = ", f.min_doc_chars);
  check(f.max_repeat_fraction >= 0 && f.max_repeat_fraction <= 1, where,
        "data.filters.max_repeat_fraction: must be in [0, 1], got ", f.max_repeat_fraction);
  check(f.max_nonprint_fraction >= 0 && f.max_nonprint_fraction <= 1, where,
        "data.filters.max_nonprint_fraction: must be in [0, 1], got ", f.max_nonprint_fraction);

  check(!c.run.dir.empty(), where, "run.dir: must not be empty");
  check(!c.run.resume.empty(), where,
        "run.resume: must be \"auto\", \"none\" or a checkpoint path, got an empty string");
  check(c.system.threads >= 0, where, "system.threads: must be 0 (all cores) or more, got ",
        c.system.threads);
  check(c.system.memory_limit_mb >= 0, where,
        "system.memory_limit_mb: must be 0 (no limit) or more, got ", c.system.memory_limit_mb);
  const ParallelConfig& p = c.parallel;
  check(p.tp >= 1, where, "parallel.tp: must be at least 1, got ", p.tp);
  check(p.pp >= 1, where, "parallel.pp: must be at least 1, got ", p.pp);
  check(p.dp >= 0, where, "parallel.dp: must be 0 (derived from the world size) or more, got ",
        p.dp);
  check(p.zero >= 0 && p.zero <= 3, where, "parallel.zero: ZeRO stage must be 0, 1, 2 or 3, got ",
        p.zero);
  check(c.train.recompute == "none" || c.train.recompute == "selective" ||
            c.train.recompute == "full",
        where, "train.recompute: unknown mode '", c.train.recompute,
        "' (expected \"none\", \"selective\" or \"full\")");
  check(c.train.recompute_layers >= 0, where,
        "train.recompute_layers: must be 0 (every layer) or more, got ", c.train.recompute_layers);
  check(p.grad_reduce_dtype == "f32" || p.grad_reduce_dtype == "bf16", where,
        "parallel.grad_reduce_dtype: '", p.grad_reduce_dtype, "' (expected \"f32\" or \"bf16\")");
  check(p.vpp >= 1, where, "parallel.vpp: must be at least 1, got ", p.vpp);
  check(p.vpp == 1 || p.pp > 1, where, "parallel.vpp = ", p.vpp,
        " needs parallel.pp > 1 (virtual stages interleave chunks across pipeline ranks)");
  check(p.micro_batches >= 0, where,
        "parallel.micro_batches: must be 0 (train.grad_accum) or more, got ", p.micro_batches);
  check(p.micro_batches == 0 || c.train.grad_accum == 1 || p.micro_batches == c.train.grad_accum,
        where, "parallel.micro_batches = ", p.micro_batches,
        " and train.grad_accum = ", c.train.grad_accum,
        " both set the micro-batches of a step; set one of them (they mean the same thing)");
  check(!p.sp || p.tp > 1, where,
        "parallel.sp = true needs parallel.tp > 1 (sequence parallelism shards what tensor "
        "parallelism replicates)");
  try {
    validate_pipeline_config(
        parse_schedule_kind(p.schedule), static_cast<int>(p.pp),
        static_cast<int>(p.micro_batches > 0 ? p.micro_batches : c.train.grad_accum),
        static_cast<int>(p.vpp));
  } catch (const Error& e) {
    fail(where, ": ", e.what());
  }
  check(p.pp == 1 || p.zero <= 1, where, "parallel.zero = ", p.zero, " with parallel.pp = ", p.pp,
        ": ZeRO-2/3 shard gradients and parameters per micro-batch, which pipeline parallelism "
        "keeps across micro-batches in flight (DeepSpeed has the same rule); use parallel.zero = "
        "0 or 1 with pipelines");
  check(p.bucket_mb > 0, where, "parallel.bucket_mb: must be positive, got ", p.bucket_mb);
  check(p.comm_timeout_s > 0, where, "parallel.comm_timeout_s: must be positive, got ",
        p.comm_timeout_s);
  check(c.sample.max_new_tokens >= 0, where, "sample.max_new_tokens: must be 0 or more, got ",
        c.sample.max_new_tokens);
  check(c.sample.temperature >= 0, where, "sample.temperature: must be 0 (greedy) or more, got ",
        c.sample.temperature);
  check(c.sample.top_k >= 0, where, "sample.top_k: must be 0 (off) or more, got ", c.sample.top_k);
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
  nlohmann::json operator()(const ModelFamily* v) const { return family_name(*v); }
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
  void operator()(ModelFamily* out) const {
    if (!j.is_string()) wrong_type(out);
    *out = family_from_name(j.get<std::string>());
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
  RunConfig& c = reader.config;
  // The family decides the default: GPT-2 ties the output head to the embedding, Llama does not.
  if (!reader.tie_embeddings_given) c.model.tie_embeddings = c.model.family == ModelFamily::gpt2;
  validate(c, source);
  return c;
}

RunConfig load_config(const std::string& path, const std::vector<std::string>& overrides) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    fail("cannot read config file '", path, "': ", std::strerror(errno),
         " (start from configs/tiny.toml, e.g. copy it and edit)");
  std::ostringstream text;
  text << in.rdbuf();
  return parse_config(text.str(), path, overrides);
}

nlohmann::json config_to_json(const RunConfig& config) {
  RunConfig copy = config;  // the field table hands out mutable pointers
  nlohmann::json j = nlohmann::json::object();
  for (const Field& f : kFields) {
    nlohmann::json* node = &j;
    const std::string key = f.key;
    size_t start = 0;
    for (size_t dot; (dot = key.find('.', start)) != std::string::npos; start = dot + 1)
      node = &(*node)[key.substr(start, dot - start)];
    (*node)[key.substr(start)] = std::visit([](const auto* v) { return ToJson{}(v); }, f.ref(copy));
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
