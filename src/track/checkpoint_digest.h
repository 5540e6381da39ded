// What the model registry knows about a checkpoint directory without the trainer: which
// directory a path means, its content hash, whether its bytes match its index, and a manifest
// of its files. Reads the checkpoint's own files only (index.json, state.json, the rank
// safetensors files; train/checkpoint.h writes them), so the track layer needs nothing above io.
//
// Content hash: two xxHash64 digests (seeds 0 and 1; 32 hex digits) of index.json's format and
// slice list in a canonical order: per slice its tensor name, global and block shapes, slice
// position, element range and the recorded checksum of its bytes (XXH64 in format v2, XXH3 in
// v3), sorted. It names the tensors' contents, not the files, so it survives copying and
// renaming; a checkpoint saved with another layout slices the same tensors differently and has
// another hash, and so does one saved in another format. The hash itself stays XXH64, so that
// the hashes the registry recorded for v2 checkpoints still name them.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace strata::registry {

// A checkpoint directory (with state.json), a ckpt directory with a `latest` file, or a run
// directory (RUN/ckpt/latest), resolved to the checkpoint directory; throws otherwise.
std::string resolve_checkpoint_dir(const std::string& path);

// RUN for RUN/ckpt/step_N when RUN/metrics.jsonl or RUN/config.json exists, else "".
std::string run_dir_of(const std::string& checkpoint_dir);

// The content hash of the checkpoint in `dir` from its index.json (reads no tensor bytes).
std::string content_hash(const std::string& dir);

// Reads every slice listed in index.json and checks its bytes against the recorded checksum
// (xxh3 or xxh64); throws naming the file and slice that differ, or a missing file.
void verify_slices(const std::string& dir);

// Every regular file under `dir` (relative path, sorted): {"files": [{"path", "bytes",
// "xxh64"}]}, the xxHash64 of each whole file. XXH64, not XXH3: the manifests the registry
// already holds record it, and `xxhsum` (XXH64 by default) checks a blob without strata.
nlohmann::json file_manifest(const std::string& dir);

// Checks the files under `dir` against a manifest: each present, of the recorded size and hash.
// `what` names the copy in messages ("registry blob model:v3"). Throws on the first mismatch.
void verify_manifest(const std::string& dir, const nlohmann::json& manifest,
                     const std::string& what);

// The xxHash64 (16 hex digits) of one whole file, streamed.
std::string file_xxh64(const std::string& path);

// What a run that resumed from (or was initialised from) the checkpoint in `dir` records in its
// own checkpoints' state.json (extra.lineage): {"resumed_from": dir, "step": its step,
// "ancestors": [its content hash, then its own ancestors...]} (at most 32 entries), so that the
// registry can name a registered ancestor as the parent of a later checkpoint. Never throws:
// a checkpoint it cannot read gives {"resumed_from": dir}.
nlohmann::json checkpoint_lineage(const std::string& dir);

}  // namespace strata::registry
