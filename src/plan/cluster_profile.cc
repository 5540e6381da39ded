// Cluster and device profiles from TOML (profiles/README.md describes the format). Every error
// names the file, the key and what to do; an unknown name lists the built-in ones.
#include "plan/cluster_profile.h"

#include <sched.h>
#include <toml++/toml.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "core/error.h"
#include "run/toml_guard.h"

namespace strata {

namespace fs = std::filesystem;

const char* collective_name(CollectiveOp op) {
  switch (op) {
    case CollectiveOp::all_reduce:
      return "all_reduce";
    case CollectiveOp::reduce_scatter:
      return "reduce_scatter";
    case CollectiveOp::all_gather:
      return "all_gather";
    case CollectiveOp::send:
      return "send";
    case CollectiveOp::all_to_all:
      return "all_to_all";
  }
  return "?";
}

double DeviceProfile::matrix_flops(Precision precision) const {
  switch (precision) {
    case Precision::bf16:
      return flops_bf16;
    case Precision::fp16:
      return flops_fp16;
    case Precision::f32:
      break;
  }
  return flops_f32;
}

double DeviceProfile::rank_cores(int64_t threads, int64_t ranks_on_node) const {
  if (!is_cpu()) return 1.0;
  const double share =
      static_cast<double>(cores) / static_cast<double>(std::max<int64_t>(1, ranks_on_node));
  const double asked = threads > 0 ? static_cast<double>(threads) : static_cast<double>(cores);
  return std::min(asked, share);
}

double DeviceProfile::rank_scale(int64_t threads, int64_t ranks_on_node) const {
  const double k = rank_cores(threads, ranks_on_node);
  double scale = k > 1.0 ? k * thread_efficiency : k;
  if (is_cpu() && available_cores > 0)
    scale =
        std::min(scale, available_cores / static_cast<double>(std::max<int64_t>(1, ranks_on_node)));
  return scale;
}

double LinkProfile::op_bandwidth(CollectiveOp op) const {
  const OpCost& c = ops[static_cast<int>(op)];
  return c.bandwidth > 0 ? c.bandwidth : bandwidth * efficiency;
}

double LinkProfile::op_latency(CollectiveOp op) const {
  const OpCost& c = ops[static_cast<int>(op)];
  return c.latency_s >= 0 ? c.latency_s : latency_s;
}

namespace {

constexpr const char* kFormatHint = "(profiles/README.md describes the format)";

// A TOML table of one file, read key by key; keys not in `allowed` are errors.
class Section {
 public:
  Section(const toml::table& t, std::string source, std::string prefix)
      : t_(t), source_(std::move(source)), prefix_(std::move(prefix)) {}

  void check_keys(std::initializer_list<const char*> allowed) const {
    for (const auto& [k, v] : t_) {
      const std::string key(k.str());
      if (std::none_of(allowed.begin(), allowed.end(), [&](const char* a) { return key == a; })) {
        std::string list;
        for (const char* a : allowed) list += cat(list.empty() ? "" : ", ", a);
        fail(source_, ": unknown key '", prefix_, key, "'; the keys here are: ", list, " ",
             kFormatHint);
      }
    }
  }
  bool has(const char* key) const { return t_.contains(key); }
  std::string where(const char* key) const { return cat(source_, ": ", prefix_, key); }

  double number(const char* key, double fallback, bool required = false) const {
    const toml::node* n = t_.get(key);
    if (!n) {
      STRATA_CHECK(!required, where(key), " is missing: add it (a number) ", kFormatHint);
      return fallback;
    }
    double v = 0;
    if (auto i = n->value_exact<int64_t>())
      v = static_cast<double>(*i);
    else if (auto d = n->value_exact<double>())
      v = *d;
    else
      fail(where(key), ": expected a number");
    STRATA_CHECK(std::isfinite(v) && v >= 0, where(key), ": must be a finite number >= 0, got ", v);
    return v;
  }
  std::string string(const char* key, const std::string& fallback, bool required = false) const {
    const toml::node* n = t_.get(key);
    if (!n) {
      STRATA_CHECK(!required, where(key), " is missing: add it (a string) ", kFormatHint);
      return fallback;
    }
    auto s = n->value_exact<std::string>();
    STRATA_CHECK(s.has_value(), where(key), ": expected a string");
    return *s;
  }
  const toml::table* table(const char* key) const {
    const toml::node* n = t_.get(key);
    if (!n) return nullptr;
    STRATA_CHECK(n->is_table(), where(key), ": expected a table ([", prefix_, key, "])");
    return n->as_table();
  }
  const std::string& source() const { return source_; }
  const std::string& prefix() const { return prefix_; }

