// Byte-level BPE tokenizer: 256 byte tokens, learned merges, added (special) tokens, and one token
// that separates documents (eot_id(): <|endoftext|> in what strata trains). Text is first split
// into pre-tokens (pretokenize.h); merges apply inside a pre-token in rank order.
//
// Files are Hugging Face tokenizer.json. A tokenizer trained here saves as GPT-2 style (model BPE,
// ByteLevel pre-tokenizer and decoder) and loads in `tokenizers`/transformers; any byte-level BPE
// tokenizer.json of the GPT-2, Llama 3 or Qwen2 families (and others whose split patterns run on
// PCRE2) loads here and encodes token for token as `tokenizers` does (tests/data/
// check_hf_tokenizer_exact.py): NFC normalizer, ignore_merges, added tokens with their flags.
//
// Invalid UTF-8 (InvalidUtf8): `tokenizers` only ever sees Unicode strings. strata's own pipeline
// (what it trains, and GPT-2's: ByteLevel with the GPT-2 regex, no normalizer) keeps each invalid
// byte as a byte token, so any byte string encodes and decode(encode(s)) == s. Every other loaded
// pipeline replaces invalid bytes by U+FFFD as Python's errors="replace" does, so the ids are
// those `tokenizers` gives for the text Python would read; set_invalid_utf8 chooses either where
// the pipeline allows (an NFC normalizer or a PCRE2 pattern needs valid UTF-8).
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "data/normalize.h"
#include "data/pretokenize_pipeline.h"
#include "data/tokenizer_added.h"

namespace strata::data {

inline constexpr const char* kEndOfText = "<|endoftext|>";

enum class InvalidUtf8 : uint8_t {
  keep_bytes,  // each invalid byte is a character of its own: decode(encode(s)) == s
  replace,     // each maximal invalid subsequence becomes U+FFFD (Python's errors="replace")
};

struct EncodeOptions {
  // false: special tokens written in the text are ordinary text, so a document cannot forge a
  // boundary (as `tokenizers` with split_special_tokens=True); added tokens that are not special
  // are still found. true: every added token is found and encoded as its id, as `tokenizers`'
  // encode(text) does.
  bool parse_special = false;
};

class Tokenizer {
 public:
  // Learns vocab_size - 257 merges from the documents (ids: 0-255 bytes, then merges, then
  // <|endoftext|> last). Stops early, with a smaller vocabulary, if the text runs out of pairs.
  static Tokenizer train(const std::vector<std::string>& documents, int64_t vocab_size);
  // The same on views (the prepare step's documents point into the files it read).
  static Tokenizer train_on_views(const std::vector<std::string_view>& documents,
                                  int64_t vocab_size);
  // Reads a tokenizer.json. `separator` names the document separator token (eot_id()); empty:
  // the first of <|endoftext|>, <|end_of_text|>, </s> the file has. Throws naming the file and
  // the feature for anything strata does not run exactly as `tokenizers` does.
  static Tokenizer load(const std::string& path, const std::string& separator = "");
  void save(const std::string& path) const;  // atomic

  std::vector<int32_t> encode(std::string_view text, EncodeOptions options = {}) const;
  // Encodes many texts on all threads, sharing each thread's word cache across texts.
  std::vector<std::vector<int32_t>> encode_batch(const std::vector<std::string_view>& texts,
                                                 EncodeOptions options = {}) const;

  std::string decode(const std::vector<int32_t>& ids) const;
  std::string decode_token(int32_t id) const;  // the token's bytes; throws on an unknown id

  int64_t vocab_size() const { return static_cast<int64_t>(tokens_.size()); }
  int32_t eot_id() const { return eot_id_; }  // the document separator
  // Makes `token` (an added token's content, or a vocabulary token's bytes) the separator.
  void set_separator(const std::string& token);
  // The id of an added token's content, or else of the vocabulary token with these bytes.
  std::optional<int32_t> token_id(std::string_view token) const;
  int64_t num_merges() const { return static_cast<int64_t>(merge_list_.size()); }
  const std::vector<AddedToken>& added_tokens() const { return pipeline_.added_tokens; }

  InvalidUtf8 invalid_utf8() const { return pipeline_.invalid_utf8; }
  // Throws for keep_bytes when the pipeline needs valid UTF-8 (NFC, a PCRE2 pattern).
  void set_invalid_utf8(InvalidUtf8 mode);

 private:
  struct Cache;
  struct Merge {
    int32_t rank;
    int32_t id;  // the merged token
  };
  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  // What a tokenizer.json does to text before BPE, and the model options BPE follows.
  struct Pipeline {
    Normalizer normalizer = Normalizer::none;
    PreTokenizer pre_tokenizer;
    std::vector<AddedToken> added_tokens;
    bool ignore_merges = false;  // a pre-token that is a vocabulary token is that token
    InvalidUtf8 invalid_utf8 = InvalidUtf8::keep_bytes;
    // The file's normalizer and pre_tokenizer objects as JSON text, written back by save.
    std::string normalizer_json = "null";
    std::string pre_tokenizer_json;
  };
  // strata's own: GPT-2's ByteLevel pre-tokenizer, the separator as the one added token.
  static Pipeline gpt2_pipeline(int32_t eot_id);

  // tokens[id] = the token's bytes (an added token's content); merges in rank order, each naming
  // its two parts.
  Tokenizer(std::vector<std::string> tokens, std::vector<std::pair<int32_t, int32_t>> merges,
            int32_t eot_id, const std::string& source);
  Tokenizer(std::vector<std::string> tokens, std::vector<std::pair<int32_t, int32_t>> merges,
            int32_t eot_id, const std::string& source, Pipeline pipeline);

  static uint64_t pair_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  // tokenizer.cc: BPE on one pre-token, with the word cache.
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;
  void encode_new_word(std::string_view word, std::vector<int32_t>& out) const;
  void encode_cached(std::string_view word, Cache& cache, std::vector<int32_t>& out) const;
  template <size_t (*next)(std::string_view, size_t)>
  void encode_split(std::string_view text, Cache& cache, std::vector<int32_t>& out) const;
  void encode_pretokens(std::string_view text, Cache& cache, std::vector<int32_t>& out) const;
  // tokenizer_encode.cc: invalid UTF-8, added tokens, normalizer, then encode_pretokens.
  void encode_into(std::string_view text, const EncodeOptions& options, Cache& cache,
                   std::vector<int32_t>& out) const;
  void encode_normalized(std::string_view text, const EncodeOptions& options, Cache& cache,
                         std::vector<int32_t>& out) const;

  std::vector<std::string> tokens_;
  std::vector<std::pair<int32_t, int32_t>> merge_list_;
  std::unordered_map<uint64_t, Merge> merges_;  // pair_key(a, b) -> merge
  std::array<int32_t, 256> byte_ids_{};         // id of each single-byte token
  int32_t eot_id_ = -1;
  Pipeline pipeline_;
  std::optional<SplitPattern> fast_pattern_;  // pipeline_.pre_tokenizer.single_pattern()
  AddedTokenSplitter raw_added_;              // added tokens matched in the text as given
  AddedTokenSplitter normalized_added_;       // and in normalized text
  // With ignore_merges: model.vocab's tokens by their bytes.
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> vocab_ids_;
};

}  // namespace strata::data
