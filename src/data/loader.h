// Loaders: fill a micro-batch of (inputs, targets) token windows for one rank.
//
// A sample is a window of seq_len + 1 tokens; inputs are its first seq_len tokens, targets the
// last seq_len. The stream of samples is global: step i's global batch is samples
// [i*batch*world, (i+1)*batch*world) of it, and rank r takes the r-th block of `batch` samples.
// So world W with batch B sees exactly the global batches of one process with batch W*B, and a
// loader's state is the same on every rank. The state (epoch, cursor) counts global samples, so
// a checkpoint taken on any rank resumes any world size at the same place.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data/sample_order.h"
#include "data/shard.h"

namespace strata::data {

struct LoaderState {
  uint64_t epoch = 0;
  uint64_t cursor = 0;  // global samples consumed within the epoch
  bool operator==(const LoaderState&) const = default;
};
void to_json(nlohmann::json& j, const LoaderState& s);
void from_json(const nlohmann::json& j, LoaderState& s);  // throws strata::Error on a bad object

// What the trainer needs from any loader. next() never allocates.
class Loader {
 public:
  virtual ~Loader() = default;
  // Fills inputs and targets, batch * seq_len each, and advances by one global batch.
  virtual void next(int32_t* inputs, int32_t* targets) = 0;
  virtual LoaderState state() const = 0;
  virtual void restore(const LoaderState& s) = 0;
  virtual std::string position_string() const = 0;  // for logs and error messages
};

// Samples from token shards: windows at stride seq_len over the shards' concatenation, visited
// in a per-epoch permutation of (seed, epoch) (or in order when shuffle is false, as for
// validation). With S = (tokens - 1) / seq_len samples, each of the stream positions
// [0, S*seq_len) is an input of exactly one sample per epoch; a tail shorter than a window is
// never an input.
class DataLoader : public Loader {
 public:
  DataLoader(std::vector<std::string> shard_paths, int64_t batch, int64_t seq_len, uint64_t seed,
             int64_t rank, int64_t world, int64_t vocab_size, bool shuffle);

  void next(int32_t* inputs, int32_t* targets) override;
  LoaderState state() const override { return {epoch_, cursor_}; }
  void restore(const LoaderState& s) override;
  std::string position_string() const override;

  int64_t samples_per_epoch() const { return static_cast<int64_t>(samples_); }
  int64_t tokens() const { return total_tokens_; }

 private:
  // Copies tokens [begin, begin + n) of the concatenated stream.
  void copy_tokens(int64_t begin, int64_t n, int32_t* out) const;
  size_t shard_of(int64_t token) const;  // the shard holding a stream position
  int64_t sample_start(uint64_t epoch, uint64_t index) const;  // first token of a sample

  std::vector<Shard> shards_;
  std::vector<int64_t> starts_;  // stream position of each shard's first token
  int64_t total_tokens_ = 0;
  int64_t batch_, seq_len_, rank_, world_;
  uint64_t seed_;
  bool shuffle_;
  uint64_t samples_ = 0;
  uint64_t epoch_ = 0, cursor_ = 0;
};

// Random tokens, uniform over the vocabulary, for benchmarks and tests that need no corpus.
// Token t of global sample g depends only on (seed, g, t), so like DataLoader the global batch
// does not depend on the world size.
class SyntheticLoader : public Loader {
 public:
  SyntheticLoader(int64_t batch, int64_t seq_len, uint64_t seed, int64_t rank, int64_t world,
                  int64_t vocab_size);

  void next(int32_t* inputs, int32_t* targets) override;
  LoaderState state() const override { return {0, cursor_}; }
  void restore(const LoaderState& s) override;
  std::string position_string() const override;

 private:
  int64_t batch_, seq_len_, rank_, world_, vocab_size_;
  uint64_t key_;
  uint64_t cursor_ = 0;
};

}  // namespace strata::data
