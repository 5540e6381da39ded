#include "train/checkpoint_slices.h"

#include <algorithm>
#include <filesystem>
#include <map>

#include "core/json.h"
#include "io/checksum.h"
#include "io/safetensors.h"

namespace strata {

namespace fs = std::filesystem;

namespace {

constexpr const char* kSlicesKey = "strata.slices";

// A contiguous stretch of a slice's elements that is also contiguous in the global tensor.
struct Run {
  int64_t global = 0;  // first global element (row-major in global_shape)
  int64_t local = 0;   // offset from the slice's first element
  int64_t count = 0;
};

// The runs of a slice, in increasing global order (a block with one sharded dimension maps
// row-major local order onto increasing global order).
std::vector<Run> runs_of(const SliceEntry& e) {
  std::vector<Run> runs;
  if (e.count <= 0) return runs;
  const int ndim = static_cast<int>(e.block_shape.size());
  if (e.slice_dim < 0) {
    runs.push_back(Run{e.begin, 0, e.count});
    return runs;
  }
  int64_t inner = 1;
  for (int k = e.slice_dim + 1; k < ndim; ++k) inner *= e.block_shape[k];
  const int64_t extent = e.block_shape[e.slice_dim] * inner;  // contiguous in both
  const int64_t global_dim = e.global_shape[e.slice_dim];
  for (int64_t i = e.begin; i < e.begin + e.count;) {
    const int64_t outer = i / extent, rest = i % extent;
    const int64_t n = std::min(extent - rest, e.begin + e.count - i);
    runs.push_back(Run{outer * global_dim * inner + e.slice_begin * inner + rest, i - e.begin, n});
    i += n;
  }
  return runs;
}

std::string slice_key(const SliceEntry& e) {
  return cat(e.tensor, "@", e.slice_dim, ":", e.slice_begin, "/", e.begin);
}

uint64_t checksum_of(io::Checksum algorithm, const float* data, int64_t count) {
  return io::checksum(algorithm, data, static_cast<size_t>(count) * sizeof(float));
}

}  // namespace

nlohmann::json slice_to_json(const SliceEntry& e) {
  return {{"tensor", e.tensor},
          {"global_shape", e.global_shape},
          {"block_shape", e.block_shape},
          {"slice_dim", e.slice_dim},
          {"slice_begin", e.slice_begin},
          {"begin", e.begin},
          {"count", e.count},
          {"file", e.file},
          {"key", e.key},
          {io::checksum_name(e.checksum_algorithm), io::hex64(e.checksum)}};
}

namespace {

// Integers are checked to be integers: nlohmann's get<int64_t> of a float (1e308) is an
// out-of-range cast, undefined behaviour (found by fuzz_checkpoint_index under UBSan).
int64_t integer_field(const nlohmann::json& j, const char* key) {
  const nlohmann::json& v = j.at(key);
  STRATA_CHECK(v.is_number_integer(), "'", key, "' is ", v.dump(), ", not an integer");
  return v.get<int64_t>();
}

std::vector<int64_t> shape_field(const nlohmann::json& j, const char* key) {
  const nlohmann::json& v = j.at(key);
  STRATA_CHECK(v.is_array(), "'", key, "' is ", v.dump(), ", not a list of integers");
  std::vector<int64_t> shape;
  for (const nlohmann::json& d : v) {
    STRATA_CHECK(d.is_number_integer(), "'", key, "' is ", v.dump(), ", not a list of integers");
    shape.push_back(d.get<int64_t>());
  }
  return shape;
}

}  // namespace

SliceEntry slice_from_json(const nlohmann::json& j) {
  SliceEntry e;
  int64_t slice_dim = 0;
  try {
    e.tensor = j.at("tensor").get<std::string>();
    e.global_shape = shape_field(j, "global_shape");
    e.block_shape = shape_field(j, "block_shape");
    slice_dim = integer_field(j, "slice_dim");
    e.slice_begin = integer_field(j, "slice_begin");
    e.begin = integer_field(j, "begin");
    e.count = integer_field(j, "count");
    e.file = j.at("file").get<std::string>();
    e.key = j.at("key").get<std::string>();
    const io::RecordedChecksum sum = io::recorded_checksum(j);
    e.checksum = sum.value;
    e.checksum_algorithm = sum.algorithm;
  } catch (const std::exception& ex) {
    fail("checkpoint index: malformed slice entry ", j.dump(), " (", ex.what(), ")");
  }
  // What load_slices and runs_of rely on, checked without overflow (the entry comes from a file):
  // a block of the global tensor cut along at most one dimension, a range inside the block, and a
  // file beside the index.
  const auto ndim = static_cast<int64_t>(e.block_shape.size());
  bool ok = ndim == static_cast<int64_t>(e.global_shape.size()) && slice_dim >= -1 &&
            slice_dim < ndim && e.begin >= 0 && e.count >= 0;
  e.slice_dim = ok ? static_cast<int>(slice_dim) : -1;
  int64_t block = 1, global = 1;
  for (int64_t k = 0; ok && k < ndim; ++k) {
    const int64_t b = e.block_shape[k], g = e.global_shape[k];
    ok = b >= 0 && g >= 0 && !__builtin_mul_overflow(block, b, &block) &&
         !__builtin_mul_overflow(global, g, &global) &&
         (k == e.slice_dim ? e.slice_begin >= 0 && e.slice_begin <= g && b <= g - e.slice_begin
                           : b == g);
  }
  ok = ok && e.count <= block - e.begin && !e.file.empty() && e.file != "." && e.file != ".." &&
       e.file.find('/') == std::string::npos;
  STRATA_CHECK(ok, "checkpoint index: inconsistent slice entry ", j.dump());
  return e;
}

SliceEntry block_of(const ParamInfo& p, const std::string& kind, int64_t begin, int64_t count) {
  SliceEntry e;
  e.tensor = kind + p.name;
  e.block_shape.assign(p.shape.begin(), p.shape.begin() + p.ndim);
  e.global_shape.assign(p.global_shape.begin(), p.global_shape.begin() + p.ndim);
  e.slice_dim = p.slice.dim;
  e.slice_begin = p.slice.dim < 0 ? 0 : p.slice.begin;
  e.begin = begin;
  e.count = count;
  return e;
}

std::vector<SliceEntry> write_slice_file(const std::string& path,
                                         const std::vector<SliceSource>& sources) {
  std::vector<SliceEntry> entries;
  std::vector<io::TensorRef> refs;
  entries.reserve(sources.size());
  refs.reserve(sources.size());
  nlohmann::json list = nlohmann::json::array();
  for (const SliceSource& s : sources) {
    SliceEntry e = s.entry;
    e.file = fs::path(path).filename().string();
    e.key = slice_key(e);
    e.checksum_algorithm = kSliceChecksum;
    e.checksum = checksum_of(e.checksum_algorithm, s.data, e.count);
    refs.push_back(io::TensorRef{e.key, DType::f32, {e.count}, s.data});
    list.push_back(slice_to_json(e));
    entries.push_back(std::move(e));
  }
  io::write_safetensors(path, refs, {{"format", "strata-slices"}, {kSlicesKey, list.dump()}});
  return entries;
}

std::vector<SliceEntry> read_slice_file_entries(const std::string& path) {
  std::vector<SliceEntry> entries;
  try {
    const io::SafetensorsFile file = io::SafetensorsFile::open(path);
    const auto it = file.metadata().find(kSlicesKey);
    STRATA_CHECK(it != file.metadata().end(), "'", path, "' has no slice list");
    for (const nlohmann::json& j : parse_json(it->second, path))
      entries.push_back(slice_from_json(j));
  } catch (const std::exception& e) {
    throw CheckpointCorrupt(path, e.what());
  }
  return entries;
}

void load_slices(const std::string& dir, const std::vector<SliceEntry>& entries,
                 const std::vector<SliceTarget>& targets) {
  std::map<std::string, std::vector<const SliceEntry*>> by_tensor;
  for (const SliceEntry& e : entries) by_tensor[e.tensor].push_back(&e);
  // Per target: its runs, and how many of its elements have been filled.
  struct Want {
    const SliceTarget* target;
    std::vector<Run> runs;
    int64_t filled = 0;
  };
  std::map<std::string, std::vector<Want>> wants;
  for (const SliceTarget& t : targets) {
    const auto it = by_tensor.find(t.block.tensor);
    STRATA_CHECK(it != by_tensor.end(), "checkpoint '", dir, "' has no tensor '", t.block.tensor,
                 "': it was saved from a different model; check model.* in the config");
    STRATA_CHECK(it->second.front()->global_shape == t.block.global_shape, "checkpoint '", dir,
                 "': tensor '", t.block.tensor,
                 "' has a different shape than this model's; check model.* in the config");
    wants[t.block.tensor].push_back(Want{&t, runs_of(t.block), 0});
  }
  std::map<std::string, io::SafetensorsFile> files;
  auto open = [&](const std::string& name) -> const io::SafetensorsFile& {
    auto it = files.find(name);
    if (it != files.end()) return it->second;
    const std::string path = (fs::path(dir) / name).string();
    try {
      return files.emplace(name, io::SafetensorsFile::open(path)).first->second;
    } catch (const std::exception& e) {
      throw CheckpointCorrupt(path, e.what());
    }
  };
  std::vector<float> buf;
  for (auto& [tensor, list] : wants) {
    for (const SliceEntry* s : by_tensor[tensor]) {
      const std::vector<Run> src = runs_of(*s);
      if (src.empty()) continue;
      const int64_t lo = src.front().global, hi = src.back().global + src.back().count;
      bool needed = false;
      for (const Want& w : list)
        for (const Run& r : w.runs) needed |= r.global < hi && r.global + r.count > lo;
      if (!needed) continue;
      const io::SafetensorsFile& file = open(s->file);
      // The size stored in the file, before allocating what the index claims.
      try {
        const size_t stored = file.info(s->key).bytes;
        STRATA_CHECK(stored == static_cast<size_t>(s->count) * sizeof(float), "slice '", s->key,
                     "' holds ", stored, " bytes but the index lists ", s->count, " floats");
      } catch (const std::exception& e) {
        throw CheckpointCorrupt(file.path(), e.what());
      }
      buf.assign(static_cast<size_t>(s->count), 0.0f);
      try {
        file.read_into(s->key, buf.data(), buf.size() * sizeof(float));
      } catch (const std::exception& e) {
        throw CheckpointCorrupt(file.path(), e.what());
      }
      if (checksum_of(s->checksum_algorithm, buf.data(), s->count) != s->checksum)
        throw CheckpointCorrupt(file.path(), cat("checkpoint file '", file.path(), "': slice '",
                                                 s->key, "' does not match its checksum"));
      // Both run lists increase in global order: one merge per target.
      for (Want& w : list) {
        size_t a = 0, b = 0;
        while (a < w.runs.size() && b < src.size()) {
          const Run& t = w.runs[a];
          const Run& r = src[b];
          const int64_t from = std::max(t.global, r.global);
          const int64_t to = std::min(t.global + t.count, r.global + r.count);
          if (from < to) {
            std::copy_n(buf.data() + r.local + (from - r.global), to - from,
                        w.target->dst + t.local + (from - t.global));
            w.filled += to - from;
          }
          if (t.global + t.count <= r.global + r.count)
            ++a;
          else
            ++b;
        }
      }
    }
  }
  // Overlapping slices (replicas saved twice) may fill an element more than once; a gap would
  // leave the count short.
  for (const auto& [tensor, list] : wants)
    for (const Want& w : list)
      STRATA_CHECK(w.filled >= w.target->block.count, "checkpoint '", dir, "': tensor '", tensor,
                   "' is not completely stored (", w.filled, " of ", w.target->block.count,
                   " elements of this rank's part found); the checkpoint is incomplete");
}

}  // namespace strata
