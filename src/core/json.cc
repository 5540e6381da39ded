#include "core/json.h"

#include "core/error.h"

namespace strata {

nlohmann::json parse_json(std::string_view text, const std::string& source) {
  using Event = nlohmann::json::parse_event_t;
  const auto limit = [&](int depth, Event event, nlohmann::json&) {
    if ((event == Event::object_start || event == Event::array_start) && depth >= kMaxJsonDepth)
      fail(source, ": JSON nested deeper than ", kMaxJsonDepth,
           " levels; this is not a file strata wrote or reads (corrupt, or not the expected file)");
    return true;
  };
  try {
    return nlohmann::json::parse(text, limit);
  } catch (const nlohmann::json::out_of_range& e) {
    // A number too large for a double (1e999): not a parse_error, so callers that name the file
    // for syntax errors would let it escape.
    fail(source, ": not valid JSON: ", e.what());
  }
}

}  // namespace strata
