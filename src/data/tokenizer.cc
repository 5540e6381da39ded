#include "data/tokenizer.h"

#include <omp.h>

#include <functional>
#include <queue>

#include "core/error.h"
#include "data/pretokenize.h"

namespace strata::data {

namespace {
// Words longer than this are encoded but not cached: they are rare (long runs of spaces or
// symbols) and would only bloat the cache.
constexpr size_t kMaxCachedWord = 64;

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
}  // namespace

// Word cache: pre-token bytes -> its ids, stored as a span of one shared id buffer.
struct Tokenizer::Cache {
  std::unordered_map<std::string, std::pair<uint32_t, uint32_t>, StringHash, std::equal_to<>> spans;
  std::vector<int32_t> ids;
};

Tokenizer::Tokenizer(std::vector<std::string> tokens,
                     std::vector<std::pair<int32_t, int32_t>> merges, int32_t eot_id,
                     const std::string& source)
    : tokens_(std::move(tokens)), merge_list_(std::move(merges)), eot_id_(eot_id) {
  const auto n = static_cast<int32_t>(tokens_.size());
  STRATA_CHECK(eot_id_ >= 0 && eot_id_ < n, source, ": no ", kEndOfText, " token");
  std::unordered_map<std::string, int32_t> id_of;
  for (int32_t id = 0; id < n; ++id)
    if (id != eot_id_) id_of.emplace(tokens_[id], id);  // first id wins for a repeated string

  for (int b = 0; b < 256; ++b) {
    const auto it = id_of.find(std::string(1, static_cast<char>(b)));
    STRATA_CHECK(it != id_of.end(), source, ": no token for byte ", b,
                 "; a byte-level BPE vocabulary must hold all 256 bytes");
    byte_ids_[b] = it->second;
  }
  merges_.reserve(merge_list_.size());
  for (size_t rank = 0; rank < merge_list_.size(); ++rank) {
    const auto [a, b] = merge_list_[rank];
    STRATA_CHECK(a >= 0 && a < n && b >= 0 && b < n, source, ": merge ", rank,
                 " names an unknown token");
    const auto it = id_of.find(tokens_[a] + tokens_[b]);
    STRATA_CHECK(it != id_of.end(), source, ": merge ", rank, " makes a token that is not in the ",
                 "vocabulary");
    // A repeated pair keeps its first (lowest) rank, as in Hugging Face's BPE.
    merges_.emplace(pair_key(a, b), Merge{static_cast<int32_t>(rank), it->second});
  }
}

// Applies merges inside one pre-token, lowest rank first and left to right among equal ranks
// (GPT-2's order). A linked list plus a heap keeps long words O(n log n).
void Tokenizer::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  const auto n = static_cast<int32_t>(word.size());
  if (n == 1) {
    out.push_back(byte_ids_[static_cast<uint8_t>(word[0])]);
    return;
  }
  std::vector<int32_t> sym(n), next(n), prev(n);
  for (int32_t i = 0; i < n; ++i) {
    sym[i] = byte_ids_[static_cast<uint8_t>(word[i])];
    next[i] = i + 1 < n ? i + 1 : -1;
    prev[i] = i - 1;
  }
  using Entry = std::pair<int32_t, int32_t>;  // (rank, position of the left symbol)
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap;
  const auto rank_at = [&](int32_t i) {
    if (i < 0 || next[i] < 0) return -1;
    const auto it = merges_.find(pair_key(sym[i], sym[next[i]]));
    return it == merges_.end() ? -1 : it->second.rank;
  };
  const auto push = [&](int32_t i) {
    const int32_t r = rank_at(i);
    if (r >= 0) heap.push({r, i});
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    const auto [rank, i] = heap.top();
    heap.pop();
    // Stale entries (a neighbour merged since) no longer show the same pair, hence rank, at i.
    if (sym[i] < 0 || rank_at(i) != rank) continue;
    const int32_t j = next[i];
    sym[i] = merges_.find(pair_key(sym[i], sym[j]))->second.id;
    sym[j] = -1;
    next[i] = next[j];
    if (next[j] >= 0) prev[next[j]] = i;
    push(prev[i]);
    push(i);
  }
  for (int32_t i = 0; i >= 0; i = next[i]) out.push_back(sym[i]);
}

void Tokenizer::encode_into(std::string_view text, Cache& cache, std::vector<int32_t>& out) const {
  for (size_t pos = 0; pos < text.size();) {
    const size_t end = next_pretoken(text, pos);
    const std::string_view word = text.substr(pos, end - pos);
    pos = end;
    if (word.size() > kMaxCachedWord) {
      encode_word(word, out);
      continue;
    }
    auto it = cache.spans.find(word);
    if (it == cache.spans.end()) {
      const auto begin = static_cast<uint32_t>(cache.ids.size());
      encode_word(word, cache.ids);
      const auto len = static_cast<uint32_t>(cache.ids.size() - begin);
      it = cache.spans.emplace(std::string(word), std::make_pair(begin, len)).first;
    }
    const int32_t* ids = cache.ids.data() + it->second.first;
    out.insert(out.end(), ids, ids + it->second.second);
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  Cache cache;
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 16);
  encode_into(text, cache, out);
  return out;
}

std::vector<std::vector<int32_t>> Tokenizer::encode_batch(
    const std::vector<std::string_view>& texts) const {
  std::vector<std::vector<int32_t>> out(texts.size());
  const auto n = static_cast<int64_t>(texts.size());
#pragma omp parallel
  {
    Cache cache;  // one per thread: no locking, and a word is encoded once per thread at most
#pragma omp for schedule(dynamic, 16)
    for (int64_t i = 0; i < n; ++i) {
      out[i].reserve(texts[i].size() / 3 + 16);
      encode_into(texts[i], cache, out[i]);
    }
  }
  return out;
}

std::string Tokenizer::decode_token(int32_t id) const {
  STRATA_CHECK(id >= 0 && id < vocab_size(), "token id ", id, " is outside the vocabulary [0, ",
               vocab_size(), "); was it produced with a different tokenizer?");
  return tokens_[id];
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string text;
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size()) decode_token(id);  // throws the message
    text += tokens_[id];
  }
  return text;
}

}  // namespace strata::data
