#include "track/registry.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <random>

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/checksum.h"
#include "track/checkpoint_digest.h"
#include "track/sqlite_db.h"

namespace strata::registry {

namespace fs = std::filesystem;

namespace {

constexpr int kSchemaVersion = 1;

const char* const kSchema = R"sql(
CREATE TABLE IF NOT EXISTS versions (
  name TEXT NOT NULL,
  version INTEGER NOT NULL,
  created_at TEXT NOT NULL,
  content_hash TEXT NOT NULL,
  step INTEGER NOT NULL,
  val_loss REAL,
  source TEXT NOT NULL,
  blob TEXT NOT NULL,
  parent_name TEXT,
  parent_version INTEGER,
  parent_reason TEXT,
  config TEXT NOT NULL,
  metrics TEXT NOT NULL,
  lineage TEXT NOT NULL,
  manifest TEXT NOT NULL,
  PRIMARY KEY (name, version));
CREATE INDEX IF NOT EXISTS versions_by_hash ON versions (content_hash);
CREATE TABLE IF NOT EXISTS evals (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  name TEXT NOT NULL,
  version INTEGER NOT NULL,
  created_at TEXT NOT NULL,
  command TEXT NOT NULL,
  exit_status INTEGER NOT NULL,
  seconds REAL NOT NULL,
  output TEXT NOT NULL);
)sql";

const char* const kColumns =
    "name, version, created_at, content_hash, step, val_loss, source, blob, parent_name, "
    "parent_version, parent_reason, config, metrics, lineage, manifest";

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

nlohmann::json parse_or_empty(const std::string& text) {
  if (text.empty()) return nlohmann::json::object();
  return nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
}

// The run's metrics at the checkpoint: the last metrics.jsonl record whose step is at most the
// checkpoint's (a resumed run appends, so the newest such line is the one the checkpoint saw),
// with the most recent validation loss up to it.
nlohmann::json final_metrics(const std::string& run_dir, int64_t step) {
  nlohmann::json chosen = nlohmann::json::object();
  if (run_dir.empty()) return chosen;
  std::ifstream in(fs::path(run_dir) / "metrics.jsonl");
  std::optional<double> val;
  int64_t val_step = 0;
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json r = nlohmann::json::parse(line, nullptr, false);
    if (!r.is_object() || !r.contains("step") || !r["step"].is_number_integer()) continue;
    const int64_t s = r["step"].get<int64_t>();
    if (s > step) continue;
    chosen = r;
    if (r.contains("val_loss") && r["val_loss"].is_number()) {
      val = r["val_loss"].get<double>();
      val_step = s;
    }
  }
  if (val && !chosen.contains("val_loss")) {
    chosen["val_loss"] = *val;
    chosen["val_loss_step"] = val_step;
  }
  return chosen;
}

nlohmann::json file_sizes(const std::vector<std::string>& paths) {
  nlohmann::json out = nlohmann::json::array();
  for (const std::string& p : paths) {
    std::error_code ec;
    const auto bytes = fs::file_size(p, ec);
    out.push_back({{"path", p}, {"bytes", ec ? nlohmann::json() : nlohmann::json(bytes)}});
  }
  return out;
}

