// Pre-tokenization: splits text into the words BPE works inside, the way GPT-2's regex does
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// written out by hand (no regex library). Merges never cross these boundaries, so a word's
// encoding can be computed once and cached. Bytes that are not valid UTF-8 count as "other"
// characters, so any byte string splits, and the words always concatenate back to the input.
#pragma once
#include <cstddef>
#include <string_view>
#include <vector>

namespace strata::data {

// The end of the pre-token that starts at `pos` (pos < text.size()).
size_t next_pretoken(std::string_view text, size_t pos);

// All pre-tokens of `text`, in order (views into `text`).
std::vector<std::string_view> pretokenize(std::string_view text);

}  // namespace strata::data
