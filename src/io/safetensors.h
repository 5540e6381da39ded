// Hugging Face safetensors (https://github.com/huggingface/safetensors): an 8-byte little-endian
// header length N, N bytes of JSON {name: {dtype, shape, data_offsets: [begin, end]},
// "__metadata__": {string: string}} padded with spaces to a multiple of 8, then the tensor bytes
// (offsets are relative to the end of the header). Files written here load in the Python library
// and vice versa (tests/io/check_safetensors_python.py).
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"
#include "io/fd.h"

namespace strata::io {

// A tensor to write: row-major, contiguous, little-endian bytes at `data`.
struct TensorRef {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  const void* data;
};

// Writes atomically (temp file, fsync, rename), streaming each tensor's bytes straight from
// `data` so that large checkpoints are never copied in memory. Tensors are laid out largest
// element first, as the reference writer does, so each one is aligned to its element size.
// Returns the xxHash64 of the file's bytes (for manifests) at no extra read.
uint64_t write_safetensors(const std::string& path, const std::vector<TensorRef>& tensors,
                           const std::map<std::string, std::string>& metadata = {});

struct TensorInfo {
  DType dtype;
  std::vector<int64_t> shape;
  size_t bytes;
  int64_t numel() const;
};

// An open, fully validated safetensors file; tensors are read on demand with pread, so opening a
// multi-GB file costs only its header. Every error names the file.
class SafetensorsFile {
 public:
  static SafetensorsFile open(const std::string& path);

  const std::string& path() const { return path_; }
  std::vector<std::string> names() const;  // sorted
  bool has(const std::string& name) const { return entries_.count(name) > 0; }
  TensorInfo info(const std::string& name) const;
  // Copies the tensor's bytes; dst_bytes must equal its size exactly.
  void read_into(const std::string& name, void* dst, size_t dst_bytes) const;
  // Also checks that dst (a contiguous CPU tensor) has the stored dtype and shape.
  void read_into(const std::string& name, const Tensor& dst) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // The safetensors spelling of the stored dtype, including dtypes strata cannot load ("I64").
  const std::string& dtype_name_of(const std::string& name) const;

 private:
  struct Entry {
    std::string dtype_name;
    bool supported = false;  // one of strata's DTypes; other valid dtypes fail only when used
    DType dtype = DType::f32;
    std::vector<int64_t> shape;
    uint64_t begin = 0, end = 0;  // relative to data_start_
  };
  const Entry& entry(const std::string& name) const;
  const Entry& supported_entry(const std::string& name) const;

  std::string path_;
  UniqueFd fd_;
  uint64_t data_start_ = 0;
  std::map<std::string, Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

// A model stored as Hugging Face saves it: either one model.safetensors, or shards listed in
// model.safetensors.index.json ({"weight_map": {tensor: shard file}}). Tensors are found by name
// across all shards.
class ShardedSafetensors {
 public:
  // `path`: an index .json, a single .safetensors file, or a directory holding either (the index
  // is preferred).
  static ShardedSafetensors open(const std::string& path);

  std::vector<std::string> names() const;  // sorted
  bool has(const std::string& name) const { return where_.count(name) > 0; }
  TensorInfo info(const std::string& name) const { return shard_of(name).info(name); }
  void read_into(const std::string& name, void* dst, size_t dst_bytes) const {
    shard_of(name).read_into(name, dst, dst_bytes);
  }
  void read_into(const std::string& name, const Tensor& dst) const {
    shard_of(name).read_into(name, dst);
  }
  const SafetensorsFile& shard_of(const std::string& name) const;
  size_t num_shards() const { return shards_.size(); }

 private:
  std::string source_;  // what open() was given, for messages
  std::vector<SafetensorsFile> shards_;
  std::map<std::string, size_t> where_;  // tensor name -> index into shards_
};

}  // namespace strata::io
