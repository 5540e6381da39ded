#include "data/tokenizer.h"

#include <omp.h>

#include <functional>
#include <queue>

#include "core/error.h"
#include "data/pretokenize.h"
#include "data/unicode.h"

namespace strata::data {

namespace {
// Words longer than this are encoded but not cached: they are rare (long runs of spaces or
// symbols) and would only bloat the cache.
constexpr size_t kMaxCachedWord = 64;
}  // namespace

// Word cache: pre-token bytes -> its ids, stored as a span of one shared id buffer.
struct Tokenizer::Cache {
  std::unordered_map<std::string, std::pair<uint32_t, uint32_t>, StringHash, std::equal_to<>> spans;
  std::vector<int32_t> ids;
};

Tokenizer::Pipeline Tokenizer::gpt2_pipeline(int32_t eot_id) {
  Pipeline p;
  p.pre_tokenizer.add_split(SplitPattern::gpt2);
  p.pre_tokenizer_json =
      R"({"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":true})";
  AddedToken eot;
  eot.id = eot_id;
  eot.content = kEndOfText;
  p.added_tokens.push_back(eot);
  return p;
}

Tokenizer::Tokenizer(std::vector<std::string> tokens,
                     std::vector<std::pair<int32_t, int32_t>> merges, int32_t eot_id,
                     const std::string& source)
    : Tokenizer(std::move(tokens), std::move(merges), eot_id, source, gpt2_pipeline(eot_id)) {}

Tokenizer::Tokenizer(std::vector<std::string> tokens,
                     std::vector<std::pair<int32_t, int32_t>> merges, int32_t eot_id,
                     const std::string& source, Pipeline pipeline)
    : tokens_(std::move(tokens)),
      merge_list_(std::move(merges)),
      eot_id_(eot_id),
      pipeline_(std::move(pipeline)) {
  const auto n = static_cast<int32_t>(tokens_.size());
  STRATA_CHECK(eot_id_ >= 0 && eot_id_ < n, source, ": no ", kEndOfText, " token");
  // Added tokens keep their literal spelling and take no part in BPE: the byte tokens and merge
  // results are model.vocab's other tokens, as in `tokenizers`.
  std::vector<bool> added(n, false);
  for (const AddedToken& t : pipeline_.added_tokens) {
    STRATA_CHECK(t.id >= 0 && t.id < n, source, ": added token \"", t.content, "\" has id ", t.id,
                 ", outside [0, ", n, ")");
    added[t.id] = true;
  }
  std::unordered_map<std::string, int32_t> id_of;
  for (int32_t id = 0; id < n; ++id)
    if (!added[id]) id_of.emplace(tokens_[id], id);  // first id wins for a repeated string

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

  fast_pattern_ = pipeline_.pre_tokenizer.single_pattern();
  for (const AddedToken& t : pipeline_.added_tokens) {
    // A normalized token is looked for, normalized, in normalized text (NFC needs valid UTF-8).
    if (t.normalized && pipeline_.normalizer != Normalizer::none && is_valid_utf8(t.content))
      normalized_added_.add(t, nfc(t.content));
    else if (t.normalized)
      normalized_added_.add(t, t.content);
    else
      raw_added_.add(t, t.content);
  }
  if (pipeline_.ignore_merges) {
    // `tokenizers` looks the byte-level spelling of the pre-token up in model.vocab, whose keys
    // are byte-level text, or an added token's content where it is listed there too.
    for (int32_t id = 0; id < n; ++id)
      if (!added[id]) vocab_ids_.emplace(tokens_[id], id);
    for (const AddedToken& t : pipeline_.added_tokens) {
      std::string bytes;
      if (t.in_model_vocab && from_byte_level(t.content, &bytes)) vocab_ids_.emplace(bytes, t.id);
    }
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

// A word not in the cache. With ignore_merges (Llama 3) a word that is a vocabulary token is
// that token even where the merges would split it differently.
void Tokenizer::encode_new_word(std::string_view word, std::vector<int32_t>& out) const {
  if (pipeline_.ignore_merges) {
    const auto it = vocab_ids_.find(word);
    if (it != vocab_ids_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  encode_word(word, out);
}

// Inlined into the loops below by force: called per word, it is the hot path, and GCC keeps it
// (and the hash lookup inside) out of line otherwise, which costs ~6% of encode's time.
[[gnu::always_inline]] inline void Tokenizer::encode_cached(std::string_view word, Cache& cache,
                                                            std::vector<int32_t>& out) const {
  if (word.size() > kMaxCachedWord) {
    encode_new_word(word, out);
    return;
  }
  auto it = cache.spans.find(word);
  if (it == cache.spans.end()) {
    const auto begin = static_cast<uint32_t>(cache.ids.size());
    encode_new_word(word, cache.ids);
    const auto len = static_cast<uint32_t>(cache.ids.size() - begin);
    it = cache.spans.emplace(std::string(word), std::make_pair(begin, len)).first;
  }
  const int32_t* ids = cache.ids.data() + it->second.first;
  out.insert(out.end(), ids, ids + it->second.second);
}

// The hot loop, one instance per hand-written pattern so that the matcher inlines.
template <size_t (*next)(std::string_view, size_t)>
void Tokenizer::encode_split(std::string_view text, Cache& cache, std::vector<int32_t>& out) const {
  for (size_t pos = 0; pos < text.size();) {
    const size_t end = next(text, pos);
    encode_cached(text.substr(pos, end - pos), cache, out);
    pos = end;
  }
}

void Tokenizer::encode_pretokens(std::string_view text, Cache& cache,
                                 std::vector<int32_t>& out) const {
  if (fast_pattern_ == SplitPattern::gpt2) return encode_split<next_pretoken>(text, cache, out);
  if (fast_pattern_ == SplitPattern::llama3)
    return encode_split<next_pretoken_llama3>(text, cache, out);
  if (fast_pattern_ == SplitPattern::qwen2)
    return encode_split<next_pretoken_qwen2>(text, cache, out);
  pipeline_.pre_tokenizer.for_each(text,
                                   [&](std::string_view word) { encode_cached(word, cache, out); });
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, EncodeOptions options) const {
  Cache cache;
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 16);
  encode_into(text, options, cache, out);
  return out;
}

std::vector<std::vector<int32_t>> Tokenizer::encode_batch(
    const std::vector<std::string_view>& texts, EncodeOptions options) const {
  std::vector<std::vector<int32_t>> out(texts.size());
  const auto n = static_cast<int64_t>(texts.size());
#pragma omp parallel
  {
    Cache cache;  // one per thread: no locking, and a word is encoded once per thread at most
#pragma omp for schedule(dynamic, 16)
    for (int64_t i = 0; i < n; ++i) {
      out[i].reserve(texts[i].size() / 3 + 16);
      encode_into(texts[i], options, cache, out[i]);
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

std::optional<int32_t> Tokenizer::token_id(std::string_view token) const {
  for (const AddedToken& t : pipeline_.added_tokens)
    if (t.content == token) return t.id;
  for (int32_t id = 0; id < static_cast<int32_t>(tokens_.size()); ++id)
    if (tokens_[id] == token) return id;
  return std::nullopt;
}

void Tokenizer::set_separator(const std::string& token) {
  const auto id = token_id(token);
  STRATA_CHECK(id.has_value(), "no token \"", token,
               "\" in this tokenizer to separate documents with; name one of its added tokens "
               "(such as <|endoftext|>, <|end_of_text|> or <|eot_id|>) or vocabulary tokens");
  eot_id_ = *id;
}

void Tokenizer::set_invalid_utf8(InvalidUtf8 mode) {
  if (mode == InvalidUtf8::keep_bytes) {
    STRATA_CHECK(pipeline_.normalizer == Normalizer::none, "this tokenizer cannot keep invalid ",
                 "UTF-8 bytes: its NFC normalizer needs valid UTF-8 (use InvalidUtf8::replace)");
    STRATA_CHECK(!pipeline_.pre_tokenizer.needs_valid_utf8(), "this tokenizer cannot keep ",
                 "invalid UTF-8 bytes: its split pattern runs on PCRE2, which needs valid UTF-8 ",
                 "(use InvalidUtf8::replace)");
  }
  pipeline_.invalid_utf8 = mode;
}

}  // namespace strata::data
