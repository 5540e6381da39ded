// libFuzzer target: a checkpoint's index.json (parse_checkpoint_index, what read_checkpoint_index
// reads). The input is the file. Every slice entry accepted must describe a range inside its block
// and name a file inside the checkpoint directory (load_slices trusts both).
#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "fuzz_util.h"
#include "train/checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace strata;
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    for (const SliceEntry& e : parse_checkpoint_index(text, "ckpt/index.json")) {
      const auto ndim = static_cast<int64_t>(e.block_shape.size());
      FUZZ_CHECK(static_cast<int64_t>(e.global_shape.size()) == ndim);
      FUZZ_CHECK(e.slice_dim >= -1 && e.slice_dim < ndim);
      int64_t numel = 1;
      for (int64_t i = 0; i < ndim; ++i) {
        FUZZ_CHECK(e.block_shape[i] >= 0 && e.global_shape[i] >= 0);
        FUZZ_CHECK(!__builtin_mul_overflow(numel, e.block_shape[i], &numel));
      }
      if (e.slice_dim >= 0) {
        const int64_t d = e.block_shape[e.slice_dim], g = e.global_shape[e.slice_dim];
        FUZZ_CHECK(e.slice_begin >= 0 && e.slice_begin <= g && d <= g - e.slice_begin);
      }
      FUZZ_CHECK(e.begin >= 0 && e.count >= 0 && e.count <= numel - e.begin);
      FUZZ_CHECK(!e.file.empty() && e.file.find('/') == std::string::npos && e.file != "..");
    }
  } catch (const Error&) {
  }
  return 0;
}