// Where the data came from: the [data] keys, the files they name as they are now (sizes),
// the tokenizer's hash, and the loader position saved with the checkpoint.
nlohmann::json data_lineage(const std::string& ckpt, const nlohmann::json& state,
                            const std::string& run_dir) {
  const nlohmann::json config = state.value("config", nlohmann::json::object());
  const nlohmann::json data = config.value("data", nlohmann::json::object());
  nlohmann::json d = {{"source", data.value("source", "")}, {"dir", data.value("dir", "")}};
  if (data.contains("text") && data["text"].is_array())
    d["text"] = file_sizes(data["text"].get<std::vector<std::string>>());
  std::vector<std::string> shards;
  std::error_code ec;
  const std::string dir = data.value("dir", "");
  if (!dir.empty() && fs::is_directory(dir, ec)) {
    for (const auto& e : fs::directory_iterator(dir, ec))
      if (e.path().extension() == ".bin") shards.push_back(e.path().string());
    std::sort(shards.begin(), shards.end());
    d["shards"] = file_sizes(shards);
  }
  nlohmann::json lineage = {{"data", d}, {"step", state.value("step", int64_t{0})}};
  lineage["data_position"] = state.value("data", nlohmann::json());
  std::string tokenizer = (fs::path(ckpt) / "tokenizer.json").string();
  if (!fs::exists(tokenizer)) tokenizer = (fs::path(dir) / "tokenizer.json").string();
  lineage["tokenizer_xxh64"] =
      fs::exists(tokenizer) ? nlohmann::json(file_xxh64(tokenizer)) : nlohmann::json();
  if (!run_dir.empty()) lineage["run_dir"] = fs::absolute(run_dir).lexically_normal().string();
  const nlohmann::json extra = state.value("extra", nlohmann::json::object());
  if (extra.contains("lineage")) {
    const nlohmann::json& l = extra["lineage"];
    if (l.contains("resumed_from")) lineage["resumed_from"] = l["resumed_from"];
    if (l.contains("ancestors")) lineage["ancestors"] = l["ancestors"];
  }
  return lineage;
}

std::string unique_suffix() {
  std::random_device rd;
  return cat(getpid(), "-", std::hex, rd(), rd());
}

// Hard link, or copy when a link cannot be made (another filesystem, no permission).
bool link_or_copy(const fs::path& from, const fs::path& to, bool copy) {
  fs::create_directories(to.parent_path());
  if (!copy) {
    std::error_code ec;
    fs::create_hard_link(from, to, ec);
    if (!ec) return false;
  }
  fs::copy_file(from, to, fs::copy_options::overwrite_existing);
  return true;
}

// Command output as valid UTF-8 (JSON needs it): each byte that does not start a well-formed
// sequence (Unicode table 3-7: no overlongs, surrogates or values past U+10FFFF) becomes U+FFFD.
std::string valid_utf8(const std::string& in) {
  std::string out;
  const auto byte = [&](size_t i) { return i < in.size() ? static_cast<unsigned char>(in[i]) : 0; };
  for (size_t i = 0; i < in.size();) {
    const unsigned char c = byte(i);
    size_t n = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // the allowed range of the second byte
    if (c < 0x80) {
      n = 1;
    } else if (c >= 0xC2 && c <= 0xDF) {
      n = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      n = 3;
      lo = c == 0xE0 ? 0xA0 : 0x80;
      hi = c == 0xED ? 0x9F : 0xBF;
    } else if (c >= 0xF0 && c <= 0xF4) {
      n = 4;
      lo = c == 0xF0 ? 0x90 : 0x80;
      hi = c == 0xF4 ? 0x8F : 0xBF;
    }
    bool ok = n > 0 && i + n <= in.size();
    for (size_t k = 1; ok && k < n; ++k)
      ok = k == 1 ? byte(i + 1) >= lo && byte(i + 1) <= hi : (byte(i + k) >> 6) == 0x2;
    if (ok) {
      out.append(in, i, n);
      i += n;
    } else {
      out += "\xEF\xBF\xBD";
      ++i;
    }
  }
  return out;
}

}  // namespace

void check_name(const std::string& name) {
  const bool ok =
      !name.empty() && name.size() <= 100 && name[0] != '.' &&
      std::all_of(name.begin(), name.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
      });
  STRATA_CHECK(ok, "model name '", name,
               "' is not valid: use letters, digits, '.', '_' and '-' (at most 100 characters, "
               "not starting with '.'), e.g. tiny-kjv");
}

VersionRef parse_ref(const std::string& text) {
  VersionRef ref;
  const size_t colon = text.rfind(':');
  ref.name = text.substr(0, colon);
  check_name(ref.name);
  if (colon == std::string::npos) return ref;
  std::string v = text.substr(colon + 1);
  if (v == "latest") return ref;
  if (!v.empty() && (v[0] == 'v' || v[0] == 'V')) v = v.substr(1);
  const bool digits = !v.empty() && v.size() < 10 &&
                      std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; });
  STRATA_CHECK(digits && std::stoll(v) >= 1, "'", text,
               "' is not a model version: expected NAME, NAME:vN (N >= 1) or NAME:latest");
  ref.version = std::stoll(v);
  return ref;
}

