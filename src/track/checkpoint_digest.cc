#include "track/checkpoint_digest.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <vector>

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/checksum.h"
#include "io/safetensors.h"

namespace strata::registry {

namespace fs = std::filesystem;

namespace {

constexpr size_t kMaxAncestors = 32;

nlohmann::json read_json(const fs::path& path, const std::string& what) {
  try {
    return nlohmann::json::parse(io::read_file(path.string()));
  } catch (const nlohmann::json::exception& e) {
    fail(what, " '", path.string(), "' is not valid JSON (", e.what(), ")");
  }
}

nlohmann::json read_index(const std::string& dir) {
  const fs::path path = fs::path(dir) / "index.json";
  STRATA_CHECK(fs::exists(path), "'", dir,
               "' has no index.json: not a strata checkpoint (format v2 or v3), or an incomplete "
               "one");
  nlohmann::json index = read_json(path, "checkpoint index");
  STRATA_CHECK(index.contains("slices") && index["slices"].is_array(), "checkpoint index '",
               path.string(), "' has no slice list");
  return index;
}

// The line of one slice in the canonical listing. An XXH64 digest (format v2) is written as it
// was before v3, so that a v2 checkpoint keeps its content hash; an XXH3 one is prefixed "xxh3:".
std::string slice_line(const nlohmann::json& s) {
  try {
    const io::RecordedChecksum sum = io::recorded_checksum(s);
    const std::string digest =
        cat(sum.algorithm == io::Checksum::xxh64 ? "" : "xxh3:", io::hex64(sum.value));
    return cat(s.at("tensor").get<std::string>(), '\t', s.at("global_shape").dump(), '\t',
               s.at("block_shape").dump(), '\t', s.at("slice_dim").get<int64_t>(), '\t',
               s.at("slice_begin").get<int64_t>(), '\t', s.at("begin").get<int64_t>(), '\t',
               s.at("count").get<int64_t>(), '\t', digest, '\n');
  } catch (const std::exception& e) {
    fail("checkpoint index: malformed slice ", s.dump().substr(0, 120), " (", e.what(), ")");
  }
}

std::optional<std::string> latest_in(const fs::path& ckpt_root) {
  const fs::path latest = ckpt_root / "latest";
  if (!fs::is_regular_file(latest)) return std::nullopt;
  std::string name = io::read_file(latest.string());
  while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
  const fs::path dir = ckpt_root / name;
  STRATA_CHECK(fs::exists(dir / "state.json"), "'", latest.string(), "' names checkpoint '", name,
               "', which is missing or incomplete");
  return dir.string();
}

}  // namespace

std::string resolve_checkpoint_dir(const std::string& path) {
  const fs::path p(path);
  STRATA_CHECK(fs::exists(p), "'", path, "' does not exist");
  if (fs::exists(p / "state.json")) return fs::absolute(p).lexically_normal().string();
  if (auto dir = latest_in(p)) return fs::absolute(*dir).lexically_normal().string();
  if (auto dir = latest_in(p / "ckpt")) return fs::absolute(*dir).lexically_normal().string();
  if (p.filename() == "latest")
    if (auto dir = latest_in(p.parent_path()))
      return fs::absolute(*dir).lexically_normal().string();
  fail("'", path,
       "' is not a checkpoint: expected a directory with state.json, a ckpt directory with a "
       "'latest' file, or a run directory (e.g. runs/tiny)");
}

std::string run_dir_of(const std::string& checkpoint_dir) {
  const fs::path ckpt_root = fs::path(checkpoint_dir).parent_path();
  if (ckpt_root.filename() != "ckpt") return "";
  const fs::path run = ckpt_root.parent_path();
  if (fs::exists(run / "metrics.jsonl") || fs::exists(run / "config.json")) return run.string();
  return "";
}

std::string content_hash(const std::string& dir) {
  const nlohmann::json index = read_index(dir);
  std::vector<std::string> lines;
  for (const nlohmann::json& s : index["slices"]) lines.push_back(slice_line(s));
  std::sort(lines.begin(), lines.end());
  io::XxHash64 a(0), b(1);
  const std::string header = cat(index.value("format", ""), '\n');
  a.update(header);
  b.update(header);
  for (const std::string& l : lines) {
    a.update(l);
    b.update(l);
  }
  return io::hex64(a.finish()) + io::hex64(b.finish());
}

void verify_slices(const std::string& dir) {
  const nlohmann::json index = read_index(dir);
  std::map<std::string, io::SafetensorsFile> files;
  std::vector<char> buf;
  for (const nlohmann::json& s : index["slices"]) {
    const std::string file = s.at("file").get<std::string>();
    const std::string key = s.at("key").get<std::string>();
    const fs::path path = fs::path(dir) / file;
    auto it = files.find(file);
    if (it == files.end()) {
      STRATA_CHECK(fs::exists(path), "checkpoint file '", path.string(),
                   "' is missing (index.json lists it)");
      it = files.emplace(file, io::SafetensorsFile::open(path.string())).first;
    }
    STRATA_CHECK(it->second.has(key), "checkpoint file '", path.string(), "' has no tensor '", key,
                 "' (index.json lists it)");
    const io::TensorInfo info = it->second.info(key);
    buf.resize(info.bytes);
    it->second.read_into(key, buf.data(), buf.size());
    const io::RecordedChecksum expected = io::recorded_checksum(s);
    const uint64_t found = io::checksum(expected.algorithm, buf.data(), buf.size());
    STRATA_CHECK(found == expected.value, "checkpoint file '", path.string(), "': slice '", key,
                 "' does not match its checksum in index.json (",
                 io::checksum_name(expected.algorithm), " expected ", io::hex64(expected.value),
                 ", found ", io::hex64(found), "): the file is damaged");
  }
}

std::string file_xxh64(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  STRATA_CHECK(in.good(), "cannot read '", path, "'");
  io::XxHash64 h;
  std::vector<char> buf(1 << 20);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    h.update(buf.data(), static_cast<size_t>(in.gcount()));
  }
  STRATA_CHECK(in.eof(), "error while reading '", path, "'");
  return io::hex64(h.finish());
}

