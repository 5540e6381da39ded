// `strata export CHECKPOINT --hf DIR`: a checkpoint (saved with any layout) as a Hugging Face
// model directory that transformers loads with from_pretrained: model.safetensors (or shards
// listed in model.safetensors.index.json), config.json (GPT2LMHeadModel or LlamaForCausalLM),
// tokenizer.json and tokenizer_config.json. Names and layouts: hf_names.h.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "model/config.h"

namespace strata::hf {

struct ExportOptions {
  std::string out_dir;
  // A tokenizer.json to ship instead of the one the checkpoint carries (or its run's data.dir).
  std::string tokenizer;
  bool no_tokenizer = false;  // export weights and config.json only
  DType dtype = DType::f32;   // f32, bf16 or f16 (rounded to nearest even)
  // 0: one model.safetensors; otherwise shards of at most this many bytes (a tensor larger than
  // that gets a shard of its own) and model.safetensors.index.json, as save_pretrained does.
  int64_t max_shard_bytes = 0;
};

struct ExportReport {
  std::string checkpoint;  // the checkpoint directory exported
  std::string out_dir;
  ModelConfig model;
  int64_t step = 0;
  int64_t tensors = 0, bytes = 0;
  std::vector<std::string> files;  // written, relative to out_dir
  std::string tokenizer;           // where tokenizer.json came from ("" when none)
  std::string summary() const;
};

// `checkpoint`: a checkpoint directory, a run's ckpt directory or a run directory. Throws an
// Error naming the problem (no tokenizer: says what to pass instead).
ExportReport export_checkpoint(const std::string& checkpoint, const ExportOptions& options);

}  // namespace strata::hf