 private:
  const toml::table& t_;
  std::string source_, prefix_;
};

toml::table parse_toml(const std::string& text, const std::string& source) {
  if (const auto hazard = find_toml_hazard(text))  // run/toml_guard.h
    fail(source, ":", hazard->line, ":", hazard->column,
         ": TOML syntax error: ", hazard->description);
  try {
    return toml::parse(std::string_view(text), std::string_view(source));
  } catch (const toml::parse_error& e) {
    fail(source, ":", e.source().begin.line, ":", e.source().begin.column,
         ": TOML syntax error: ", e.description());
  }
}

std::string read_text(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  STRATA_CHECK(in.good(), "cannot read the ", what, " file ", path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

DeviceProfile parse_device(const toml::table& t, const std::string& source,
                           const std::string& prefix) {
  const Section s(t, source, prefix);
  s.check_keys({"name", "kind", "memory_gib", "reserved_gib", "bf16_tflops", "fp16_tflops",
                "f32_tflops", "memory_bandwidth_gb_s", "memory_bandwidth_node_gb_s", "cores",
                "thread_efficiency", "available_cores", "efficiency", "sources", "source"});
  DeviceProfile d;
  d.name = s.string("name", "", true);
  const std::string kind = s.string("kind", "gpu");
  STRATA_CHECK(kind == "gpu" || kind == "cpu", s.where("kind"),
               ": must be \"gpu\" or \"cpu\", got \"", kind, "\"");
  d.kind = kind == "gpu" ? Device::cuda : Device::cpu;
  const double gib = 1024.0 * 1024.0 * 1024.0;
  const double mem = s.number("memory_gib", 0, true), reserved = s.number("reserved_gib", 0);
  STRATA_CHECK(reserved < mem, s.where("reserved_gib"), " (", reserved,
               ") must be below memory_gib (", mem, ")");
  d.memory_capacity_bytes = static_cast<int64_t>(mem * gib);
  d.memory_bytes = static_cast<int64_t>((mem - reserved) * gib);
  d.flops_bf16 = s.number("bf16_tflops", 0) * 1e12;
  d.flops_fp16 = s.number("fp16_tflops", 0) * 1e12;
  d.flops_f32 = s.number("f32_tflops", 0, true) * 1e12;
  STRATA_CHECK(d.flops_f32 > 0, s.where("f32_tflops"), " must be above 0");
  // A device without 16-bit matrix units runs 16-bit work at the f32 rate.
  if (d.flops_bf16 <= 0) d.flops_bf16 = d.flops_f32;
  if (d.flops_fp16 <= 0) d.flops_fp16 = d.flops_f32;
  d.mem_bandwidth = s.number("memory_bandwidth_gb_s", 0, true) * 1e9;
  STRATA_CHECK(d.mem_bandwidth > 0, s.where("memory_bandwidth_gb_s"), " must be above 0");
  d.cores = static_cast<int64_t>(s.number("cores", 0));
  STRATA_CHECK(d.kind == Device::cuda || d.cores > 0, s.where("cores"),
               " is required for kind = \"cpu\": the rates are per core");
  if (d.kind == Device::cuda) d.cores = 0;
  d.thread_efficiency = s.number("thread_efficiency", 1.0);
  d.available_cores = s.number("available_cores", 0);
  d.mem_bandwidth_node = s.number("memory_bandwidth_node_gb_s", 0) * 1e9;
  if (const toml::table* e = s.table("efficiency")) {
    const Section es(*e, source, prefix + "efficiency.");
    es.check_keys({"gemm", "attention", "memory", "naive_attention", "attention_bf16",
                   "cross_entropy", "vocab_parallel_ce"});
    d.gemm_efficiency = es.number("gemm", d.gemm_efficiency);
    d.attention_efficiency = es.number("attention", d.attention_efficiency);
    d.memory_efficiency = es.number("memory", d.memory_efficiency);
    d.naive_attention_efficiency = es.number("naive_attention", 0);
    d.attention_bf16_efficiency = es.number("attention_bf16", 0);
    d.cross_entropy_efficiency = es.number("cross_entropy", 0);
    d.vocab_parallel_ce_efficiency = es.number("vocab_parallel_ce", 0);
    for (const char* k : {"gemm", "attention", "memory", "naive_attention", "attention_bf16",
                          "cross_entropy", "vocab_parallel_ce"})
      STRATA_CHECK(es.number(k, 0.5) <= 1.0, es.where(k),
                   ": an efficiency is a fraction in (0, 1]");
  }
  d.source = s.string("source", source);
  return d;
}

LinkProfile parse_link(const toml::table& t, const std::string& source, const std::string& prefix) {
  const Section s(t, source, prefix);
  s.check_keys({"kind", "bandwidth_gb_s", "latency_us", "efficiency", "overlap", "all_reduce",
                "reduce_scatter", "all_gather", "send", "all_to_all"});
  LinkProfile l;
  l.kind = s.string("kind", "", true);
  l.bandwidth = s.number("bandwidth_gb_s", 0, true) * 1e9;
  STRATA_CHECK(l.bandwidth > 0, s.where("bandwidth_gb_s"), " must be above 0");
  l.latency_s = s.number("latency_us", 0, true) * 1e-6;
  l.efficiency = s.number("efficiency", 1.0);
  l.overlap = s.number("overlap", 1.0);
  STRATA_CHECK(l.efficiency > 0 && l.efficiency <= 1, s.where("efficiency"),
               ": a fraction in (0, 1]");
  STRATA_CHECK(l.overlap <= 1, s.where("overlap"), ": a fraction in [0, 1]");
  for (int op = 0; op < kNumCollectiveOps; ++op) {
    const char* name = collective_name(static_cast<CollectiveOp>(op));
    const toml::table* o = s.table(name);
    if (!o) continue;
    const Section os(*o, source, prefix + name + ".");
    os.check_keys({"bandwidth_gb_s", "latency_us"});
    l.ops[op].bandwidth = os.number("bandwidth_gb_s", 0) * 1e9;
    l.ops[op].latency_s = os.has("latency_us") ? os.number("latency_us", 0) * 1e-6 : -1.0;
  }
  return l;
}

const EmbeddedFile* find_embedded(const std::string& rel) {
  for (const EmbeddedFile& f : embedded_profile_files())
    if (rel == f.path) return &f;
  return nullptr;
}

std::vector<std::string> names_under(const std::string& dir) {
  std::vector<std::string> out;
  const std::string prefix = dir + "/", suffix = ".toml";
  for (const EmbeddedFile& f : embedded_profile_files()) {
    const std::string p = f.path;
    if (p.rfind(prefix, 0) == 0 && p.size() > prefix.size() + suffix.size())
      out.push_back(p.substr(prefix.size(), p.size() - prefix.size() - suffix.size()));
  }
  return out;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += cat(s.empty() ? "" : ", ", x);
  return s;
}

bool looks_like_path(const std::string& s) {
  return s.find('/') != std::string::npos ||
         (s.size() > 5 && s.compare(s.size() - 5, 5, ".toml") == 0);
}

DeviceProfile device_from_file(const std::string& path) {
  const toml::table t = parse_toml(read_text(path, "device profile"), path);
  return parse_device(t, path, "");
}

// name (the file name) and aliases of every built-in cluster.
struct BuiltinCluster {
  std::string name;
  std::vector<std::string> aliases;
};

const std::vector<BuiltinCluster>& builtin_clusters() {
  static const std::vector<BuiltinCluster> all = [] {
    std::vector<BuiltinCluster> v;
    for (const std::string& n : names_under("clusters")) {
      const std::string rel = "clusters/" + n + ".toml";
      const toml::table t = parse_toml(find_embedded(rel)->text, "builtin:" + rel);
      BuiltinCluster b{n, {}};
      if (const toml::array* a = t["aliases"].as_array())
        for (const toml::node& x : *a)
          if (auto s = x.value_exact<std::string>()) b.aliases.push_back(*s);
      v.push_back(std::move(b));
    }
    return v;
  }();
  return all;
}

// The built-in cluster a name or alias means; empty when none.
std::string resolve_builtin(const std::string& name) {
  for (const BuiltinCluster& b : builtin_clusters()) {
    if (b.name == name) return b.name;
    if (std::find(b.aliases.begin(), b.aliases.end(), name) != b.aliases.end()) return b.name;
  }
  return "";
}

[[noreturn]] void unknown_cluster(const std::string& name) {
  std::vector<std::string> aliases;
  for (const BuiltinCluster& b : builtin_clusters())
    for (const std::string& a : b.aliases) aliases.push_back(a);
  fail("unknown cluster profile '", name, "': the built-in profiles are ",
       join(builtin_cluster_profiles()), " (aliases ", join(aliases),
       "; append xN for N GPUs, e.g. a100x64); or give the path of a TOML file, such as the one "
       "`strata plan --calibrate` writes ",
       kFormatHint);
}

// "cpu-local": this machine's cores and memory with the file's per-core rates.
void localize(ClusterProfile& c) {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  int64_t cores = ::sched_getaffinity(0, sizeof mask, &mask) == 0
                      ? CPU_COUNT(&mask)
                      : static_cast<int64_t>(std::thread::hardware_concurrency());
  cores = std::max<int64_t>(1, cores);
  int64_t mem_kib = 0;
  std::ifstream in("/proc/meminfo");
  std::string key;
  while (in >> key) {
    if (key == "MemTotal:") {
      in >> mem_kib;
      break;
    }
    in.ignore(1 << 10, '\n');
  }
  DeviceProfile& d = c.device;
  // The node's memory-bound rate was measured on the file's cores; scale it (a guess beyond).
  d.mem_bandwidth_node *=
      static_cast<double>(cores) / static_cast<double>(std::max<int64_t>(1, d.cores));
  d.cores = cores;
  c.gpus_per_node = cores;
  if (mem_kib > 0) {
    d.memory_capacity_bytes = mem_kib * 1024 / cores;
    d.memory_bytes = d.memory_capacity_bytes;
  }
}

}  // namespace

ClusterProfile parse_cluster_profile(const std::string& toml_text, const std::string& source) {
  const toml::table root = parse_toml(toml_text, source);
  const Section s(root, source, "");
  s.check_keys({"name", "aliases", "device", "gpus_per_node", "max_nodes", "intra", "inter",
                "sources", "source"});
  ClusterProfile c;
  c.name = s.string("name", "", true);
  c.path = source;
  c.source = s.string("source", source);
  const toml::node* dev = root.get("device");
  STRATA_CHECK(dev != nullptr, s.where("device"), " is missing: name a device (one of ",
               join(builtin_device_profiles()), "), a device file, or write a [device] table ",
               kFormatHint);
  if (const toml::table* t = dev->as_table()) {
    c.device = parse_device(*t, source, "device.");
  } else if (auto name = dev->value_exact<std::string>()) {
    if (find_embedded("devices/" + *name + ".toml")) {
      c.device = load_device_profile(*name);
    } else {
      // A file: as written, or beside the cluster file.
      fs::path p(*name);
      if (p.is_relative() && !fs::exists(p) && source.rfind("builtin:", 0) != 0)
        p = fs::path(source).parent_path() / p;
      STRATA_CHECK(fs::exists(p), s.where("device"), ": unknown device '", *name,
                   "': the built-in devices are ", join(builtin_device_profiles()),
                   "; or give the path of a device TOML file");
      c.device = device_from_file(p.string());
    }
  } else {
    fail(s.where("device"), ": expected a device name (string) or a [device] table");
  }
  c.gpus_per_node = static_cast<int64_t>(s.number("gpus_per_node", 0, true));
  STRATA_CHECK(c.gpus_per_node >= 1, s.where("gpus_per_node"), " must be at least 1");
  c.max_nodes = static_cast<int64_t>(s.number("max_nodes", 0));
  const toml::table* intra = s.table("intra");
  STRATA_CHECK(intra != nullptr, source, ": the [intra] table (the link inside a node) is missing ",
               kFormatHint);
  c.intra = parse_link(*intra, source, "intra.");
  if (const toml::table* inter = s.table("inter")) {
    c.inter = parse_link(*inter, source, "inter.");
  } else {
    STRATA_CHECK(c.max_nodes == 1, source,
                 ": the [inter] table (the link between nodes) is missing; add it, or set "
                 "max_nodes = 1 for a single machine");
    c.inter = c.intra;
  }
  return c;
}

DeviceProfile load_device_profile(const std::string& name_or_path) {
  if (const EmbeddedFile* f = find_embedded("devices/" + name_or_path + ".toml")) {
    const std::string src = cat("builtin:", f->path);
    return parse_device(parse_toml(f->text, src), src, "");
  }
  STRATA_CHECK(looks_like_path(name_or_path) && fs::exists(name_or_path), "unknown device '",
               name_or_path, "': the built-in devices are ", join(builtin_device_profiles()),
               "; or give the path of a device TOML file ", kFormatHint);
  return device_from_file(name_or_path);
}

ClusterProfile load_cluster_profile(const std::string& name_or_path) {
  STRATA_CHECK(!name_or_path.empty(), "--cluster: empty profile name");
  if (looks_like_path(name_or_path) ||
      (fs::exists(name_or_path) && resolve_builtin(name_or_path).empty())) {
    STRATA_CHECK(fs::exists(name_or_path), "cluster profile file ", name_or_path,
                 " does not exist; the built-in profiles are ", join(builtin_cluster_profiles()));
    return parse_cluster_profile(read_text(name_or_path, "cluster profile"), name_or_path);
  }
  std::string name = resolve_builtin(name_or_path);
  int64_t gpus = 0;
  if (name.empty()) {
    // NAMExN: a built-in cluster limited to N GPUs ("a100x64").
    const size_t x = name_or_path.find_last_of('x');
    if (x == std::string::npos || x == 0 || x + 1 == name_or_path.size() ||
        !std::all_of(name_or_path.begin() + static_cast<std::ptrdiff_t>(x) + 1, name_or_path.end(),
                     [](unsigned char ch) { return std::isdigit(ch) != 0; }))
      unknown_cluster(name_or_path);
    name = resolve_builtin(name_or_path.substr(0, x));
    if (name.empty()) unknown_cluster(name_or_path);
    gpus = std::stoll(name_or_path.substr(x + 1));
  }
  const std::string rel = "clusters/" + name + ".toml";
  ClusterProfile c = parse_cluster_profile(find_embedded(rel)->text, "builtin:" + rel);
  if (name == "cpu-local") localize(c);
  if (gpus > 0) {
    STRATA_CHECK(gpus % c.gpus_per_node == 0 || gpus < c.gpus_per_node, "--cluster ", name_or_path,
                 ": ", gpus, " GPUs is not a whole number of ", c.gpus_per_node, "-GPU nodes of ",
                 name);
    if (gpus < c.gpus_per_node) c.gpus_per_node = gpus;
    c.max_nodes = std::max<int64_t>(1, gpus / c.gpus_per_node);
    c.name = name_or_path;
  }
  return c;
}

std::vector<std::string> builtin_cluster_profiles() {
  return names_under("clusters");
}
std::vector<std::string> builtin_device_profiles() {
  return names_under("devices");
}

std::vector<std::string> builtin_cluster_aliases() {
  std::vector<std::string> out;
  for (const BuiltinCluster& b : builtin_clusters())
    for (const std::string& a : b.aliases) out.push_back(a + " -> " + b.name);
  return out;
}

}  // namespace strata
