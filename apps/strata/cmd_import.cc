// strata import HF_DIR --out CKPT_DIR: a Hugging Face transformers model as a strata checkpoint.
#include <cstdio>
#include <memory>

#include "commands.h"
#include "train/hf_import.h"

namespace strata::cli {

Command add_import_command(CLI::App& parent) {
  struct Args {
    std::string source, out;
  };
  auto a = std::make_shared<Args>();
  CLI::App* app = parent.add_subcommand(
      "import",
      "read a Hugging Face model directory (GPT2LMHeadModel, "
      "LlamaForCausalLM, Qwen3ForCausalLM, MixtralForCausalLM, Qwen3MoeForCausalLM) into a "
      "checkpoint and a config");
  app->add_option("hf_dir", a->source,
                  "directory written by save_pretrained: config.json, model.safetensors or "
                  "model.safetensors.index.json with its shards, tokenizer.json")
      ->required();
  app->add_option("--out", a->out, "checkpoint directory to create (with config.toml)")->required();
  return {app, [a] {
            const hf::ImportReport r = hf::import_model(a->source, a->out);
            std::printf("%s\n", r.summary().c_str());
            return 0;
          }};
}

}  // namespace strata::cli
