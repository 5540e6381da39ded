// The unigram baseline: the cross-entropy (nats/token) of the validation tokens under the train
// split's token frequencies (add-one smoothed). A language model that has learned anything beyond
// token frequencies has a validation loss below it.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace strata::data {

double unigram_baseline(const std::vector<std::string>& train_shards,
                        const std::vector<std::string>& val_shards, int64_t vocab_size);

}  // namespace strata::data
