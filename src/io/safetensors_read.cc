#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <nlohmann/json.hpp>
#include <set>
#include <string_view>

#include "core/error.h"
#include "core/json.h"
#include "io/safetensors.h"

namespace strata::io {

namespace {

// The reference implementation refuses larger headers too; it bounds what a corrupt length field
// can make us allocate.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

// Every dtype the format defines, with its element size, so that files holding dtypes strata does
// not compute in (I64 position ids, F64 buffers) still open and validate; those tensors fail only
// when read.
int64_t safetensors_dtype_size(std::string_view name) {
  static const std::pair<std::string_view, int64_t> kSizes[] = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"F8_E8M0", 1},
      {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},     {"U32", 4},
      {"F32", 4},  {"F64", 8}, {"I64", 8}, {"U64", 8},     {"C64", 8}};
  for (const auto& [n, size] : kSizes)
    if (n == name) return size;
  return 0;
}

bool strata_dtype(std::string_view name, DType* out) {
  for (DType t : {DType::f32, DType::bf16, DType::f16, DType::i32, DType::u16}) {
    if (dtype_name(t) == name) {
      *out = t;
      return true;
    }
  }
  return false;
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

template <typename... Args>
[[noreturn]] void bad(const std::string& path, const Args&... args) {
  fail("safetensors file '", path, "': ", args...);
}

// nlohmann keeps the last of repeated keys silently; a header that names a tensor twice is corrupt
// (or ambiguous), so repeats are caught while parsing.
nlohmann::json parse_header(const std::string& path, const std::string& text) {
  std::vector<std::set<std::string>> open_objects;
  std::string duplicate;
  bool duplicate_is_tensor = false;
  auto on_event = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    using E = nlohmann::json::parse_event_t;
    // A header nests 3 levels; deep nesting would overflow the stack when copied or printed
    // (core/json.h).
    if ((event == E::object_start || event == E::array_start) && depth >= kMaxJsonDepth)
      bad(path, "the JSON header nests deeper than ", kMaxJsonDepth, " levels: corrupt");
    if (event == E::object_start) {
      open_objects.emplace_back();
    } else if (event == E::object_end) {
      open_objects.pop_back();
    } else if (event == E::key && !open_objects.empty()) {
      const std::string& key = parsed.get_ref<const std::string&>();
      if (!open_objects.back().insert(key).second && duplicate.empty()) {
        duplicate = key;
        duplicate_is_tensor = open_objects.size() == 1;
      }
    }
    return true;
  };
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text, on_event);
  } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range: 1e999
    bad(path, "bad JSON header: ", e.what());
  }
  if (!duplicate.empty()) {
    if (duplicate_is_tensor) bad(path, "duplicate tensor name '", duplicate, "' in the header");
    bad(path, "duplicate key '", duplicate, "' in the header");
  }
  if (!header.is_object())
    bad(path, "the JSON header is a ", header.type_name(), ", not an object");
  return header;
}

}  // namespace

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  SafetensorsFile f;
  f.path_ = path;
  f.fd_ = UniqueFd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!f.fd_.valid()) {
    const int err = errno;
    fail("cannot open safetensors file '", path, "': ", errno_text(err));
  }
  struct stat st {};
  if (::fstat(f.fd_.get(), &st) != 0) {
    const int err = errno;
    bad(path, errno_text(err));
  }
  if (S_ISDIR(st.st_mode)) bad(path, "it is a directory");
  const uint64_t file_size = static_cast<uint64_t>(st.st_size);
  if (file_size < 8)
    bad(path, "truncated: ", file_size, " bytes, fewer than the 8-byte header length field");

  unsigned char len_bytes[8];
  if (int err = pread_exact(f.fd_.get(), len_bytes, 8, 0))
    bad(path,
        "cannot read the header length: ", err < 0 ? "unexpected end of file" : errno_text(err));
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | len_bytes[i];
  if (header_len > file_size - 8)
    bad(path, "header length ", header_len, " runs past the end of the file (", file_size,
        " bytes): truncated, or not a safetensors file");
  if (header_len > kMaxHeaderBytes)
    bad(path, "header length ", header_len, " exceeds the ", kMaxHeaderBytes, "-byte limit");

  std::string text(header_len, '\0');
  if (int err = pread_exact(f.fd_.get(), text.data(), text.size(), 8))
    bad(path, "cannot read the header: ", err < 0 ? "unexpected end of file" : errno_text(err));
  const nlohmann::json header = parse_header(path, text);

  f.data_start_ = 8 + header_len;
  const uint64_t data_len = file_size - f.data_start_;
  for (const auto& [name, value] : header.items()) {
    if (name == "__metadata__") {
      if (!value.is_object()) bad(path, "__metadata__ must be an object of strings");
      for (const auto& [key, v] : value.items()) {
        if (!v.is_string())
          bad(path, "__metadata__ value '", key, "' is a ", v.type_name(), ", not a string");
        f.metadata_[key] = v.get<std::string>();
      }
      continue;
    }
    const std::string where = cat("tensor '", name, "': ");
    if (!value.is_object()) bad(path, where, "entry is a ", value.type_name(), ", not an object");
    for (const char* field : {"dtype", "shape", "data_offsets"})
      if (!value.contains(field)) bad(path, where, "missing '", field, "'");

    Entry e;
    const auto& dtype = value["dtype"];
    if (!dtype.is_string()) bad(path, where, "dtype is a ", dtype.type_name(), ", not a string");
    e.dtype_name = dtype.get<std::string>();
    const int64_t elem = safetensors_dtype_size(e.dtype_name);
    if (elem == 0) bad(path, where, "unknown dtype '", e.dtype_name, "'");
    e.supported = strata_dtype(e.dtype_name, &e.dtype);

    const auto& shape = value["shape"];
    if (!shape.is_array()) bad(path, where, "shape is a ", shape.type_name(), ", not an array");
    uint64_t expected = static_cast<uint64_t>(elem);
    for (const auto& d : shape) {
      if (!d.is_number_unsigned())
        bad(path, where, "shape ", shape.dump(), " must hold non-negative integers");
      const uint64_t dim = d.get<uint64_t>();
      if (dim > static_cast<uint64_t>(INT64_MAX) ||
          __builtin_mul_overflow(expected, dim, &expected))
        bad(path, where, "shape ", shape.dump(), " is too large");
      e.shape.push_back(static_cast<int64_t>(dim));
    }

    const auto& offsets = value["data_offsets"];
    if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
        !offsets[1].is_number_unsigned())
      bad(path, where, "data_offsets ", offsets.dump(), " must be [begin, end] byte offsets");
    e.begin = offsets[0].get<uint64_t>();
    e.end = offsets[1].get<uint64_t>();
    if (e.end < e.begin)
      bad(path, where, "data_offsets ", offsets.dump(), " end before they begin");
    if (e.end > data_len)
      bad(path, where, "data_offsets ", offsets.dump(), " run past the ", data_len,
          "-byte data section: the file is truncated or the offsets are wrong");
    if (e.end - e.begin != expected)
      bad(path, where, "shape ", shape_str(e.shape), " of ", e.dtype_name, " needs ", expected,
          " bytes but data_offsets ", offsets.dump(), " span ", e.end - e.begin);
    f.entries_.emplace(name, std::move(e));
  }

  // The tensors must tile the data section exactly: no overlaps (two names sharing bytes), no
  // gaps and no trailing bytes (unaccounted bytes mean a mangled header).
  std::vector<std::pair<const std::string*, const Entry*>> by_offset;
  for (const auto& [name, e] : f.entries_) by_offset.emplace_back(&name, &e);
  std::sort(by_offset.begin(), by_offset.end(), [](const auto& a, const auto& b) {
    return std::pair(a.second->begin, a.second->end) < std::pair(b.second->begin, b.second->end);
  });
  uint64_t covered = 0;
  const std::string* previous = nullptr;
  for (const auto& [name, e] : by_offset) {
    if (e->begin < covered)
      bad(path, "tensor '", *name, "' [", e->begin, ", ", e->end, ") overlaps tensor '", *previous,
          "', which ends at ", covered);
    if (e->begin > covered)
      bad(path, "data bytes [", covered, ", ", e->begin, ") before tensor '", *name,
          "' belong to no tensor");
    covered = e->end;
    previous = name;
  }
  if (covered != data_len)
    bad(path, "the last ", data_len - covered, " of ", data_len, " data bytes belong to no tensor");
  return f;
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  out.reserve(entries_.size());
  for (const auto& [name, e] : entries_) out.push_back(name);
  return out;
}

