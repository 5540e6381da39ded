#include <algorithm>
#include <bit>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/checksum.h"
#include "io/safetensors.h"

namespace strata::io {

namespace {

static_assert(std::endian::native == std::endian::little,
              "safetensors stores little-endian data; a big-endian host would need byte swaps");

size_t checked_bytes(const TensorRef& t, const std::string& path) {
  uint64_t n = dtype_size(t.dtype);
  for (int64_t d : t.shape) {
    STRATA_CHECK(d >= 0, "cannot write '", path, "': tensor '", t.name, "' has negative dimension ",
                 d);
    STRATA_CHECK(!__builtin_mul_overflow(n, static_cast<uint64_t>(d), &n), "cannot write '", path,
                 "': tensor '", t.name, "' is too large");
  }
  return n;
}

// Hashes what it writes, so the caller gets the file's checksum without reading it back.
struct HashingWriter {
  AtomicWriter file;
  XxHash64 hash;
  void write(const void* data, size_t size) {
    file.write(data, size);
    hash.update(data, size);
  }
};

}  // namespace

uint64_t write_safetensors(const std::string& path, const std::vector<TensorRef>& tensors,
                           const std::map<std::string, std::string>& metadata) {
  std::set<std::string> seen;
  std::vector<size_t> bytes(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorRef& t = tensors[i];
    STRATA_CHECK(!t.name.empty(), "cannot write '", path, "': tensor ", i, " has an empty name");
    STRATA_CHECK(t.name != "__metadata__", "cannot write '", path,
                 "': '__metadata__' is reserved and cannot name a tensor");
    STRATA_CHECK(seen.insert(t.name).second, "cannot write '", path, "': tensor name '", t.name,
                 "' appears twice");
    bytes[i] = checked_bytes(t, path);
    STRATA_CHECK(t.data != nullptr || bytes[i] == 0, "cannot write '", path, "': tensor '", t.name,
                 "' has no data");
  }

  // Largest elements first (stable, so equal sizes keep the caller's order): the data section
  // starts 8-aligned, so every tensor lands on a multiple of its element size.
  std::vector<size_t> order(tensors.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return dtype_size(tensors[a].dtype) > dtype_size(tensors[b].dtype);
  });

  // ordered_json keeps __metadata__ first and tensors in data order, like the reference writer.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (size_t i : order) {
    const TensorRef& t = tensors[i];
    header[t.name] = {{"dtype", std::string(dtype_name(t.dtype))},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + bytes[i]}}};
    offset += bytes[i];
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {  // names and metadata must be valid UTF-8
    fail("cannot write '", path, "': header is not valid JSON text: ", e.what());
  }
  text.append((8 - text.size() % 8) % 8, ' ');

  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(uint64_t{text.size()} >> (8 * i));
  HashingWriter out{AtomicWriter(path), XxHash64()};
  out.write(len, sizeof len);
  out.write(text.data(), text.size());
  for (size_t i : order) out.write(tensors[i].data, bytes[i]);
  out.file.commit();
  return out.hash.finish();
}

}  // namespace strata::io
