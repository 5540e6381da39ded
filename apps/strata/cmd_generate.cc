#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include "commands.h"
#include "data/tokenizer.h"
#include "io/safetensors.h"
#include "model/generate.h"
#include "run/config.h"
#include "train/checkpoint.h"

namespace strata::cli {

namespace fs = std::filesystem;

Command add_generate_command(CLI::App& parent) {
  struct Args {
    std::string checkpoint, prompt, logits_out;
    std::vector<int32_t> tokens;
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
  app->add_option("--tokens", a->tokens,
                  "start from these token ids (ID,ID,...) instead of --prompt")
      ->delimiter(',');
  // For interop tests: one forward pass over the prompt, its logits written as safetensors
  // (tokens [T] I32, logits [T, V] F32), no sampling.
  app->add_option("--logits-out", a->logits_out, "write the prompt's logits to FILE")->group("");
  return {app, [a] {
            const std::string dir = resolve_checkpoint(a->checkpoint);
            const RunConfig config = config_from_json(read_checkpoint_state(dir).config);
            const std::string tok_path = (fs::path(dir) / "tokenizer.json").string();
            std::optional<data::Tokenizer> tok;
            if (fs::exists(tok_path)) tok = data::Tokenizer::load(tok_path);
            STRATA_CHECK(tok || !a->tokens.empty(), "checkpoint '", dir,
                         "' has no tokenizer.json (trained on synthetic tokens, or imported "
                         "without one), so there is no text to generate; pass --tokens ID,ID,... "
                         "to start from token ids");
            std::vector<int32_t> ids = a->tokens.empty() ? tok->encode(a->prompt) : a->tokens;
            if (ids.empty()) ids.push_back(tok->eot_id());
            if (tok) a->sample.vocab_limit = tok->vocab_size();
            for (int32_t id : ids)
              STRATA_CHECK(id >= 0 && id < config.model.vocab_size, "--tokens: id ", id,
                           " is outside the vocabulary [0, ", config.model.vocab_size, ")");
            Arena arena;
            Decoder model(config.model, arena, 1, config.model.max_seq_len);
            load_checkpoint_tensors(dir, model.params(), model.params().data(), nullptr, nullptr);
            if (!a->logits_out.empty()) {
              const auto t = static_cast<int64_t>(ids.size());
              STRATA_CHECK(t <= config.model.max_seq_len, "--logits-out: ", t,
                           " tokens exceed model.max_seq_len = ", config.model.max_seq_len);
              model.forward(ids.data(), nullptr, 1, t);
              io::write_safetensors(
                  a->logits_out,
                  {{"tokens", DType::i32, {t}, ids.data()},
                   {"logits", DType::f32, {t, config.model.vocab_size}, model.logits()}});
              return 0;
            }
            auto print = [&](int32_t token) {
              std::cout << (tok ? tok->decode_token(token) : " " + std::to_string(token))
                        << std::flush;
            };
            if (a->tokens.empty())
              std::cout << a->prompt << std::flush;
            else
              for (int32_t id : ids) print(id);
            generate(model, ids, a->sample, print);
            std::cout << "\n";
            return 0;
          }};
}

}  // namespace strata::cli
