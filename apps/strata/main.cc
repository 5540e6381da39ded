// strata: the command line. Parses arguments and calls the library; nothing else lives here.
#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "core/log.h"
#include "data/prepare.h"
#include "data/tokenizer.h"
#include "model/generate.h"
#include "train/checkpoint.h"
#include "train/config.h"
#include "train/trainer.h"

namespace fs = std::filesystem;
using namespace strata;

namespace {

int cmd_train(const std::string& config_path, const std::vector<std::string>& overrides) {
  RunConfig config = load_config(config_path, overrides);
  Trainer trainer(std::move(config));
  trainer.run();
  return 0;
}

int cmd_prepare(const std::vector<std::string>& text, const std::string& out, int64_t vocab,
                double val_fraction, uint64_t seed) {
  const DataConfig defaults;
  const data::PrepareReport report = data::prepare_text(
      text, out, vocab, val_fraction, seed, defaults.document_separator, defaults.filters);
  std::cout << report.summary() << "\n";
  return 0;
}

int cmd_generate(const std::string& checkpoint, const std::string& prompt, int64_t max_new_tokens,
                 float temperature, int64_t top_k, uint64_t seed) {
  const std::string dir = resolve_checkpoint(checkpoint);
  const CheckpointState state = read_checkpoint_state(dir);
  const RunConfig config = config_from_json(state.config);
  const std::string tok_path = (fs::path(dir) / "tokenizer.json").string();
  STRATA_CHECK(fs::exists(tok_path), "checkpoint '", dir, "' has no tokenizer.json: it was trained "
               "on synthetic tokens, so there is no text to generate");
  const data::Tokenizer tok = data::Tokenizer::load(tok_path);
  Arena arena;
  Decoder model(config.model, arena, 1, config.model.max_seq_len);
  load_checkpoint_tensors(dir, model.params(), nullptr, nullptr);
  std::vector<int32_t> ids = tok.encode(prompt);
  if (ids.empty()) ids.push_back(tok.eot_id());
  SampleOptions opt;
  opt.max_new_tokens = max_new_tokens;
  opt.temperature = temperature;
  opt.top_k = top_k;
  opt.seed = seed;
  std::cout << prompt << std::flush;
  generate(model, ids, opt, [&](int32_t token) {
    std::cout << tok.decode_token(token) << std::flush;
  });
  std::cout << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"strata: distributed training of transformer language models"};
  app.require_subcommand(1);

  std::string config_path;
  std::vector<std::string> overrides;
  auto* train = app.add_subcommand("train", "train a model from a TOML config (one rank)");
  train->add_option("config", config_path, "config file, e.g. configs/tiny.toml")->required();
  train->add_option("--set", overrides, "override a config key: --set train.steps=100")
      ->take_all()
      ->expected(1);

  std::vector<std::string> text;
  std::string out;
  int64_t vocab = 8192;
  double val_fraction = 0.05;
  uint64_t seed = 1337;
  auto* prepare = app.add_subcommand("prepare", "train a BPE tokenizer and write token shards");
  prepare->add_option("--text", text, "text files")->required();
  prepare->add_option("--out", out, "output directory")->required();
  prepare->add_option("--vocab", vocab, "vocabulary size (default 8192)");
  prepare->add_option("--val-fraction", val_fraction, "documents held out for validation");
  prepare->add_option("--seed", seed, "seed of the train/validation split");

  std::string checkpoint, prompt;
  int64_t max_new_tokens = 200, top_k = 40;
  float temperature = 0.8f;
  uint64_t sample_seed = 1;
  auto* gen = app.add_subcommand("generate", "sample text from a checkpoint");
  gen->add_option("checkpoint", checkpoint, "checkpoint, ckpt dir or run dir")->required();
  gen->add_option("--prompt", prompt, "text to continue");
  gen->add_option("--max-new-tokens", max_new_tokens, "tokens to generate (default 200)");
  gen->add_option("--temperature", temperature, "sampling temperature, 0 = greedy (default 0.8)");
  gen->add_option("--top-k", top_k, "sample among the k most likely tokens (default 40)");
  gen->add_option("--seed", sample_seed, "sampling seed");

  CLI11_PARSE(app, argc, argv);
  try {
    if (train->parsed()) return cmd_train(config_path, overrides);
    if (prepare->parsed()) return cmd_prepare(text, out, vocab, val_fraction, seed);
    if (gen->parsed())
      return cmd_generate(checkpoint, prompt, max_new_tokens, temperature, top_k, sample_seed);
  } catch (const strata::Error& e) {
    std::fprintf(stderr, "\nerror: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "\nerror: %s\n", e.what());
    return 1;
  }
  return 0;
}
