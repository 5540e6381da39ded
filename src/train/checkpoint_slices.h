// Checkpoint slices: the unit a rank saves and any layout loads.
//
// A slice is a flat element range [begin, begin + count) of one rank's block of a global tensor.
// The block is where tensor parallelism put the rank's local tensor in the global one (one
// sharded dimension, ParamInfo::slice); the flat range is what ZeRO gave the rank of that block
// (the whole block when nothing is sharded). Every element of every global tensor is covered by
// at least one slice of a checkpoint, so a loader with any other (tp, pp, dp, zero) can build its
// own blocks and ranges from them, whatever the layout that saved them.
//
// On disk: one safetensors file per saving rank (rank_NNNNN.safetensors), one 1-D f32 tensor per
// slice, and the slice geometry with a checksum of each slice's bytes in index.json, which the
// commit writes from the rank files' headers (metadata "strata.slices"). The checksum's key names
// its algorithm: "xxh3" (XXH3 64-bit) in the checkpoints written now (format v3), "xxh64" in
// format v2's; both load.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/checksum.h"
#include "model/params.h"

namespace strata {

// What write_slice_file records for each slice (format v3; v2's checkpoints have xxh64).
inline constexpr io::Checksum kSliceChecksum = io::Checksum::xxh3;

struct SliceEntry {
  std::string tensor;  // "<kind><global name>": "", "exp_avg." or "exp_avg_sq." + parameter name
  std::vector<int64_t> global_shape;
  std::vector<int64_t> block_shape;  // the local tensor this range is cut from
  int slice_dim = -1;                // the block's sharded dimension (-1: the whole tensor)
  int64_t slice_begin = 0;           // the block's first index along slice_dim
  int64_t begin = 0, count = 0;      // flat element range within the block (row-major)
  std::string file, key;             // where the bytes are stored
  uint64_t checksum = 0;             // of the slice's bytes, with checksum_algorithm
  io::Checksum checksum_algorithm = kSliceChecksum;
};

nlohmann::json slice_to_json(const SliceEntry& e);
SliceEntry slice_from_json(const nlohmann::json& j);  // throws naming the bad field

// The geometry of a parameter's local block, as a slice entry (tensor = kind + name).
SliceEntry block_of(const ParamInfo& p, const std::string& kind, int64_t begin, int64_t count);

// A slice to write, with its bytes.
struct SliceSource {
  SliceEntry entry;
  const float* data = nullptr;
};

// Writes `sources` into one safetensors file at `path` (atomically, fsynced); returns the entries
// with file (the file name only), key and checksum filled in.
std::vector<SliceEntry> write_slice_file(const std::string& path,
                                         const std::vector<SliceSource>& sources);

// The entries a slice file records (its metadata), for building the index.
std::vector<SliceEntry> read_slice_file_entries(const std::string& path);

// A checkpoint whose bytes cannot be trusted: a missing, truncated or corrupt file. `file` names
// it, so that the loader can say which one before falling back to an older checkpoint.
class CheckpointCorrupt : public Error {
 public:
  CheckpointCorrupt(std::string file, const std::string& what)
      : Error(what), file_(std::move(file)) {}
  const std::string& file() const { return file_; }

 private:
  std::string file_;
};

// What a rank wants from a checkpoint: elements [begin, begin + count) of its block of a tensor,
// written to dst.
struct SliceTarget {
  SliceEntry block;  // tensor, shapes, slice position, begin, count (file/key unused)
  float* dst = nullptr;
};

// Fills every target from the slices `entries` (stored under dir), reading only the slices that
// overlap a target and checking each one's checksum first. Throws CheckpointCorrupt naming the
// file for a missing, truncated or corrupt slice, and an Error naming the tensor when a target
// asks for elements no slice holds (a checkpoint of another model).
void load_slices(const std::string& dir, const std::vector<SliceEntry>& entries,
                 const std::vector<SliceTarget>& targets);

}  // namespace strata