const SafetensorsFile::Entry& SafetensorsFile::entry(const std::string& name) const {
  auto it = entries_.find(name);
  if (it == entries_.end())
    bad(path_, "no tensor named '", name, "' (the file has ", entries_.size(), ")");
  return it->second;
}

const SafetensorsFile::Entry& SafetensorsFile::supported_entry(const std::string& name) const {
  const Entry& e = entry(name);
  if (!e.supported)
    bad(path_, "tensor '", name, "' has dtype ", e.dtype_name,
        ", which strata cannot load (F32, BF16, F16, I32 or U16)");
  return e;
}

const std::string& SafetensorsFile::dtype_name_of(const std::string& name) const {
  return entry(name).dtype_name;
}

TensorInfo SafetensorsFile::info(const std::string& name) const {
  const Entry& e = supported_entry(name);
  return TensorInfo{e.dtype, e.shape, static_cast<size_t>(e.end - e.begin)};
}

void SafetensorsFile::read_into(const std::string& name, void* dst, size_t dst_bytes) const {
  const Entry& e = supported_entry(name);
  const uint64_t size = e.end - e.begin;
  if (dst_bytes != size)
    bad(path_, "tensor '", name, "' (", e.dtype_name, " ", shape_str(e.shape), ") has ", size,
        " bytes but the destination has ", dst_bytes);
  if (int err = pread_exact(fd_.get(), dst, size, data_start_ + e.begin))
    bad(path_, "cannot read tensor '", name, "': ",
        err < 0 ? "unexpected end of file (was it truncated after opening?)" : errno_text(err));
}

void SafetensorsFile::read_into(const std::string& name, const Tensor& dst) const {
  const Entry& e = supported_entry(name);
  if (dst.device != Device::cpu) bad(path_, "tensor '", name, "': destination is not on the CPU");
  if (!dst.contiguous()) bad(path_, "tensor '", name, "': destination is not contiguous");
  if (dst.dtype != e.dtype)
    bad(path_, "tensor '", name, "' is ", e.dtype_name, " but the destination is ",
        dtype_name(dst.dtype));
  const std::vector<int64_t> dst_shape(dst.shape.begin(), dst.shape.begin() + dst.ndim);
  if (dst_shape != e.shape)
    bad(path_, "tensor '", name, "' has shape ", shape_str(e.shape), " but the destination has ",
        shape_str(dst_shape));
  read_into(name, dst.data, dst.bytes());
}

}  // namespace strata::io
