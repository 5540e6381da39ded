// Pre-tokenization: splits text into the words BPE works inside. Merges never cross these
// boundaries, so a word's encoding can be computed once and cached. Each split pattern that
// Hugging Face tokenizer.json files commonly carry is written out by hand (no regex library),
// one forward pass per word, to the letter of Oniguruma's (what `tokenizers` runs) leftmost-first
// alternation and backtracking:
//   GPT-2    's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//   Llama 3  (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//            ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//   Qwen2    Llama 3's with \p{N} (one digit per word) for \p{N}{1,3}
// Each covers every character (letters, digits, whitespace, anything else), so a word starts
// where the last one ended. Bytes that are not valid UTF-8 count as "other" characters, so any
// byte string splits, and the words always concatenate back to the input. Other patterns run on
// PCRE2 (pretokenize_pcre2.h), chained by PreTokenizer (pretokenize_pipeline.h).
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace strata::data {

enum class SplitPattern : uint8_t { gpt2, llama3, qwen2 };

// The regex a pattern stands for, spelled as tokenizer.json spells it.
std::string_view split_regex(SplitPattern pattern);
// The hand-written pattern whose regex is exactly `regex`, if any.
std::optional<SplitPattern> find_split_pattern(std::string_view regex);
const char* split_pattern_name(SplitPattern pattern);  // "GPT-2", "Llama 3", "Qwen2"

// The end of the pre-token that starts at `pos` (pos < text.size()), per pattern.
size_t next_pretoken(std::string_view text, size_t pos);  // GPT-2
size_t next_pretoken_llama3(std::string_view text, size_t pos);
size_t next_pretoken_qwen2(std::string_view text, size_t pos);
size_t next_pretoken(SplitPattern pattern, std::string_view text, size_t pos);

// All pre-tokens of `text`, in order (views into `text`).
std::vector<std::string_view> pretokenize(std::string_view text,
                                          SplitPattern pattern = SplitPattern::gpt2);

}  // namespace strata::data
