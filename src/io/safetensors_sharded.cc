#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"

namespace strata::io {

namespace fs = std::filesystem;

namespace {

constexpr const char* kIndexName = "model.safetensors.index.json";
constexpr const char* kSingleName = "model.safetensors";

// Shard errors already name the shard; this adds which index led there.
SafetensorsFile open_shard(const std::string& shard, const std::string& index) {
  try {
    return SafetensorsFile::open(shard);
  } catch (const Error& e) {
    fail(e.what(), " (listed in '", index, "')");
  }
}

}  // namespace

ShardedSafetensors ShardedSafetensors::open(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    const fs::path dir(path);
    if (fs::exists(dir / kIndexName, ec)) return open((dir / kIndexName).string());
    if (fs::exists(dir / kSingleName, ec)) return open((dir / kSingleName).string());
    fail("model directory '", path, "' holds neither ", kIndexName, " nor ", kSingleName);
  }

  ShardedSafetensors model;
  model.source_ = path;
  if (fs::path(path).extension() != ".json") {
    model.shards_.push_back(SafetensorsFile::open(path));
    for (const std::string& name : model.shards_[0].names()) model.where_[name] = 0;
    return model;
  }

  nlohmann::json index;
  try {
    index = parse_json(read_file(path), path);
  } catch (const nlohmann::json::parse_error& e) {
    fail("safetensors index '", path, "': bad JSON: ", e.what());
  }
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
    fail("safetensors index '", path, "': expected an object with a \"weight_map\" object");

  const fs::path base = fs::path(path).parent_path();
  std::map<std::string, size_t> shard_ids;  // file name in the index -> index into shards_
  for (const auto& [name, file] : index["weight_map"].items()) {
    if (!file.is_string())
      fail("safetensors index '", path, "': weight_map['", name, "'] is a ", file.type_name(),
           ", not a file name");
    const std::string shard = file.get<std::string>();
    // Hugging Face writes shards beside the index; a name with a directory part ("../x",
    // "/etc/...") would make strata open files outside the model directory.
    if (shard.empty() || shard == "." || shard == ".." || shard.find('/') != std::string::npos)
      fail("safetensors index '", path, "': weight_map['", name, "'] = \"", shard,
           "\" is not a file name in the index's directory; shards must sit beside the index");
    auto [it, inserted] = shard_ids.emplace(shard, model.shards_.size());
    if (inserted) model.shards_.push_back(open_shard((base / shard).string(), path));
    const SafetensorsFile& f = model.shards_[it->second];
    if (!f.has(name))
      fail("safetensors index '", path, "' places tensor '", name, "' in '", f.path(),
           "', which does not contain it");
    model.where_[name] = it->second;
  }
  return model;
}

std::vector<std::string> ShardedSafetensors::names() const {
  std::vector<std::string> out;
  out.reserve(where_.size());
  for (const auto& [name, shard] : where_) out.push_back(name);
  return out;
}

const SafetensorsFile& ShardedSafetensors::shard_of(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end()) fail("'", source_, "': no tensor named '", name, "'");
  return shards_[it->second];
}

}  // namespace strata::io
