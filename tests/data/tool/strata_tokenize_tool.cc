// Test-only driver of data::Tokenizer for tests/data/check_hf_tokenizer_exact.py: loads a
// tokenizer.json, encodes documents with encode_batch (the path `strata prepare` takes), and
// writes the ids, so the script can compare them with `tokenizers` token for token.
//
//   strata_tokenize_tool TOKENIZER.json DOCS.bin IDS.bin [--parse-special]
//       [--invalid-utf8 keep|replace] [--separator TOKEN] [--save OUT.json] [--bench REPS]
//
// DOCS.bin: documents, each a little-endian uint32 byte count and the bytes (any bytes).
// IDS.bin:  per document a little-endian uint32 token count and the int32 ids.
// Prints one JSON line: vocab size, separator id, the invalid-UTF-8 mode, and with --bench the
// best encode_batch throughput over REPS runs (MB/s, on OMP_NUM_THREADS threads).
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/file_util.h"
#include "data/tokenizer.h"

using strata::data::EncodeOptions;
using strata::data::InvalidUtf8;
using strata::data::Tokenizer;

namespace {

uint32_t read_u32(const std::string& s, size_t pos) {
  uint32_t v;
  std::memcpy(&v, s.data() + pos, 4);
  return v;
}

void append_u32(std::string& s, uint32_t v) {
  s.append(reinterpret_cast<const char*>(&v), 4);
}

int run(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr,
                 "usage: %s TOKENIZER.json DOCS.bin IDS.bin [--parse-special] "
                 "[--invalid-utf8 keep|replace] [--separator TOKEN] [--save OUT.json] "
                 "[--bench REPS]\n",
                 argv[0]);
    return 2;
  }
  EncodeOptions options;
  std::string invalid, separator, save;
  int bench = 0;
  for (int i = 4; i < argc; ++i) {
    const std::string a = argv[i];
    const auto value = [&]() -> std::string {
      STRATA_CHECK(i + 1 < argc, a, " needs a value");
      return argv[++i];
    };
    if (a == "--parse-special")
      options.parse_special = true;
    else if (a == "--invalid-utf8")
      invalid = value();
    else if (a == "--separator")
      separator = value();
    else if (a == "--save")
      save = value();
    else if (a == "--bench")
      bench = std::stoi(value());
    else
      strata::fail("unknown option ", a);
  }
  Tokenizer tok = Tokenizer::load(argv[1], separator);
  if (invalid == "keep")
    tok.set_invalid_utf8(InvalidUtf8::keep_bytes);
  else if (invalid == "replace")
    tok.set_invalid_utf8(InvalidUtf8::replace);
  else
    STRATA_CHECK(invalid.empty(), "--invalid-utf8 is keep or replace, not ", invalid);
  if (!save.empty()) tok.save(save);

  const std::string docs_file = strata::data::read_file(argv[2]);
  std::vector<std::string_view> docs;
  size_t bytes = 0;
  for (size_t pos = 0; pos < docs_file.size();) {
    STRATA_CHECK(pos + 4 <= docs_file.size(), argv[2], ": truncated at byte ", pos);
    const uint32_t n = read_u32(docs_file, pos);
    STRATA_CHECK(pos + 4 + n <= docs_file.size(), argv[2], ": truncated at byte ", pos);
    docs.emplace_back(docs_file.data() + pos + 4, n);
    bytes += n;
    pos += 4 + n;
  }

  const auto ids = tok.encode_batch(docs, options);
  std::string out;
  for (const auto& doc : ids) {
    append_u32(out, static_cast<uint32_t>(doc.size()));
    out.append(reinterpret_cast<const char*>(doc.data()), doc.size() * sizeof(int32_t));
  }
  strata::data::write_file_atomic(argv[3], out);

  nlohmann::json info = {
      {"vocab_size", tok.vocab_size()},
      {"separator_id", tok.eot_id()},
      {"invalid_utf8", tok.invalid_utf8() == InvalidUtf8::replace ? "replace" : "keep"}};
  if (bench > 0) {
    double best = 1e30;
    for (int r = 0; r < bench; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      const auto again = tok.encode_batch(docs, options);
      best = std::min(best,
                      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      STRATA_CHECK(again == ids, "encode_batch gave other ids on run ", r);
    }
    info["mb_per_s"] = static_cast<double>(bytes) / 1e6 / best;
    info["threads"] = omp_get_max_threads();
  }
  std::printf("%s\n", info.dump().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
