// The model registry: named, numbered versions of checkpoints with what produced them.
//
//   REGISTRY/registry.db         SQLite index: one row per version (name, version, date, content
//                                hash, step, val_loss, parent, config, final metrics, data
//                                lineage, file manifest) and the evaluation results of each
//   REGISTRY/blobs/NAME/vN/      the checkpoint's files (hard-linked from the run when on the
//                                same filesystem, else copied); checkpoints are never modified
//                                in place, so a link is as safe as a copy
//
// A push verifies the checkpoint's slices against its index, stages the files beside the final
// place, and only then, inside one write transaction (BEGIN IMMEDIATE: concurrent pushes queue
// on the lock), takes the next version number, moves the files into place and inserts the row.
// A checkpoint whose content hash NAME already holds is not pushed again: the push returns the
// existing version. Pull copies a version out and checks every file against the manifest and
// the content hash against the index; a damaged blob is named, never handed out.
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace strata::sql {
class Db;
class Stmt;
}  // namespace strata::sql

namespace strata::registry {

// NAME: letters, digits, '.', '_', '-' (not starting with '.'), at most 100 characters.
void check_name(const std::string& name);

struct VersionRef {
  std::string name;
  int64_t version = 0;  // 0: the newest
};
// "NAME", "NAME:latest", "NAME:vN" or "NAME:N".
VersionRef parse_ref(const std::string& text);

struct Eval {
  std::string created_at, command;
  int exit_status = 0;
  double seconds = 0;
  std::string output;  // the command's stdout and stderr (the last 64 KiB)
};

struct Version {
  std::string name;
  int64_t version = 0;
  std::string created_at;  // ISO 8601, UTC
  std::string content_hash;
  int64_t step = 0;
  std::optional<double> val_loss;
  std::string source;  // the checkpoint directory it was pushed from
  std::string blob;    // absolute path of its files in the registry
  std::string parent_name;
  int64_t parent_version = 0;  // 0: no parent
  std::string parent_reason;   // "explicit (--parent)", "resumed from ...", ""
  nlohmann::json config, metrics, lineage, manifest;
  std::vector<Eval> evals;

  std::string ref() const;  // "NAME:vN"
  nlohmann::json to_json() const;
};

struct PushOptions {
  std::string source;  // checkpoint directory, ckpt directory or run directory
  std::string name;
  std::string parent;   // "NAME:vN" to name the parent; "": found from the checkpoint's lineage
  std::string run_dir;  // where metrics.jsonl lives; "": the checkpoint's run, when it has one
  bool copy = false;    // copy the files even where a hard link would do
};

struct PushResult {
  Version version;
  bool existing = false;  // NAME already held this content: nothing new was pushed
};

class Registry {
 public:
  // Opens (creating) the registry in `dir`.
  explicit Registry(const std::string& dir);
  ~Registry();
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // --registry, else $STRATA_REGISTRY, else ./registry.
  static std::string default_dir();

  const std::string& dir() const { return dir_; }
  PushResult push(const PushOptions& options);
  // Every version (of `name` when given), by name then version.
  std::vector<Version> list(const std::string& name = "");
  Version get(const std::string& ref);  // throws naming what exists
  std::optional<Version> find_by_hash(const std::string& content_hash);
  // Copies the version's checkpoint to `out` (which must not exist, or be empty) and verifies
  // it; returns the directory.
  std::string pull(const std::string& ref, const std::string& out);
  // Checks the version's files in the registry against its manifest and content hash.
  void verify(const Version& v);
  void record_eval(const Version& v, const Eval& eval);

 private:
  Version read_row(sql::Stmt& row);
  void load_evals(Version& v);
  std::optional<Version> find_parent(const nlohmann::json& state, const std::string& source);

  std::string dir_;
  std::unique_ptr<sql::Db> db_;
};

// What differs between two versions: config keys, final metrics (with b - a), lineage.
nlohmann::json diff_versions(Registry& registry, const Version& a, const Version& b);

// Text forms for the command line.
std::string format_list(const std::vector<Version>& versions);
std::string format_show(const Version& v);
std::string format_diff(const nlohmann::json& diff);

// Flattens nested objects into dotted keys ({"a": {"b": 1}} -> {"a.b": 1}); arrays stay values.
nlohmann::json flatten(const nlohmann::json& j);

}  // namespace strata::registry
