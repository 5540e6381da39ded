// Tokenizer::train: byte-level BPE training that stays fast on real corpora.
//  1. Pre-tokenize every document and count distinct words (a 4 MB corpus has ~30k of them).
//  2. Count adjacent symbol pairs over distinct words, weighted by word frequency, and remember
//     which words hold each pair.
//  3. Repeatedly take the most frequent pair from a lazy max-heap (entries whose count is out of
//     date are skipped when popped), merge it in only the words that hold it, and apply the
//     resulting pair-count changes. Nothing rescans the corpus per merge.
#include <omp.h>

#include <algorithm>
#include <functional>
#include <queue>
#include <string_view>
#include <tuple>

#include "core/error.h"
#include "core/log.h"
#include "data/pretokenize.h"
#include "data/tokenizer.h"

namespace strata::data {

namespace {

struct ViewHash {
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using WordCounts = std::unordered_map<std::string_view, int64_t, ViewHash>;

struct Word {
  std::vector<int32_t> sym;
  int64_t freq;
};

struct PairInfo {
  int64_t count = 0;
  std::vector<int32_t> words;  // indices of words that held the pair (may be stale or repeated)
};

uint64_t key_of(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

// Distinct pre-token words with their counts, sorted by bytes so that everything downstream is
// deterministic whatever the thread count.
std::vector<Word> count_words(const std::vector<std::string_view>& documents) {
  const int threads = omp_get_max_threads();
  std::vector<WordCounts> partial(threads);
  const auto n = static_cast<int64_t>(documents.size());
#pragma omp parallel
  {
    WordCounts& counts = partial[omp_get_thread_num()];
#pragma omp for schedule(dynamic, 8)
    for (int64_t d = 0; d < n; ++d) {
      const std::string_view text = documents[d];
      for (size_t pos = 0; pos < text.size();) {
        const size_t end = next_pretoken(text, pos);
        ++counts[text.substr(pos, end - pos)];
        pos = end;
      }
    }
  }
  WordCounts total = std::move(partial[0]);
  for (int t = 1; t < threads; ++t)
    for (const auto& [w, c] : partial[t]) total[w] += c;

  std::vector<std::pair<std::string_view, int64_t>> sorted(total.begin(), total.end());
  std::sort(sorted.begin(), sorted.end());
  std::vector<Word> words;
  words.reserve(sorted.size());
  for (const auto& [w, c] : sorted) {
    Word word{std::vector<int32_t>(w.size()), c};
    for (size_t i = 0; i < w.size(); ++i) word.sym[i] = static_cast<uint8_t>(w[i]);
    words.push_back(std::move(word));
  }
  return words;
}

// Heap order: highest count first; ties go to the smallest (a, b) so training is deterministic.
struct HeapEntry {
  int64_t count;
  uint64_t key;
  bool operator<(const HeapEntry& o) const {
    return std::tie(count, o.key) < std::tie(o.count, key);
  }
};

}  // namespace

Tokenizer Tokenizer::train(const std::vector<std::string>& documents, int64_t vocab_size) {
  return train_on_views(std::vector<std::string_view>(documents.begin(), documents.end()),
                        vocab_size);
}

Tokenizer Tokenizer::train_on_views(const std::vector<std::string_view>& documents,
                                    int64_t vocab_size) {
  STRATA_CHECK(vocab_size >= 257 && vocab_size <= (int64_t{1} << 24), "tokenizer vocab_size ",
               vocab_size, " must be in [257, 2^24]: 256 byte tokens + merges + ", kEndOfText);
  std::vector<Word> words = count_words(documents);

  std::unordered_map<uint64_t, PairInfo> pairs;
  for (int32_t w = 0; w < static_cast<int32_t>(words.size()); ++w) {
    const Word& word = words[w];
    for (size_t i = 0; i + 1 < word.sym.size(); ++i) {
      PairInfo& info = pairs[key_of(word.sym[i], word.sym[i + 1])];
      info.count += word.freq;
      if (info.words.empty() || info.words.back() != w) info.words.push_back(w);
    }
  }
  std::priority_queue<HeapEntry> heap;
  for (const auto& [key, info] : pairs) heap.push({info.count, key});

  std::vector<std::string> tokens(256);
  for (int b = 0; b < 256; ++b) tokens[b] = std::string(1, static_cast<char>(b));
  std::unordered_map<std::string, int32_t> id_of;
  for (int b = 0; b < 256; ++b) id_of.emplace(tokens[b], b);
  std::vector<std::pair<int32_t, int32_t>> merges;

  std::vector<int32_t> stamp(words.size(), -1);  // the last merge that processed each word
  std::unordered_map<uint64_t, int64_t> delta;
  const int64_t target = vocab_size - 1;  // the last id is <|endoftext|>
  while (static_cast<int64_t>(tokens.size()) < target) {
    if (heap.empty()) {
      log::warn("tokenizer: the text has no more pairs to merge; vocabulary is ", tokens.size() + 1,
                " instead of ", vocab_size);
      break;
    }
    const HeapEntry top = heap.top();
    heap.pop();
    auto found = pairs.find(top.key);
    if (found == pairs.end() || found->second.count != top.count || top.count <= 0) continue;

    const auto a = static_cast<int32_t>(top.key >> 32);
    const auto b = static_cast<int32_t>(top.key & 0xffffffffu);
    // Two different merges can spell the same bytes; they share one id, as in Hugging Face.
    std::string bytes = tokens[a] + tokens[b];
    auto [it, is_new] = id_of.emplace(bytes, static_cast<int32_t>(tokens.size()));
    if (is_new) tokens.push_back(std::move(bytes));
    const int32_t z = it->second;
    const auto merge_index = static_cast<int32_t>(merges.size());
    merges.emplace_back(a, b);

    const std::vector<int32_t> holders = std::move(found->second.words);
    found->second = PairInfo{};
    delta.clear();
    for (int32_t w : holders) {
      if (stamp[w] == merge_index) continue;
      stamp[w] = merge_index;
      std::vector<int32_t>& s = words[w].sym;
      const int64_t f = words[w].freq;
      const size_t len = s.size();
      bool holds = false;
      for (size_t i = 0; i + 1 < len && !holds; ++i) holds = s[i] == a && s[i + 1] == b;
      if (!holds) continue;  // a stale entry: an earlier merge already consumed the pair here

      for (size_t i = 0; i + 1 < len; ++i) delta[key_of(s[i], s[i + 1])] -= f;
      size_t j = 0;
      for (size_t i = 0; i < len;) {
        if (i + 1 < len && s[i] == a && s[i + 1] == b) {
          s[j++] = z;
          i += 2;
        } else {
          s[j++] = s[i++];
        }
      }
      s.resize(j);
      for (size_t i = 0; i + 1 < j; ++i) {
        const uint64_t k = key_of(s[i], s[i + 1]);
        delta[k] += f;
        // Pairs without z were in the word before and already list it.
        if (s[i] == z || s[i + 1] == z) pairs[k].words.push_back(w);
      }
    }
    for (const auto& [k, d] : delta) {
      if (d == 0 || k == top.key) continue;
      PairInfo& info = pairs[k];
      info.count += d;
      if (info.count > 0) heap.push({info.count, k});
    }
  }

  tokens.emplace_back(kEndOfText);
  const auto eot = static_cast<int32_t>(tokens.size() - 1);
  return Tokenizer(std::move(tokens), std::move(merges), eot, "trained tokenizer");
}

}  // namespace strata::data
