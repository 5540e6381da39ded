// TokenSource: what the trainer draws micro-batches from, whatever makes them (token shards from
// a prepared corpus, or seeded synthetic tokens). Positions are JSON so checkpoints carry them.
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace strata {

class TokenSource {
 public:
  virtual ~TokenSource() = default;
  // Fills inputs and targets with batch*seq_len tokens each (targets = inputs shifted by one).
  virtual void next(int32_t* inputs, int32_t* targets) = 0;
  virtual nlohmann::json state() const = 0;
  virtual void restore(const nlohmann::json& state) = 0;
  virtual void rewind() = 0;  // back to the first sample (validation passes)
  virtual std::string position() const = 0;
};

struct TokenSourceOptions {
  int64_t batch = 1, seq_len = 1, vocab_size = 0;
  uint64_t seed = 0;
  int64_t rank = 0, world = 1;
};

// Batches from token shard files (validated against vocab_size), shuffled when `shuffle`.
std::unique_ptr<TokenSource> make_shard_source(const std::vector<std::string>& shards,
                                               const TokenSourceOptions& options, bool shuffle);
// Seeded uniform random tokens: for benchmarks and tests that need no corpus.
std::unique_ptr<TokenSource> make_synthetic_source(const TokenSourceOptions& options);

}  // namespace strata
