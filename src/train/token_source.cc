#include "train/token_source.h"

#include "core/trace.h"
#include "data/loader.h"

namespace strata {

namespace {

// Adapts any data::Loader to the trainer's TokenSource.
class LoaderSource : public TokenSource {
 public:
  explicit LoaderSource(std::unique_ptr<data::Loader> loader) : loader_(std::move(loader)) {}
  void next(int32_t* inputs, int32_t* targets) override {
    const TraceSpan span("data", "data");
    loader_->next(inputs, targets);
  }
  nlohmann::json state() const override { return loader_->state(); }
  void restore(const nlohmann::json& state) override {
    loader_->restore(state.get<data::LoaderState>());
  }
  void rewind() override { loader_->restore(data::LoaderState{}); }
  std::string position() const override { return loader_->position_string(); }

 private:
  std::unique_ptr<data::Loader> loader_;
};

}  // namespace

std::unique_ptr<TokenSource> make_shard_source(const std::vector<std::string>& shards,
                                               const TokenSourceOptions& o, bool shuffle) {
  return std::make_unique<LoaderSource>(std::make_unique<data::DataLoader>(
      shards, o.batch, o.seq_len, o.seed, o.rank, o.world, o.vocab_size, shuffle));
}

std::unique_ptr<TokenSource> make_synthetic_source(const TokenSourceOptions& o) {
  return std::make_unique<LoaderSource>(std::make_unique<data::SyntheticLoader>(
      o.batch, o.seq_len, o.seed, o.rank, o.world, o.vocab_size));
}

}  // namespace strata
