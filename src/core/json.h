// JSON from outside strata (files a user hands it: safetensors headers and indexes,
// tokenizer.json, checkpoint index.json and state.json, DeepSpeed and Hugging Face configs),
// parsed with a nesting limit. nlohmann's parser is iterative, but copying, comparing and dumping
// a value recurse once per level, so a small file of nested brackets ("[[[[..." 200 000 deep)
// overflowed the stack wherever the value was next copied or printed (found by fuzzing,
// tests/fuzz). No file strata reads nests deeper than a few levels.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace strata {

inline constexpr int kMaxJsonDepth = 128;

// nlohmann::json::parse(text), except that nesting deeper than kMaxJsonDepth throws
// strata::Error naming `source`, and so does a number out of range (1e999, nlohmann's
// out_of_range). Syntax errors throw nlohmann's parse_error as before (callers name the file).
nlohmann::json parse_json(std::string_view text, const std::string& source);

}  // namespace strata
