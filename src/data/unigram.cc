#include "data/unigram.h"

#include <cmath>

#include "data/shard.h"

namespace strata::data {

double unigram_baseline(const std::vector<std::string>& train_shards,
                        const std::vector<std::string>& val_shards, int64_t vocab_size) {
  std::vector<double> counts(static_cast<size_t>(vocab_size), 1.0);  // add-one smoothing
  double total = static_cast<double>(vocab_size);
  for (const std::string& path : train_shards) {
    for (int32_t t : read_shard(path, vocab_size)) counts[static_cast<size_t>(t)] += 1.0;
  }
  for (double c : counts) total += c - 1.0;
  double nll = 0;
  int64_t n = 0;
  for (const std::string& path : val_shards) {
    for (int32_t t : read_shard(path, vocab_size)) {
      nll -= std::log(counts[static_cast<size_t>(t)] / total);
      ++n;
    }
  }
  return n > 0 ? nll / static_cast<double>(n) : 0.0;
}

}  // namespace strata::data
