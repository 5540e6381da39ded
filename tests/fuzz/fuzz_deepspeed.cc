// libFuzzer target: a DeepSpeed JSON config (read_deepspeed), applied to a small TOML config as
// `strata train --deepspeed` does (load_config_with_deepspeed, resolve_deepspeed_batch at a few
// world sizes). The input is the JSON file.
#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "fuzz_util.h"
#include "run/deepspeed_config.h"

namespace {
constexpr const char* kToml = R"(
[model]
family = "gpt2"
n_layer = 2
n_head = 2
d_model = 64
vocab_size = 256
max_seq_len = 64
[train]
steps = 10
batch_size = 2
seq_len = 32
[optim]
lr = 1e-3
min_lr = 1e-4
[data]
source = "synthetic"
)";
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace strata;
  static const std::string toml_path = fuzz::write_scratch("config.toml", kToml);
  const std::string path =
      fuzz::write_scratch("ds.json", std::string_view(reinterpret_cast<const char*>(data), size));
  try {
    const DeepSpeedConfig ds = read_deepspeed(path);
    (void)describe_deepspeed(ds);
    RunConfig config = load_config_with_deepspeed(toml_path, ds, {});
    for (const int64_t world : {1, 4}) {
      RunConfig c = config;
      try {
        resolve_deepspeed_batch(c, ds, {}, world);
        FUZZ_CHECK(c.train.batch_size > 0 && c.train.grad_accum > 0);
      } catch (const Error&) {
      }
    }
  } catch (const Error&) {
  }
  return 0;
}
