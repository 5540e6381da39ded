// The Hugging Face normalizers strata runs: NFC (Qwen2, GPT-NeoX/Pythia) on utf8proc, the same
// canonical decomposition and composition as tokenizers' NFC (unicode-normalization). The two
// libraries may carry different Unicode versions; that changes only characters added to Unicode
// recently, and only if they have canonical decompositions.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace strata::data {

enum class Normalizer : uint8_t { none, nfc };

// NFC of `text`, which must be valid UTF-8 (throws otherwise). ASCII text is returned as is.
std::string nfc(std::string_view text);

// `text` normalized, in `buffer` when it changes; the result views `text` or `buffer`.
std::string_view normalize(Normalizer normalizer, std::string_view text, std::string& buffer);

}  // namespace strata::data
