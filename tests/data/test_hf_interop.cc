// Half of the Hugging Face interoperability check; check_hf_tokenizer.py is the other half and
// runs this test with STRATA_HF_INTEROP_DIR set. Without it the test is skipped.
//   <dir>/strings.json         the texts to encode (written by the script)
//   <dir>/strata/tokenizer.json  a tokenizer trained here; <dir>/strata/ids.json its encodings
//   <dir>/hf/tokenizer.json    a tokenizer trained by `tokenizers`; <dir>/hf/ids.json our
//                              encodings of the strings with it
// The script then encodes the strings with `tokenizers` from both files and compares.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "data/file_util.h"
#include "data/tokenizer.h"
#include "test_util.h"

namespace strata::data {
namespace {

void write_encodings(const Tokenizer& tok, const std::vector<std::string>& strings,
                     const std::string& path) {
  nlohmann::json ids = nlohmann::json::array();
  for (const auto& s : strings) ids.push_back(tok.encode(s));
  write_file_atomic(path, ids.dump());
}

TEST(HfInterop, WriteTokenizersAndEncodings) {
  const char* dir = std::getenv("STRATA_HF_INTEROP_DIR");
  if (!dir) GTEST_SKIP() << "run tests/data/check_hf_tokenizer.py to check against `tokenizers`";
  const auto strings = nlohmann::json::parse(read_file(std::string(dir) + "/strings.json"))
                           .get<std::vector<std::string>>();

  std::vector<std::string> corpus = {testing::make_corpus(3000, 1)};
  for (const auto& s : strings) corpus.push_back(s);  // so merges also form inside odd scripts
  const Tokenizer ours = Tokenizer::train(corpus, 700);
  std::filesystem::create_directories(std::string(dir) + "/strata");
  ours.save(std::string(dir) + "/strata/tokenizer.json");
  write_encodings(ours, strings, std::string(dir) + "/strata/ids.json");

  const std::string hf = std::string(dir) + "/hf/tokenizer.json";
  if (std::filesystem::exists(hf)) {
    const Tokenizer theirs = Tokenizer::load(hf);
    write_encodings(theirs, strings, std::string(dir) + "/hf/ids.json");
    for (const auto& s : strings) EXPECT_EQ(theirs.decode(theirs.encode(s)), s);
  }
}

}  // namespace
}  // namespace strata::data
