// libFuzzer target: a Hugging Face tokenizer.json (data::Tokenizer::load), then encoding and
// decoding text with it. The input is the JSON, then optionally a kPartSeparator line and the text
// to encode (else a fixed sentence). Every id must be inside the vocabulary and decode.
#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "data/tokenizer.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace strata;
  const auto parts =
      fuzz::split_parts(std::string_view(reinterpret_cast<const char*>(data), size), 2);
  const std::string path = fuzz::write_scratch("tokenizer.json", parts[0]);
  const std::string_view text =
      parts.size() > 1 ? parts[1] : "Hello world! <|endoftext|> 123 na\xc3\xafve  \xff\xfe end";
  try {
    const data::Tokenizer tok = data::Tokenizer::load(path);
    FUZZ_CHECK(tok.eot_id() >= 0 && tok.eot_id() < tok.vocab_size());
    for (const bool special : {false, true}) {
      const std::vector<int32_t> ids = tok.encode(text, data::EncodeOptions{special});
      for (const int32_t id : ids) FUZZ_CHECK(id >= 0 && id < tok.vocab_size());
      (void)tok.decode(ids);
    }
  } catch (const Error&) {
  }
  return 0;
}
