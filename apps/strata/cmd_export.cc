// strata export CHECKPOINT --hf DIR: a checkpoint as a Hugging Face transformers model.
#include <cstdio>
#include <map>
#include <memory>
#include <string>

#include "commands.h"
#include "train/hf_export.h"

namespace strata::cli {

Command add_export_command(CLI::App& parent) {
  struct Args {
    std::string checkpoint, dtype = "f32";
    double max_shard_mb = 0;
    hf::ExportOptions options;
  };
  auto a = std::make_shared<Args>();
  CLI::App* app = parent.add_subcommand(
      "export", "write a checkpoint as a Hugging Face model (safetensors, config.json, tokenizer)");
  app->add_option("checkpoint", a->checkpoint, "checkpoint, ckpt dir or run dir")->required();
  app->add_option("--hf", a->options.out_dir,
                  "output directory for transformers' from_pretrained (GPT2LMHeadModel, "
                  "LlamaForCausalLM, Qwen3ForCausalLM, MixtralForCausalLM or Qwen3MoeForCausalLM)")
      ->required();
  app->add_option("--tokenizer", a->options.tokenizer,
                  "tokenizer.json to ship (default: the checkpoint's, or its run's data.dir)");
  app->add_flag("--no-tokenizer", a->options.no_tokenizer,
                "export the weights and config.json without a tokenizer");
  app->add_option("--dtype", a->dtype, "weight type: f32 (default), bf16 or f16")
      ->check(CLI::IsMember({"f32", "bf16", "f16"}));
  app->add_option("--max-shard-mb", a->max_shard_mb,
                  "split the weights into shards of at most this many MB, with "
                  "model.safetensors.index.json (default: one file)");
  return {app, [a] {
            const std::map<std::string, DType> types = {
                {"f32", DType::f32}, {"bf16", DType::bf16}, {"f16", DType::f16}};
            a->options.dtype = types.at(a->dtype);  // one of them: --dtype is checked
            a->options.max_shard_bytes = static_cast<int64_t>(a->max_shard_mb * 1e6);
            const hf::ExportReport r = hf::export_checkpoint(a->checkpoint, a->options);
            std::printf("%s\n", r.summary().c_str());
            return 0;
          }};
}

}  // namespace strata::cli
