// The registry's reports: diff of two versions, and the text forms of list, show and diff.
#include <algorithm>
#include <cstdio>
#include <set>
#include <sstream>

#include "core/error.h"
#include "track/registry.h"

namespace strata::registry {

namespace {

void flatten_into(const nlohmann::json& j, const std::string& prefix, nlohmann::json& out) {
  if (j.is_object() && !j.empty()) {
    for (const auto& [k, v] : j.items())
      flatten_into(v, prefix.empty() ? k : prefix + "." + k, out);
  } else {
    out[prefix] = j;
  }
}

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

std::string short_value(const nlohmann::json& j) {
  if (j.is_null() || (j.is_string() && j.get<std::string>().empty())) return "(none)";
  if (j.is_number_float()) return number(j.get<double>());
  std::string s = j.is_string() ? j.get<std::string>() : j.dump();
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

// "  key = value" per flattened key.
std::string key_lines(const nlohmann::json& j) {
  const nlohmann::json flat = flatten(j);
  std::string out;
  for (const auto& [k, val] : flat.items()) out += cat("  ", k, " = ", short_value(val), "\n");
  return out;
}

std::string parent_ref(const Version& v) {
  return v.parent_version > 0 ? cat(v.parent_name, ":v", v.parent_version) : "";
}

// True when `descendant` reaches `ancestor` through recorded parents.
bool descends(Registry& registry, const Version& descendant, const Version& ancestor) {
  Version v = descendant;
  for (int hops = 0; hops < 1000 && v.parent_version > 0; ++hops) {
    if (v.parent_name == ancestor.name && v.parent_version == ancestor.version) return true;
    try {
      v = registry.get(parent_ref(v));
    } catch (const std::exception&) {
      return false;
    }
  }
  return false;
}

// Keys of a and b (flattened) whose values differ.
nlohmann::json changed(const nlohmann::json& a, const nlohmann::json& b) {
  const nlohmann::json fa = flatten(a), fb = flatten(b);
  std::set<std::string> keys;
  for (const auto& [k, v] : fa.items()) keys.insert(k);
  for (const auto& [k, v] : fb.items()) keys.insert(k);
  nlohmann::json out = nlohmann::json::array();
  for (const std::string& k : keys) {
    const nlohmann::json va = fa.contains(k) ? fa[k] : nlohmann::json();
    const nlohmann::json vb = fb.contains(k) ? fb[k] : nlohmann::json();
    if (va != vb) out.push_back({{"key", k}, {"a", va}, {"b", vb}});
  }
  return out;
}

}  // namespace

nlohmann::json flatten(const nlohmann::json& j) {
  nlohmann::json out = nlohmann::json::object();
  flatten_into(j, "", out);
  return out;
}

nlohmann::json diff_versions(Registry& registry, const Version& a, const Version& b) {
  nlohmann::json metrics = nlohmann::json::array();
  for (nlohmann::json d : changed(a.metrics, b.metrics)) {
    if (d["a"].is_number() && d["b"].is_number())
      d["delta"] = d["b"].get<double>() - d["a"].get<double>();
    metrics.push_back(d);
  }
  std::string relation = "unrelated";
  if (a.content_hash == b.content_hash)
    relation = "same content";
  else if (descends(registry, b, a))
    relation = cat(b.ref(), " descends from ", a.ref());
  else if (descends(registry, a, b))
    relation = cat(a.ref(), " descends from ", b.ref());
  const auto tok = [](const Version& v) {
    return v.lineage.value("tokenizer_xxh64", nlohmann::json());
  };
  nlohmann::json lineage = {
      {"relation", relation},
      {"content_hash", {{"a", a.content_hash}, {"b", b.content_hash}}},
      {"step", {{"a", a.step}, {"b", b.step}}},
      {"parent", {{"a", parent_ref(a)}, {"b", parent_ref(b)}}},
      {"tokenizer", tok(a) == tok(b) ? "same" : "different"},
      {"data", changed(a.lineage.value("data", nlohmann::json::object()),
                       b.lineage.value("data", nlohmann::json::object()))},
      {"data_position", changed(a.lineage.value("data_position", nlohmann::json::object()),
                                b.lineage.value("data_position", nlohmann::json::object()))}};
  return {{"a", a.ref()},
          {"b", b.ref()},
          {"config", changed(a.config, b.config)},
          {"metrics", metrics},
          {"lineage", lineage}};
}

std::string format_list(const std::vector<Version>& versions) {
  if (versions.empty()) return "the registry is empty (strata registry push RUN_DIR --name NAME)\n";
  std::ostringstream out;
  char line[256];
  std::snprintf(line, sizeof line, "%-24s %-5s %-20s %-12s %8s %10s  %s\n", "NAME", "VER",
                "CREATED (UTC)", "HASH", "STEP", "VAL_LOSS", "PARENT");
  out << line;
  for (const Version& v : versions) {
    std::snprintf(line, sizeof line, "%-24s %-5s %-20s %-12s %8lld %10s  %s\n", v.name.c_str(),
                  cat("v", v.version).c_str(), v.created_at.c_str(),
                  v.content_hash.substr(0, 12).c_str(), static_cast<long long>(v.step),
                  v.val_loss ? number(*v.val_loss).c_str() : "-", parent_ref(v).c_str());
    out << line;
  }
  return out.str();
}

std::string format_show(const Version& v) {
  std::ostringstream out;
  out << v.ref() << "\n";
  out << "  created       " << v.created_at << " (UTC)\n";
  out << "  content hash  " << v.content_hash << "\n";
  out << "  step          " << v.step << "\n";
  out << "  val_loss      " << (v.val_loss ? number(*v.val_loss) : "(none)") << "\n";
  out << "  parent        "
      << (v.parent_version > 0 ? cat(parent_ref(v), " (", v.parent_reason, ")") : "(none)") << "\n";
  out << "  pushed from   " << v.source << "\n";
  out << "  stored at     " << v.blob << "\n";
  int64_t bytes = 0, files = 0;
  for (const nlohmann::json& f : v.manifest.value("files", nlohmann::json::array())) {
    bytes += f.value("bytes", int64_t{0});
    ++files;
  }
  out << "  files         " << files << " (" << bytes << " bytes)\n";
  out << "lineage\n";
  out << key_lines(v.lineage);
  out << "final metrics\n";
  out << key_lines(v.metrics);
  out << "evaluations\n";
  if (v.evals.empty()) out << "  (none)\n";
  for (const Eval& e : v.evals) {
    out << "  " << e.created_at << "  exit " << e.exit_status << "  " << number(e.seconds) << " s  "
        << e.command << "\n";
    std::istringstream lines(e.output);
    for (std::string l; std::getline(lines, l);) out << "    | " << l << "\n";
  }
  out << "config\n";
  out << key_lines(v.config);
  return out.str();
}

std::string format_diff(const nlohmann::json& d) {
  std::ostringstream out;
  out << "diff " << d["a"].get<std::string>() << " -> " << d["b"].get<std::string>() << "\n";
  const nlohmann::json& l = d["lineage"];
  out << "lineage\n  relation      " << l["relation"].get<std::string>() << "\n";
  out << "  content hash  " << l["content_hash"]["a"].get<std::string>().substr(0, 12) << " -> "
      << l["content_hash"]["b"].get<std::string>().substr(0, 12) << "\n";
  out << "  step          " << l["step"]["a"] << " -> " << l["step"]["b"] << "\n";
  out << "  parent        " << short_value(l["parent"]["a"]) << " -> "
      << short_value(l["parent"]["b"]) << "\n";
  out << "  tokenizer     " << l["tokenizer"].get<std::string>() << "\n";
  for (const char* part : {"data", "data_position"})
    for (const nlohmann::json& c : l[part])
      out << "  " << part << "." << c["key"].get<std::string>() << ": " << short_value(c["a"])
          << " -> " << short_value(c["b"]) << "\n";
  out << "config (" << d["config"].size() << " keys differ)\n";
  for (const nlohmann::json& c : d["config"])
    out << "  " << c["key"].get<std::string>() << ": " << short_value(c["a"]) << " -> "
        << short_value(c["b"]) << "\n";
  out << "metrics\n";
  for (const nlohmann::json& c : d["metrics"]) {
    out << "  " << c["key"].get<std::string>() << ": " << short_value(c["a"]) << " -> "
        << short_value(c["b"]);
    if (c.contains("delta"))
      out << " (" << (c["delta"].get<double>() >= 0 ? "+" : "") << number(c["delta"].get<double>())
          << ")";
    out << "\n";
  }
  return out.str();
}

}  // namespace strata::registry
