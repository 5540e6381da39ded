// Added tokens (tokenizer.json "added_tokens": specials such as <|endoftext|> or <|im_start|>)
// and how they are found in text: as Hugging Face's AddedVocabulary does, before the
// pre-tokenizer, so that an added token is one id and the text around it is encoded apart.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace strata::data {

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = true;         // skipped when specials are not parsed (EncodeOptions)
  bool lstrip = false;         // takes the whitespace before it
  bool rstrip = false;         // takes the whitespace after it
  bool single_word = false;    // only where no word character touches it
  bool normalized = false;     // matched in normalized text (else in the text as given)
  bool in_model_vocab = true;  // also in model.vocab (as trainers write it; Llama 3's are not)
};

class AddedTokenSplitter {
 public:
  // Finds `token` where `pattern` occurs: its content, or for a normalized token the content
  // normalized.
  void add(const AddedToken& token, std::string pattern);

  // True when split() returns any text whole in this mode (nothing to find), so callers skip it.
  bool idle(bool parse_special) const {
    return parse_special ? entries_.empty() : num_non_special_ == 0;
  }

  struct Piece {
    size_t begin, end;
    int32_t id;  // the added token, or -1: text to encode
  };
  // tokenizers' AddedVocabulary::find_matches: leftmost-longest matches of every pattern, not
  // overlapping; a special token when !parse_special, or a single_word token touching a word
  // character, is skipped (and its text stays text, matched by nothing else); lstrip and rstrip
  // widen a token over the whitespace beside it. Pieces cover `text` in order.
  void split(std::string_view text, bool parse_special, std::vector<Piece>& out) const;

 private:
  struct Entry {
    std::string pattern;
    AddedToken token;
  };
  std::vector<Entry> entries_;
  // Entries by the first byte of their pattern, longest pattern first (then in order added).
  std::array<std::vector<uint32_t>, 256> by_first_byte_;
  size_t num_non_special_ = 0;
};

}  // namespace strata::data
