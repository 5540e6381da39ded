#include "data/loader.h"

#include <algorithm>

#include "core/error.h"
#include "core/philox.h"
#include "data/file_util.h"

namespace strata::data {

void to_json(nlohmann::json& j, const LoaderState& s) {
  j = nlohmann::json{{"epoch", s.epoch}, {"cursor", s.cursor}};
}

void from_json(const nlohmann::json& j, LoaderState& s) {
  const auto count = [&](const char* key) {
    STRATA_CHECK(j.is_object() && j.contains(key) && j[key].is_number_integer() &&
                     (j[key].is_number_unsigned() || j[key].get<int64_t>() >= 0),
                 "loader state ", j.dump(), " is not {\"epoch\": n, \"cursor\": n} with n >= 0");
    return j[key].get<uint64_t>();
  };
  s.epoch = count("epoch");
  s.cursor = count("cursor");
}

namespace {
void check_shape(int64_t batch, int64_t seq_len, int64_t rank, int64_t world, int64_t vocab) {
  STRATA_CHECK(batch > 0 && seq_len > 0, "loader: batch ", batch, " and seq_len ", seq_len,
               " must be positive");
  STRATA_CHECK(world > 0 && rank >= 0 && rank < world, "loader: rank ", rank,
               " is not in [0, world = ", world, ")");
  STRATA_CHECK(vocab > 0 && vocab <= (int64_t{1} << 31), "loader: vocab_size ", vocab,
               " out of range");
}
}  // namespace

DataLoader::DataLoader(std::vector<std::string> shard_paths, int64_t batch, int64_t seq_len,
                       uint64_t seed, int64_t rank, int64_t world, int64_t vocab_size, bool shuffle)
    : batch_(batch), seq_len_(seq_len), rank_(rank), world_(world), seed_(seed), shuffle_(shuffle) {
  check_shape(batch, seq_len, rank, world, vocab_size);
  STRATA_CHECK(!shard_paths.empty(), "loader: no token shards given");
  for (const std::string& path : shard_paths) {
    shards_.emplace_back(path, vocab_size);
    starts_.push_back(total_tokens_);
    total_tokens_ += shards_.back().size();
  }
  STRATA_CHECK(total_tokens_ >= seq_len + 1, "loader: the shards (", shard_paths.front(),
               shard_paths.size() > 1 ? " ..." : "", ") hold ", total_tokens_,
               " tokens, but one sample needs seq_len + 1 = ", seq_len + 1,
               "; use a shorter train.seq_len or more data");
  samples_ = static_cast<uint64_t>((total_tokens_ - 1) / seq_len);
}

size_t DataLoader::shard_of(int64_t token) const {
  // The last shard whose start is <= token (skips empty shards, which share a start).
  const auto it = std::upper_bound(starts_.begin(), starts_.end(), token);
  return static_cast<size_t>(it - starts_.begin()) - 1;
}

void DataLoader::copy_tokens(int64_t begin, int64_t n, int32_t* out) const {
  size_t s = shard_of(begin);
  while (n > 0) {
    const int64_t local = begin - starts_[s];
    const int64_t take = std::min(n, shards_[s].size() - local);
    shards_[s].copy(local, take, out);
    out += take;
    begin += take;
    n -= take;
    ++s;
  }
}

int64_t DataLoader::sample_start(uint64_t epoch, uint64_t index) const {
  return static_cast<int64_t>(SampleOrder(seed_, epoch, samples_, shuffle_)(index)) * seq_len_;
}

void DataLoader::next(int32_t* inputs, int32_t* targets) {
  for (int64_t j = 0; j < batch_; ++j) {
    // This rank's j-th sample of the global batch; it may lie in a later epoch.
    uint64_t epoch = epoch_;
    uint64_t index = cursor_ + static_cast<uint64_t>(rank_ * batch_ + j);
    epoch += index / samples_;
    index %= samples_;
    const int64_t start = sample_start(epoch, index);
    copy_tokens(start, seq_len_, inputs + j * seq_len_);
    copy_tokens(start + 1, seq_len_, targets + j * seq_len_);
  }
  cursor_ += static_cast<uint64_t>(batch_ * world_);
  epoch_ += cursor_ / samples_;
  cursor_ %= samples_;
}

void DataLoader::restore(const LoaderState& s) {
  // A cursor past the epoch (e.g. state saved with different data) wraps like next() would.
  epoch_ = s.epoch + s.cursor / samples_;
  cursor_ = s.cursor % samples_;
}

std::string DataLoader::position_string() const {
  const int64_t start = sample_start(epoch_, cursor_);
  const size_t s = shard_of(start);
  return cat("epoch ", epoch_, " sample ", cursor_, " (", base_name(shards_[s].path()), " token ",
             start - starts_[s], ")");
}

SyntheticLoader::SyntheticLoader(int64_t batch, int64_t seq_len, uint64_t seed, int64_t rank,
                                 int64_t world, int64_t vocab_size)
    : batch_(batch),
      seq_len_(seq_len),
      rank_(rank),
      world_(world),
      vocab_size_(vocab_size),
      key_(seed ^ hash_name("strata/data/synthetic")) {  // decorrelated from model init
  check_shape(batch, seq_len, rank, world, vocab_size);
}

void SyntheticLoader::next(int32_t* inputs, int32_t* targets) {
  const auto vocab = static_cast<uint64_t>(vocab_size_);
  for (int64_t j = 0; j < batch_; ++j) {
    const uint64_t sample = cursor_ + static_cast<uint64_t>(rank_ * batch_ + j);
    const CounterRng rng(key_, sample);
    int32_t* in = inputs + j * seq_len_;
    int32_t* tg = targets + j * seq_len_;
    // Token t is word t % 4 of Philox block t / 4, scaled to [0, vocab) by multiply-shift.
    std::array<uint32_t, 4> block = rng.bits(0);
    for (int64_t t = 0; t <= seq_len_; ++t) {
      if (t % 4 == 0 && t > 0) block = rng.bits(static_cast<uint64_t>(t / 4));
      const auto token = static_cast<int32_t>((block[t % 4] * vocab) >> 32);
      if (t < seq_len_) in[t] = token;
      if (t > 0) tg[t - 1] = token;
    }
  }
  cursor_ += static_cast<uint64_t>(batch_ * world_);
}

void SyntheticLoader::restore(const LoaderState& s) {
  STRATA_CHECK(s.epoch == 0, "synthetic loader state has epoch ", s.epoch,
               "; synthetic data has a single endless epoch (was the state saved by a loader ",
               "over shards?)");
  cursor_ = s.cursor;
}

std::string SyntheticLoader::position_string() const {
  return cat("synthetic sample ", cursor_);
}

}  // namespace strata::data