std::string Version::ref() const {
  return cat(name, ":v", version);
}

nlohmann::json Version::to_json() const {
  nlohmann::json j = {{"name", name},
                      {"version", version},
                      {"ref", ref()},
                      {"created_at", created_at},
                      {"content_hash", content_hash},
                      {"step", step},
                      {"val_loss", val_loss ? nlohmann::json(*val_loss) : nlohmann::json()},
                      {"source", source},
                      {"blob", blob},
                      {"config", config},
                      {"metrics", metrics},
                      {"lineage", lineage},
                      {"manifest", manifest}};
  j["parent"] = parent_version > 0
                    ? nlohmann::json({{"ref", cat(parent_name, ":v", parent_version)},
                                      {"reason", parent_reason}})
                    : nlohmann::json();
  nlohmann::json e = nlohmann::json::array();
  for (const Eval& x : evals)
    e.push_back({{"created_at", x.created_at},
                 {"command", x.command},
                 {"exit_status", x.exit_status},
                 {"seconds", x.seconds},
                 {"output", x.output}});
  j["evals"] = e;
  return j;
}

Registry::Registry(const std::string& dir) : dir_(fs::absolute(dir).lexically_normal().string()) {
  try {
    io::make_dirs((fs::path(dir_) / "blobs").string());
  } catch (const std::exception& e) {
    fail("cannot create the registry directory '", dir_, "': ", e.what(),
         " (choose another with --registry DIR or STRATA_REGISTRY)");
  }
  db_ = std::make_unique<sql::Db>((fs::path(dir_) / "registry.db").string());
  sql::Stmt uv(*db_, "PRAGMA user_version");
  uv.step();
  const int64_t have = uv.integer(0);
  STRATA_CHECK(have <= kSchemaVersion, "registry '", dir_, "' has schema version ", have,
               ", newer than this strata understands (", kSchemaVersion, "); upgrade strata");
  if (have < kSchemaVersion) {
    sql::Transaction tx(*db_);
    db_->exec(kSchema);
    db_->exec(cat("PRAGMA user_version = ", kSchemaVersion));
    tx.commit();
  }
}

Registry::~Registry() = default;

std::string Registry::default_dir() {
  const char* env = std::getenv("STRATA_REGISTRY");
  return env && *env ? env : "registry";
}

Version Registry::read_row(sql::Stmt& row) {
  Version v;
  v.name = row.text(0);
  v.version = row.integer(1);
  v.created_at = row.text(2);
  v.content_hash = row.text(3);
  v.step = row.integer(4);
  if (!row.is_null(5)) v.val_loss = row.real(5);
  v.source = row.text(6);
  v.blob = (fs::path(dir_) / row.text(7)).string();
  v.parent_name = row.text(8);
  v.parent_version = row.is_null(9) ? 0 : row.integer(9);
  v.parent_reason = row.text(10);
  v.config = parse_or_empty(row.text(11));
  v.metrics = parse_or_empty(row.text(12));
  v.lineage = parse_or_empty(row.text(13));
  v.manifest = parse_or_empty(row.text(14));
  return v;
}

void Registry::load_evals(Version& v) {
  sql::Stmt q(*db_,
              "SELECT created_at, command, exit_status, seconds, output FROM evals WHERE name = ? "
              "AND version = ? ORDER BY id");
  q.bind(1, v.name).bind(2, v.version);
  while (q.step())
    v.evals.push_back(
        Eval{q.text(0), q.text(1), static_cast<int>(q.integer(2)), q.real(3), q.text(4)});
}

std::vector<Version> Registry::list(const std::string& name) {
  sql::Stmt q(*db_, cat("SELECT ", kColumns, " FROM versions",
                        name.empty() ? "" : " WHERE name = ?", " ORDER BY name, version"));
  if (!name.empty()) q.bind(1, name);
  std::vector<Version> out;
  while (q.step()) out.push_back(read_row(q));
  return out;
}

