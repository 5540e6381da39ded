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
  return nlohmann::json::parse(text, limit);
}

}  // namespace strata
