#include "data/normalize.h"

#include <utf8proc.h>

#include <cstdlib>
#include <memory>

#include "core/error.h"
#include "data/unicode.h"

namespace strata::data {

std::string nfc(std::string_view text) {
  if (is_ascii(text)) return std::string(text);  // ASCII is its own NFC
  utf8proc_uint8_t* out = nullptr;
  // utf8proc_NFC's options, with an explicit length so that NUL bytes are characters too.
  const utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                   static_cast<utf8proc_ssize_t>(text.size()), &out,
                   static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  const std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(out, &std::free);
  STRATA_CHECK(n >= 0, "NFC normalization failed: ", utf8proc_errmsg(n),
               " (invalid UTF-8 must be replaced before normalizing)");
  return std::string(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
}

std::string_view normalize(Normalizer normalizer, std::string_view text, std::string& buffer) {
  if (normalizer == Normalizer::none || is_ascii(text)) return text;
  buffer = nfc(text);
  return buffer;
}

}  // namespace strata::data