Version Registry::get(const std::string& text) {
  const VersionRef ref = parse_ref(text);
  const std::vector<Version> all = list(ref.name);
  STRATA_CHECK(!all.empty(), "no model named '", ref.name, "' in the registry at ", dir_,
               " (`strata registry list` shows what it holds)");
  for (const Version& v : all) {
    if (ref.version == 0 ? &v == &all.back() : v.version == ref.version) {
      Version out = v;
      load_evals(out);
      return out;
    }
  }
  fail("'", ref.name, "' has no version ", ref.version, " in the registry at ", dir_,
       " (its versions are v1..v", all.back().version, ")");
}

std::optional<Version> Registry::find_by_hash(const std::string& content_hash) {
  sql::Stmt q(*db_, cat("SELECT ", kColumns,
                        " FROM versions WHERE content_hash = ? ORDER BY created_at, name, version "
                        "LIMIT 1"));
  q.bind(1, content_hash);
  if (!q.step()) return std::nullopt;
  return read_row(q);
}

std::optional<Version> Registry::find_parent(const nlohmann::json& state,
                                             const std::string& source) {
  const nlohmann::json extra = state.value("extra", nlohmann::json::object());
  if (extra.contains("lineage") && extra["lineage"].contains("ancestors"))
    for (const nlohmann::json& h : extra["lineage"]["ancestors"])
      if (h.is_string())
        if (auto v = find_by_hash(h.get<std::string>())) return v;
  // A run started with run.resume = PATH: that checkpoint, if it is still there.
  const nlohmann::json config = state.value("config", nlohmann::json::object());
  const std::string resume = config.value("run", nlohmann::json::object()).value("resume", "");
  if (resume.empty() || resume == "auto" || resume == "none") return std::nullopt;
  try {
    const std::string dir = resolve_checkpoint_dir(resume);
    if (dir != source) return find_by_hash(content_hash(dir));
  } catch (const std::exception&) {
    // gone or unreadable: no parent can be named from it
  }
  return std::nullopt;
}

PushResult Registry::push(const PushOptions& o) {
  check_name(o.name);
  const std::string ckpt = resolve_checkpoint_dir(o.source);
  const nlohmann::json state =
      parse_or_empty(io::read_file((fs::path(ckpt) / "state.json").string()));
  STRATA_CHECK(state.is_object() && state.contains("step"), "'", ckpt,
               "/state.json' is not a strata checkpoint state");
  std::optional<Version> parent;
  std::string parent_reason;
  if (!o.parent.empty()) {
    parent = get(o.parent);
    parent_reason = "explicit (--parent)";
  }
  const std::string hash = content_hash(ckpt);
  verify_slices(ckpt);  // never register bytes that do not match their own index
  const nlohmann::json manifest = file_manifest(ckpt);
  if (!parent) {
    parent = find_parent(state, ckpt);
    if (parent) parent_reason = "resumed from its checkpoint (content hash)";
  }
  const int64_t step = state["step"].get<int64_t>();
  const std::string run_dir = o.run_dir.empty() ? run_dir_of(ckpt) : o.run_dir;
  const nlohmann::json metrics = final_metrics(run_dir, step);
  const nlohmann::json lineage = data_lineage(ckpt, state, run_dir);
  std::optional<double> val_loss;
  if (metrics.contains("val_loss") && metrics["val_loss"].is_number())
    val_loss = metrics["val_loss"].get<double>();

  // Stage the files beside their final place (same filesystem: the move is a rename).
  const fs::path name_dir = fs::path(dir_) / "blobs" / o.name;
  const fs::path staging = name_dir / (".staging-" + unique_suffix());
  struct Cleanup {
    fs::path p;
    ~Cleanup() {
      std::error_code ec;
      if (!p.empty()) fs::remove_all(p, ec);
    }
  } cleanup{staging};
  for (const nlohmann::json& f : manifest["files"]) {
    const std::string rel = f["path"].get<std::string>();
    if (link_or_copy(fs::path(ckpt) / rel, staging / rel, o.copy))
      STRATA_CHECK(file_xxh64((staging / rel).string()) == f["xxh64"].get<std::string>(),
                   "copying '", (fs::path(ckpt) / rel).string(),
                   "' into the registry gave "
                   "different bytes (a failing disk?); nothing was registered");
  }

  sql::Transaction tx(*db_);
  {
    sql::Stmt same(*db_, "SELECT version FROM versions WHERE name = ? AND content_hash = ?");
    same.bind(1, o.name).bind(2, hash);
    if (same.step()) {
      const int64_t existing = same.integer(0);
      return {get(cat(o.name, ":v", existing)), true};  // the transaction rolls back
    }
  }
  sql::Stmt next(*db_, "SELECT COALESCE(MAX(version), 0) + 1 FROM versions WHERE name = ?");
  next.bind(1, o.name);
  next.step();
  const int64_t version = next.integer(0);
  const std::string blob_rel = cat("blobs/", o.name, "/v", version);
  const fs::path blob = fs::path(dir_) / blob_rel;
  std::error_code ec;
  fs::remove_all(blob, ec);  // left by a push that died before its commit: no row names it
  fs::rename(staging, blob);
  cleanup.p = blob;  // until the row is committed
  sql::Stmt ins(*db_, cat("INSERT INTO versions (", kColumns,
                          ") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"));
  ins.bind(1, o.name).bind(2, version).bind(3, utc_now()).bind(4, hash).bind(5, step);
  ins.bind(6, val_loss).bind(7, ckpt).bind(8, blob_rel);
  ins.bind(9, parent ? parent->name : std::string());
  ins.bind(10, parent ? std::optional<int64_t>(parent->version) : std::nullopt);
  ins.bind(11, parent_reason);
  ins.bind(12, state.value("config", nlohmann::json::object()).dump());
  ins.bind(13, metrics.dump()).bind(14, lineage.dump()).bind(15, manifest.dump());
  ins.step();
  tx.commit();
  cleanup.p.clear();
  io::fsync_dir(name_dir.string());
  return {get(cat(o.name, ":v", version)), false};
}

