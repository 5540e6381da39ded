// UTF-8 decoding and repair, code-point classes for the GPT-2 pre-tokenizer, and GPT-2's
// byte-to-unicode mapping (how byte-level token strings are spelled in tokenizer.json).
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace strata::data {

// The classes GPT-2's split regex distinguishes: \p{L}, \p{N}, \s and everything else.
enum CharClass : uint8_t { kOther, kLetter, kDigit, kSpace };

struct CodeRange {
  uint32_t first, last;
  CharClass klass;
};
// Non-ASCII code points that are letters, digits or spaces (generated: unicode_tables.cc).
extern const CodeRange kCodeRanges[];
extern const int kNumCodeRanges;

CharClass char_class(uint32_t cp);

// Decodes the code point starting at text[pos] and returns its length in bytes. A byte that does
// not start a valid sequence (overlong, surrogate, truncated, > U+10FFFF) is returned as a
// one-byte "code point" with *valid = false, so callers can treat arbitrary bytes uniformly.
int decode_utf8(std::string_view text, size_t pos, uint32_t* cp, bool* valid);

// True when every byte belongs to a valid UTF-8 sequence; *bad_offset gets the first bad byte.
bool is_valid_utf8(std::string_view text, size_t* bad_offset = nullptr);

// `text` with each maximal subpart of an ill-formed sequence (Unicode's "substitution of maximal
// subparts": the longest prefix of a valid sequence, or one byte) replaced by U+FFFD, exactly as
// Python's bytes.decode("utf-8", errors="replace") does ("\xE2\x82A" -> "\uFFFDA", "\xF4\x90"
// -> two); the text Hugging Face tokenizers sees when Python reads such bytes that way.
std::string replace_invalid_utf8(std::string_view text);

// True when every byte is < 0x80.
bool is_ascii(std::string_view text);

// Appends the UTF-8 encoding of code point cp.
void append_utf8(std::string& out, uint32_t cp);

// GPT-2 maps each byte to a printable code point so that token strings are readable text
// (space -> "Ġ", newline -> "Ċ"); byte_to_unicode()[b] is that character in UTF-8.
const std::array<std::string, 256>& byte_to_unicode();
// The inverse: the byte a mapped code point stands for, or -1.
int unicode_to_byte(uint32_t cp);
// A token's bytes spelled the GPT-2 way, and back (false when a character stands for no byte).
std::string to_byte_level(std::string_view bytes);
bool from_byte_level(std::string_view spelled, std::string* bytes);

}  // namespace strata::data