nlohmann::json file_manifest(const std::string& dir) {
  std::vector<std::string> paths;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) paths.push_back(fs::relative(e.path(), dir).generic_string());
  std::sort(paths.begin(), paths.end());
  nlohmann::json files = nlohmann::json::array();
  for (const std::string& p : paths) {
    const std::string full = (fs::path(dir) / p).string();
    files.push_back({{"path", p}, {"bytes", fs::file_size(full)}, {"xxh64", file_xxh64(full)}});
  }
  return {{"files", files}};
}

void verify_manifest(const std::string& dir, const nlohmann::json& manifest,
                     const std::string& what) {
  STRATA_CHECK(fs::is_directory(dir), what, ": directory '", dir, "' is missing");
  for (const nlohmann::json& f : manifest.at("files")) {
    const std::string rel = f.at("path").get<std::string>();
    const fs::path path = fs::path(dir) / rel;
    STRATA_CHECK(fs::is_regular_file(path), what, ": file '", path.string(), "' is missing");
    const uint64_t bytes = fs::file_size(path);
    STRATA_CHECK(bytes == f.at("bytes").get<uint64_t>(), what, ": file '", path.string(), "' has ",
                 bytes, " bytes, the registry recorded ", f.at("bytes").get<uint64_t>(),
                 ": it is damaged (truncated or replaced)");
    const std::string h = file_xxh64(path.string());
    STRATA_CHECK(h == f.at("xxh64").get<std::string>(), what, ": file '", path.string(),
                 "' does not match its recorded hash (expected ", f.at("xxh64").get<std::string>(),
                 ", found ", h, "): it is damaged");
  }
}

nlohmann::json checkpoint_lineage(const std::string& dir) {
  nlohmann::json out = {{"resumed_from", fs::absolute(dir).lexically_normal().string()}};
  try {
    nlohmann::json ancestors = nlohmann::json::array({content_hash(dir)});
    const nlohmann::json state = read_json(fs::path(dir) / "state.json", "checkpoint state");
    out["step"] = state.value("step", int64_t{0});
    const nlohmann::json* prev = nullptr;
    if (state.contains("extra") && state["extra"].contains("lineage"))
      prev = &state["extra"]["lineage"];
    if (prev && prev->contains("ancestors") && (*prev)["ancestors"].is_array())
      for (const nlohmann::json& a : (*prev)["ancestors"])
        if (ancestors.size() < kMaxAncestors && a.is_string() && a != ancestors.front())
          ancestors.push_back(a);
    out["ancestors"] = ancestors;
  } catch (const std::exception&) {
    // A lineage is a record, not a requirement: the resume itself checks the checkpoint.
  }
  return out;
}

}  // namespace strata::registry
