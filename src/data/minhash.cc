#include "data/minhash.h"

#include <algorithm>
#include <limits>
#include <string>

#include "core/error.h"
#include "io/checksum.h"

namespace strata::data {

namespace {

constexpr uint64_t kPrime = (uint64_t{1} << 61) - 1;  // a Mersenne prime: x mod p is cheap
__extension__ typedef unsigned __int128 u128;         // GCC and Clang on 64-bit targets

uint64_t mod_prime(u128 x) {
  uint64_t r = static_cast<uint64_t>(x & kPrime) + static_cast<uint64_t>(x >> 61);
  r = (r & kPrime) + (r >> 61);
  return r >= kPrime ? r - kPrime : r;
}

uint64_t splitmix(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return x;
}

bool separates(char c) {  // ASCII whitespace and punctuation end a word
  const auto u = static_cast<unsigned char>(c);
  return u < 0x80 && !((u >= 'a' && u <= 'z') || (u >= 'A' && u <= 'Z') || (u >= '0' && u <= '9'));
}

// The hashes of the document's words, normalised (ASCII lower-cased).
void word_hashes(std::string_view doc, std::vector<uint64_t>& out) {
  thread_local std::string word;
  out.clear();
  for (size_t i = 0; i < doc.size();) {
    while (i < doc.size() && separates(doc[i])) ++i;
    word.clear();
    while (i < doc.size() && !separates(doc[i])) {
      const char c = doc[i++];
      word.push_back(c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c);
    }
    if (!word.empty()) out.push_back(io::xxh3_64(word));
  }
}

}  // namespace

MinHasher::MinHasher(const MinHashOptions& o) : o_(o) {
  STRATA_CHECK(o.ngram >= 1 && o.bands >= 1 && o.rows >= 1, "minhash: n-gram ", o.ngram, ", bands ",
               o.bands, " and rows ", o.rows, " must be positive");
  uint64_t state = o.seed;
  const int n = o.bands * o.rows;
  for (int i = 0; i < n; ++i) {
    a_.push_back(splitmix(state) % (kPrime - 1) + 1);  // a != 0
    b_.push_back(splitmix(state) % kPrime);
  }
}

std::vector<uint64_t> MinHasher::signature(std::string_view doc) const {
  thread_local std::vector<uint64_t> words;
  word_hashes(doc, words);
  std::vector<uint64_t> sig(a_.size(), std::numeric_limits<uint64_t>::max());
  if (words.empty()) return sig;
  // Shingles: each run of `ngram` consecutive words (all of them when there are fewer).
  const size_t n = static_cast<size_t>(o_.ngram);
  const size_t shingles = words.size() >= n ? words.size() - n + 1 : 1;
  for (size_t s = 0; s < shingles; ++s) {
    uint64_t h = 0x243f6a8885a308d3ull;
    for (size_t w = s; w < std::min(words.size(), s + n); ++w) h = mix(h ^ words[w]) * 31 + w - s;
    const uint64_t x = mod_prime(h);
    for (size_t i = 0; i < a_.size(); ++i) {
      const uint64_t v = mod_prime(static_cast<u128>(a_[i]) * x + b_[i]);
      sig[i] = std::min(sig[i], v);
    }
  }
  return sig;
}

void MinHasher::band_keys(std::string_view doc, std::vector<uint64_t>& keys) const {
  keys.clear();
  const std::vector<uint64_t> sig = signature(doc);
  if (sig.front() == std::numeric_limits<uint64_t>::max()) return;  // no words
  for (int b = 0; b < o_.bands; ++b) {
    // The band's rows, and the band's index so that equal rows in different bands differ.
    const auto* rows = sig.data() + static_cast<size_t>(b) * static_cast<size_t>(o_.rows);
    uint64_t k = io::checksum(io::Checksum::xxh3, rows, sizeof(uint64_t) * o_.rows);
    keys.push_back(mix(k ^ (static_cast<uint64_t>(b) * 0x9e3779b97f4a7c15ull)));
  }
}

double estimated_jaccard(const std::vector<uint64_t>& x, const std::vector<uint64_t>& y) {
  STRATA_CHECK(x.size() == y.size() && !x.empty(), "estimated_jaccard: signatures differ in size");
  size_t equal = 0;
  for (size_t i = 0; i < x.size(); ++i) equal += x[i] == y[i];
  return static_cast<double>(equal) / static_cast<double>(x.size());
}

bool NearDedup::insert(uint64_t key) {
  key |= 1;  // 0 marks an empty slot
  if (2 * (used_ + 1) > static_cast<int64_t>(slots_.size())) grow();
  const size_t mask = slots_.size() - 1;
  for (size_t i = mix(key) & mask;; i = (i + 1) & mask) {
    if (slots_[i] == key) return true;
    if (slots_[i] == 0) {
      slots_[i] = key;
      ++used_;
      return false;
    }
  }
}

void NearDedup::grow() {
  std::vector<uint64_t> old(slots_.size() * 2, 0);
  old.swap(slots_);
  const size_t mask = slots_.size() - 1;
  for (uint64_t key : old) {
    if (key == 0) continue;
    size_t i = mix(key) & mask;
    while (slots_[i] != 0) i = (i + 1) & mask;
    slots_[i] = key;
  }
}

bool NearDedup::seen(const std::vector<uint64_t>& keys) {
  bool any = false;
  for (uint64_t k : keys) any = insert(k) || any;
  return any;
}

}  // namespace strata::data
