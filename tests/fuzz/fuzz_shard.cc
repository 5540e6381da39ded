// libFuzzer target: a token shard (data::read_shard). The input is the file. A shard the reader
// accepts has exactly the tokens its header counts, each inside the vocabulary it was checked
// against.
#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "data/shard.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace strata;
  const std::string path = fuzz::write_scratch(
      "train_000.bin", std::string_view(reinterpret_cast<const char*>(data), size));
  // GPT-2's vocabulary (uint16 shards) and a larger one (uint32 shards): 100000 > 65535.
  for (const int64_t vocab : {int64_t{50257}, int64_t{100000}}) {
    try {
      const std::vector<int32_t> tokens = data::read_shard(path, vocab);
      FUZZ_CHECK(data::kShardHeaderBytes + static_cast<int64_t>(tokens.size()) * 2 <=
                 static_cast<int64_t>(size));
      for (const int32_t t : tokens) FUZZ_CHECK(t >= 0 && t < vocab);
    } catch (const Error&) {
    }
  }
  try {
    const data::Shard shard(path, 0);  // no vocabulary check
    std::vector<int32_t> tail(static_cast<size_t>(std::min<int64_t>(shard.size(), 16)));
    shard.copy(shard.size() - static_cast<int64_t>(tail.size()), static_cast<int64_t>(tail.size()),
               tail.data());
    FUZZ_CHECK(data::kShardHeaderBytes + shard.byte_size() == static_cast<int64_t>(size));
  } catch (const Error&) {
  }
  return 0;
}