void Registry::verify(const Version& v) {
  const std::string what = cat("registry blob ", v.ref(), " (", v.blob, ")");
  verify_manifest(v.blob, v.manifest, what);
  const std::string h = content_hash(v.blob);
  STRATA_CHECK(h == v.content_hash, what, ": content hash ", h, " differs from the recorded ",
               v.content_hash, ": index.json was changed");
}

std::string Registry::pull(const std::string& ref, const std::string& out) {
  const Version v = get(ref);
  std::error_code ec;
  STRATA_CHECK(!fs::exists(out) || (fs::is_directory(out) && fs::is_empty(out)), "--out '", out,
               "' exists and is not an empty directory; choose another or remove it");
  const fs::path target = fs::absolute(out).lexically_normal();
  const fs::path partial = target.parent_path() / ("." + target.filename().string() + ".partial");
  fs::remove_all(partial, ec);
  io::make_dirs(partial.string());
  try {
    verify(v);  // a damaged blob is named as such, not as a bad copy
    for (const nlohmann::json& f : v.manifest.at("files")) {
      const std::string rel = f["path"].get<std::string>();
      fs::create_directories((partial / rel).parent_path());
      fs::copy_file(fs::path(v.blob) / rel, partial / rel);
    }
    verify_manifest(partial.string(), v.manifest, cat("pulled copy of ", v.ref()));
    STRATA_CHECK(content_hash(partial.string()) == v.content_hash, "pulled copy of ", v.ref(),
                 ": content hash differs from the registry's");
  } catch (...) {
    fs::remove_all(partial, ec);
    throw;
  }
  if (fs::exists(target)) fs::remove(target);  // the empty directory
  fs::rename(partial, target);
  return target.string();
}

void Registry::record_eval(const Version& v, const Eval& e) {
  sql::Transaction tx(*db_);
  sql::Stmt ins(*db_,
                "INSERT INTO evals (name, version, created_at, command, exit_status, seconds, "
                "output) VALUES (?, ?, ?, ?, ?, ?, ?)");
  ins.bind(1, v.name).bind(2, v.version).bind(3, e.created_at.empty() ? utc_now() : e.created_at);
  ins.bind(4, e.command).bind(5, static_cast<int64_t>(e.exit_status)).bind(6, e.seconds);
  ins.bind(7, valid_utf8(e.output));
  ins.step();
  tx.commit();
}

}  // namespace strata::registry
