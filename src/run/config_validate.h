// The consistency checks parse_config runs after reading every key (config.cc): values in range,
// keys that must agree, and combinations the engine does not support; `where` (the config file)
// prefixes each message. Also finalizes the model config.
// `engine_limits`: when given, the combinations that are consistent but that this build's engine
// does not run yet (the MoE FFN outside f32 on the CPU) are appended there instead of failing;
// `strata plan` predicts such runs and says so.
#pragma once
#include <string>
#include <vector>

#include "run/config.h"

namespace strata {

void validate_config(RunConfig& c, const std::string& where,
                     std::vector<std::string>* engine_limits = nullptr);

}  // namespace strata
