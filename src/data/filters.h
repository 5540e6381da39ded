// Document splitting and quality filters for the prepare step. Each filter is a plain function
// of the document so it can be tested and reported on its own.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "data/data_config.h"

namespace strata::data {

// Splits text at every occurrence of `separator` (the whole text when it is empty). Empty
// pieces are not documents and are dropped; everything else is kept byte for byte. The prepare
// streams its documents through corpus.h's reader instead; this whole-text form is the reference
// that reader is tested against (tests/data/test_corpus.cc).
std::vector<std::string_view> split_documents(std::string_view text, const std::string& separator);

// Why a document was dropped, in the order the filters run (the first failing one counts);
// duplicate (data/dedup.h) and near_duplicate (data/minhash.h) are decided after the others, in
// corpus order.
enum class Verdict : uint8_t {
  kept,
  invalid_utf8,
  too_short,
  too_long,
  repetitive,
  nonprint,
  duplicate,
  near_duplicate
};
const char* verdict_name(Verdict v);

Verdict judge_document(std::string_view doc, const FilterConfig& filters);

// Number of code points (the unit of min_doc_chars / max_doc_chars); doc must be valid UTF-8.
int64_t count_chars(std::string_view doc);

// How much of the document repeats itself, in [0, 1]: the larger of
//  - the fraction of non-blank lines that repeat an earlier line exactly, and
//  - the fraction of 32-byte windows that occurred earlier in the document, which catches one
//    phrase repeated many times even on a single line ("buy now buy now buy now ...").
double repeat_fraction(std::string_view doc);

// Fraction of code points that are control characters other than \t, \n, \r (C0, DEL, C1).
double nonprint_fraction(std::string_view doc);

}  // namespace strata::data
