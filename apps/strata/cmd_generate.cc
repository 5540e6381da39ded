#include <filesystem>
#include <iostream>
#include <memory>
#include <string>

#include "commands.h"
#include "data/tokenizer.h"
#include "model/generate.h"
#include "train/checkpoint.h"
#include "train/config.h"

namespace strata::cli {

namespace fs = std::filesystem;

Command add_generate_command(CLI::App& parent) {
  struct Args {
    std::string checkpoint, prompt;
    SampleOptions sample;
  };
  auto a = std::make_shared<Args>();
  a->sample.max_new_tokens = 200;
  CLI::App* app = parent.add_subcommand("generate", "sample text from a checkpoint");
  app->add_option("checkpoint", a->checkpoint, "checkpoint, ckpt dir or run dir")->required();
  app->add_option("--prompt", a->prompt, "text to continue");
  app->add_option("--max-new-tokens", a->sample.max_new_tokens, "tokens to generate (default 200)");
  app->add_option("--temperature", a->sample.temperature,
                  "sampling temperature, 0 = greedy (default 0.8)");
  app->add_option("--top-k", a->sample.top_k, "sample among the k most likely tokens (default 40)");
  app->add_option("--seed", a->sample.seed, "sampling seed");
  return {app, [a] {
            const std::string dir = resolve_checkpoint(a->checkpoint);
            const RunConfig config = config_from_json(read_checkpoint_state(dir).config);
            const std::string tok_path = (fs::path(dir) / "tokenizer.json").string();
            STRATA_CHECK(fs::exists(tok_path), "checkpoint '", dir,
                         "' has no tokenizer.json: it was trained on synthetic tokens, so there "
                         "is no text to generate");
            const data::Tokenizer tok = data::Tokenizer::load(tok_path);
            Arena arena;
            Decoder model(config.model, arena, 1, config.model.max_seq_len);
            load_checkpoint_tensors(dir, model.params(), model.params().data(), nullptr, nullptr);
            std::vector<int32_t> ids = tok.encode(a->prompt);
            if (ids.empty()) ids.push_back(tok.eot_id());
            std::cout << a->prompt << std::flush;
            generate(model, ids, a->sample,
                     [&](int32_t token) { std::cout << tok.decode_token(token) << std::flush; });
            std::cout << "\n";
            return 0;
          }};
}

}  // namespace strata::cli
