// The consistency checks parse_config runs after reading every key (config.cc): values in range,
// keys that must agree, and combinations the engine does not support; `where` (the config file)
// prefixes each message. Also finalizes the model config.
#pragma once
#include <string>

#include "run/config.h"

namespace strata {

void validate_config(RunConfig& c, const std::string& where);

}  // namespace strata
