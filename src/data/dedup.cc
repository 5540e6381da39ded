#include "data/dedup.h"

#include <string>

#include "io/checksum.h"

namespace strata::data {

namespace {

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

}  // namespace

DocKey dedup_key(std::string_view doc) {
  // Normalised into a per-thread buffer (documents are at most a few MB), hashed at once.
  thread_local std::string norm;
  norm.clear();
  norm.reserve(doc.size());
  bool pending_space = false;
  for (char c : doc) {
    if (is_space(c)) {
      pending_space = !norm.empty();
      continue;
    }
    if (pending_space) norm.push_back(' ');
    pending_space = false;
    norm.push_back(c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c);
  }
  return {io::xxh3_64(norm), io::xxhash64(norm, 0x6a09e667f3bcc909ull)};
}

}  // namespace strata::data
