// Text to pre-tokens the way `tokenizers` runs a tokenizer.json (TokenizerImpl::encode):
//   1. (strata) invalid UTF-8 replaced by U+FFFD, where the pipeline says so (tokenizer.h);
//   2. added tokens whose normalized flag is false are split out of the text as given;
//   3. each remaining piece is normalized (NFC) on its own;
//   4. added tokens with normalized = true are split out of the normalized pieces;
//   5. each remaining piece is pre-tokenized and each pre-token encoded by BPE.
// strata's own pipeline (no normalizer, no added token to look for) goes straight to step 5.
#include "data/tokenizer.h"
#include "data/unicode.h"

namespace strata::data {

void Tokenizer::encode_into(std::string_view text, const EncodeOptions& options, Cache& cache,
                            std::vector<int32_t>& out) const {
  std::string repaired;
  if (pipeline_.invalid_utf8 == InvalidUtf8::replace && !is_ascii(text) && !is_valid_utf8(text)) {
    repaired = replace_invalid_utf8(text);
    text = repaired;
  }
  if (raw_added_.idle(options.parse_special)) return encode_normalized(text, options, cache, out);
  std::vector<AddedTokenSplitter::Piece> pieces;
  raw_added_.split(text, options.parse_special, pieces);
  for (const auto& piece : pieces) {
    if (piece.id >= 0)
      out.push_back(piece.id);
    else
      encode_normalized(text.substr(piece.begin, piece.end - piece.begin), options, cache, out);
  }
}

void Tokenizer::encode_normalized(std::string_view text, const EncodeOptions& options, Cache& cache,
                                  std::vector<int32_t>& out) const {
  std::string buffer;
  text = normalize(pipeline_.normalizer, text, buffer);
  if (normalized_added_.idle(options.parse_special)) return encode_pretokens(text, cache, out);
  std::vector<AddedTokenSplitter::Piece> pieces;
  normalized_added_.split(text, options.parse_special, pieces);
  for (const auto& piece : pieces) {
    if (piece.id >= 0)
      out.push_back(piece.id);
    else
      encode_pretokens(text.substr(piece.begin, piece.end - piece.begin), cache, out);
  }
}

}  // namespace strata::data
