// libFuzzer target: one safetensors file (io::SafetensorsFile). The input is the file. Every tensor
// the reader accepts must lie inside the file (so reading it allocates no more than the file
// holds) and its bytes must match its dtype and shape; each one is read.
#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "fuzz_util.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace strata;
  const std::string path = fuzz::write_scratch(
      "model.safetensors", std::string_view(reinterpret_cast<const char*>(data), size));
  try {
    const io::SafetensorsFile file = io::SafetensorsFile::open(path);
    uint64_t total = 0;
    for (const std::string& name : file.names()) {
      FUZZ_CHECK(!file.dtype_name_of(name).empty());
      io::TensorInfo info{};
      try {
        info = file.info(name);
      } catch (const Error&) {
        continue;  // a dtype strata does not load (I64, F64, ...): named when used
      }
      total += info.bytes;
      FUZZ_CHECK(total <= size);  // tensors do not overlap and stay inside the file
      FUZZ_CHECK(static_cast<uint64_t>(info.numel()) * dtype_size(info.dtype) == info.bytes);
      std::vector<unsigned char> bytes(info.bytes);
      file.read_into(name, bytes.data(), bytes.size());
    }
    for (const auto& [key, value] : file.metadata()) FUZZ_CHECK(key.size() + value.size() <= size);
  } catch (const Error&) {
  }
  return 0;
}
