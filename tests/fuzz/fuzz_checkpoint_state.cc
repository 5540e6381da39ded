// libFuzzer target: a checkpoint's state.json (parse_checkpoint_state, what read_checkpoint_state
// reads), then what a resume does with it: the run config (config_from_json, as `strata generate`
// reads it), the loader position and the loss scaler state.
#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "data/loader.h"
#include "fuzz_util.h"
#include "optim/loss_scaler.h"
#include "run/config.h"
#include "train/checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace strata;
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const CheckpointState state = parse_checkpoint_state(text, "ckpt/state.json");
    FUZZ_CHECK(state.step >= 0);
    try {
      (void)config_from_json(state.config);
    } catch (const Error&) {
    }
    if (!state.data.is_null() && !state.data.empty()) {
      try {
        data::LoaderState position;
        from_json(state.data, position);
      } catch (const Error&) {
      }
    }
    if (state.extra.is_object() && state.extra.contains("loss_scaler")) {
      LossScaler scaler{LossScalerConfig{}};
      scaler.restore(state.extra.at("loss_scaler"));
    }
  } catch (const Error&) {
  }
  return 0;
}
