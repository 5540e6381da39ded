// The manifest of a prepared data folder (manifest.json): the tokenizer and every shard of each
// split with its token count and checksum, in the order the loader reads them. The prepare step
// writes it last, after every shard is in place, so a folder with a manifest is complete; the
// loader reads the shards it lists (not a directory listing) and checks each one against it.
//
//   {"format": "strata-shards", "version": 1, "vocab_size": V, "tokenizer": "tokenizer.json",
//    "splits": {"train": [{"file": "train_000.bin", "tokens": N, "xxh3": "<hex>"}, ...],
//               "val": [...]}}
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace strata::data {

struct ShardEntry {
  std::string file;  // relative to the folder
  int64_t tokens = 0;
  uint64_t xxh3 = 0;  // of the token bytes (after the 1024-byte header)
};

struct Manifest {
  int64_t vocab_size = 0;
  std::string tokenizer = "tokenizer.json";
  std::map<std::string, std::vector<ShardEntry>> splits;  // "train", "val"

  int64_t tokens(const std::string& split) const;
};

inline constexpr const char* kManifestFile = "manifest.json";

void write_manifest(const std::string& dir, const Manifest& manifest);  // atomic
// The folder's manifest, or nothing when it has none (a folder prepared before manifests).
// Throws naming the file and the key when it is unreadable.
std::optional<Manifest> read_manifest(const std::string& dir);

// How much of each shard the loader checks against the manifest: its size and token count
// always; with `checksums` also its XXH3 (reads every byte once: ~8 GB/s).
struct VerifyOptions {
  bool checksums = true;
};
// The shard paths of `split` in manifest order, each checked; throws naming the shard, what
// differs and what to do (re-run the prepare step).
std::vector<std::string> verified_shards(const std::string& dir, const Manifest& manifest,
                                         const std::string& split, const VerifyOptions& options);

// The shards a run reads from a prepared folder: those its manifest lists, verified; a folder
// prepared before manifests existed is read by its <split>_NNN.bin names instead.
struct PreparedShards {
  std::vector<std::string> train, val;
  bool from_manifest = false;
};
PreparedShards prepared_shards(const std::string& dir, const VerifyOptions& options);

// The XXH3 of a shard file's token bytes (what ShardEntry::xxh3 records).
uint64_t shard_checksum(const std::string& path);

}  // namespace strata::data
