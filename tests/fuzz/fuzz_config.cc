// libFuzzer target: a TOML run config with `--set` overrides (parse_config). The input is the
// TOML text, then optionally a kPartSeparator line and one `section.key=value` override per line.
// An accepted config must survive its JSON round trip (what checkpoints store).
#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "fuzz_util.h"
#include "run/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace strata;
  const auto parts =
      fuzz::split_parts(std::string_view(reinterpret_cast<const char*>(data), size), 2);
  const std::string toml(parts[0]);
  const std::vector<std::string> overrides =
      parts.size() > 1 ? fuzz::split_lines(parts[1]) : std::vector<std::string>{};
  try {
    const RunConfig config = parse_config(toml, "fuzz.toml", overrides);
    const nlohmann::json j = config_to_json(config);
    const RunConfig back = config_from_json(j);
    FUZZ_CHECK(config_to_json(back) == j);
  } catch (const Error&) {
  }
  try {
    std::vector<std::string> limits;
    (void)parse_config(toml, "fuzz.toml", overrides, &limits);  // strata plan's reading
  } catch (const Error&) {
  }
  return 0;
}
