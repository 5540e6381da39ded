#include "data/manifest.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/file_util.h"
#include "data/shard.h"
#include "io/checksum.h"

namespace strata::data {

namespace fs = std::filesystem;

namespace {
constexpr const char* kFormat = "strata-shards";
constexpr int kVersion = 1;
}  // namespace

int64_t Manifest::tokens(const std::string& split) const {
  int64_t n = 0;
  if (const auto it = splits.find(split); it != splits.end())
    for (const ShardEntry& e : it->second) n += e.tokens;
  return n;
}

void write_manifest(const std::string& dir, const Manifest& m) {
  nlohmann::ordered_json j;
  j["format"] = kFormat;
  j["version"] = kVersion;
  j["vocab_size"] = m.vocab_size;
  j["tokenizer"] = m.tokenizer;
  nlohmann::ordered_json splits = nlohmann::ordered_json::object();
  for (const auto& [split, entries] : m.splits) {
    nlohmann::ordered_json list = nlohmann::ordered_json::array();
    for (const ShardEntry& e : entries)
      list.push_back({{"file", e.file}, {"tokens", e.tokens}, {"xxh3", io::hex64(e.xxh3)}});
    splits[split] = list;
  }
  j["splits"] = splits;
  write_file_atomic((fs::path(dir) / kManifestFile).string(), j.dump(1) + "\n");
}

std::optional<Manifest> read_manifest(const std::string& dir) {
  const std::string path = (fs::path(dir) / kManifestFile).string();
  std::error_code ec;
  if (!fs::exists(path, ec)) return std::nullopt;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_file(path));
  } catch (const nlohmann::json::exception& e) {
    fail(path, ": not valid JSON (", e.what(), "); re-run the prepare step");
  }
  auto bad = [&](const std::string& what) {
    fail(path, ": ", what, "; this is not a strata data manifest (re-run the prepare step)");
  };
  if (!j.is_object() || j.value("format", "") != kFormat)
    bad("\"format\" is not \"strata-shards\"");
  if (j.value("version", 0) != kVersion)
    bad(cat("\"version\" ", j.value("version", 0), " is not ", kVersion));
  Manifest m;
  try {
    m.vocab_size = j.at("vocab_size").get<int64_t>();
    m.tokenizer = j.value("tokenizer", "tokenizer.json");
    for (const auto& [split, list] : j.at("splits").items()) {
      std::vector<ShardEntry>& entries = m.splits[split];
      for (const auto& e : list) {
        ShardEntry s;
        s.file = e.at("file").get<std::string>();
        s.tokens = e.at("tokens").get<int64_t>();
        s.xxh3 = io::recorded_checksum(e).value;
        if (s.file.empty() || s.file.find('/') != std::string::npos || s.tokens < 0)
          bad(cat("split '", split, "' has an entry with file '", s.file, "' and ", s.tokens,
                  " tokens"));
        entries.push_back(s);
      }
    }
  } catch (const nlohmann::json::exception& e) {
    bad(e.what());
  }
  return m;
}

uint64_t shard_checksum(const std::string& path) {
  const Shard shard(path, 0);  // mapped: hashed in place
  io::Xxh3Hash h;
  h.update(shard.bytes(), static_cast<size_t>(shard.byte_size()));
  return h.finish();
}

std::vector<std::string> verified_shards(const std::string& dir, const Manifest& m,
                                         const std::string& split, const VerifyOptions& options) {
  std::vector<std::string> paths;
  const auto it = m.splits.find(split);
  if (it == m.splits.end()) return paths;
  for (const ShardEntry& e : it->second) {
    const std::string path = (fs::path(dir) / e.file).string();
    std::error_code ec;
    STRATA_CHECK(fs::exists(path, ec), "data folder '", dir, "': shard '", e.file, "' listed in ",
                 kManifestFile, " is missing; re-run the prepare step");
    const Shard shard(path, 0);  // magic, version and size against the header's count
    STRATA_CHECK(shard.size() == e.tokens, path, ": ", shard.size(), " tokens, but ", kManifestFile,
                 " records ", e.tokens,
                 "; the shard was replaced or damaged: re-run the prepare step");
    if (options.checksums) {
      const uint64_t got = shard_checksum(path);
      STRATA_CHECK(got == e.xxh3, path, ": XXH3 ", io::hex64(got), " differs from ",
                   io::hex64(e.xxh3), " in ", kManifestFile,
                   "; the shard is damaged: re-run the prepare step");
    }
    paths.push_back(path);
  }
  return paths;
}

PreparedShards prepared_shards(const std::string& dir, const VerifyOptions& options) {
  PreparedShards p;
  if (const std::optional<Manifest> m = read_manifest(dir)) {
    p.train = verified_shards(dir, *m, "train", options);
    p.val = verified_shards(dir, *m, "val", options);
    p.from_manifest = true;
  } else {
    p.train = list_shards(dir, "train");
    p.val = list_shards(dir, "val");
  }
  return p;
}

}  // namespace strata::data
