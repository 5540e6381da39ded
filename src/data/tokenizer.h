// Byte-level BPE tokenizer, GPT-2 style: 256 byte tokens, learned merges, and one special token
// <|endoftext|> that separates documents. Text is first split into pre-tokens (pretokenize.h);
// merges apply inside a pre-token in rank order. Any byte string encodes (no unknown token) and
// decode(encode(s)) == s for every s, valid UTF-8 or not.
//
// Files are Hugging Face tokenizer.json (model BPE, ByteLevel pre-tokenizer and decoder), so a
// tokenizer trained here loads in `tokenizers`/transformers, and a GPT-2 style tokenizer.json
// from there loads here.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace strata::data {

inline constexpr const char* kEndOfText = "<|endoftext|>";

class Tokenizer {
 public:
  // Learns vocab_size - 257 merges from the documents (ids: 0-255 bytes, then merges, then
  // <|endoftext|> last). Stops early, with a smaller vocabulary, if the text runs out of pairs.
  static Tokenizer train(const std::vector<std::string>& documents, int64_t vocab_size);
  // The same on views (the prepare step's documents point into the files it read).
  static Tokenizer train_on_views(const std::vector<std::string_view>& documents,
                                  int64_t vocab_size);
  static Tokenizer load(const std::string& path);
  void save(const std::string& path) const;  // atomic

  // "<|endoftext|>" inside `text` is ordinary text here (documents cannot forge a boundary);
  // callers append eot_id() themselves.
  std::vector<int32_t> encode(std::string_view text) const;
  // Encodes many texts on all threads, sharing each thread's word cache across texts.
  std::vector<std::vector<int32_t>> encode_batch(const std::vector<std::string_view>& texts) const;

  std::string decode(const std::vector<int32_t>& ids) const;
  std::string decode_token(int32_t id) const;  // the token's bytes; throws on an unknown id

  int64_t vocab_size() const { return static_cast<int64_t>(tokens_.size()); }
  int32_t eot_id() const { return eot_id_; }
  int64_t num_merges() const { return static_cast<int64_t>(merge_list_.size()); }

 private:
  struct Cache;
  struct Merge {
    int32_t rank;
    int32_t id;  // the merged token
  };
  // tokens[id] = the token's bytes; merges in rank order, each naming its two parts.
  Tokenizer(std::vector<std::string> tokens, std::vector<std::pair<int32_t, int32_t>> merges,
            int32_t eot_id, const std::string& source);

  static uint64_t pair_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;
  void encode_into(std::string_view text, Cache& cache, std::vector<int32_t>& out) const;

  std::vector<std::string> tokens_;
  std::vector<std::pair<int32_t, int32_t>> merge_list_;
  std::unordered_map<uint64_t, Merge> merges_;  // pair_key(a, b) -> merge
  std::array<int32_t, 256> byte_ids_{};         // id of each single-byte token
  int32_t eot_id_ = -1;
};

}  // namespace strata::data
