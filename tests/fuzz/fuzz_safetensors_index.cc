// libFuzzer target: a sharded model (io::ShardedSafetensors), model.safetensors.index.json and its
// shards. The input is the index, then up to three shard files, separated by kPartSeparator lines
// (fuzz_util.h); the shards are written as model-0000<k>-of-00003.safetensors, the names the seeds'
// weight_maps use. Every tensor found must be readable, from inside its shard.
#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "fuzz_util.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace strata;
  fuzz::clear_scratch();
  const auto parts =
      fuzz::split_parts(std::string_view(reinterpret_cast<const char*>(data), size), 4);
  fuzz::write_scratch("model.safetensors.index.json", parts[0]);
  for (size_t k = 1; k < parts.size(); ++k)
    fuzz::write_scratch("model-0000" + std::to_string(k) + "-of-00003.safetensors", parts[k]);
  try {
    const io::ShardedSafetensors model = io::ShardedSafetensors::open(fuzz::scratch_dir());
    FUZZ_CHECK(model.num_shards() <= parts.size() - 1);
    for (const std::string& name : model.names()) {
      const io::SafetensorsFile& shard = model.shard_of(name);
      FUZZ_CHECK(shard.has(name));
      // Only files the input wrote, inside the model directory.
      FUZZ_CHECK(shard.path().rfind(fuzz::scratch_dir() + "/model-0000", 0) == 0);
      io::TensorInfo info{};
      try {
        info = model.info(name);
      } catch (const Error&) {
        continue;  // a dtype strata does not load
      }
      FUZZ_CHECK(info.bytes <= size);
      std::vector<unsigned char> bytes(info.bytes);
      model.read_into(name, bytes.data(), bytes.size());
    }
  } catch (const Error&) {
  }
  return 0;
}
