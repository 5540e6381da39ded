// libFuzzer target: a Hugging Face config.json as `strata import` reads it
// (hf::model_from_config_json), then the TOML config import writes for it, parsed back, and the
// tensors the config implies (hf::rules), bounded as import_model bounds them against the file.
#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "fuzz_util.h"
#include "run/config.h"
#include "train/hf_import.h"
#include "train/hf_names.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace strata;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(std::string_view(reinterpret_cast<const char*>(data), size));
  } catch (const nlohmann::json::exception&) {
    return 0;  // import_model names the file for a syntax error (read_json)
  }
  try {
    const ModelConfig model = hf::model_from_config_json(j, "hf/config.json");
    const std::string toml = hf::import_config_toml(model, "hf", "out", "fuzz");
    (void)parse_config(toml, "out/config.toml");
    // import_model refuses a model with more layers (or experts) than the file has tensors
    // before it computes the rules: a fuzzed file has at most a few thousand.
    hf::check_import_size(model, 4096, "hf/config.json");
    for (const hf::Rule& r : hf::rules(model)) {
      FUZZ_CHECK(!r.hf.empty() && !r.hf_shape.empty());
    }
  } catch (const Error&) {
  }
  return 0;
}
