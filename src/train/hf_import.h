// `strata import HF_DIR --out CKPT_DIR`: a Hugging Face model directory (config.json and
// model.safetensors, or shards listed in model.safetensors.index.json; F32, BF16 or F16) as a
// strata checkpoint: CKPT_DIR/step_00000000 (weights only, no optimizer state), CKPT_DIR/latest,
// the model's tokenizer.json when strata can read it, and CKPT_DIR/config.toml (the [model]
// section from config.json), so that `strata generate CKPT_DIR` samples from it and
// `strata train CKPT_DIR/config.toml --set run.resume=CKPT_DIR` fine-tunes it.
#pragma once
#include <string>

#include "model/config.h"

namespace strata::hf {

struct ImportReport {
  std::string source;      // the Hugging Face directory
  std::string checkpoint;  // the committed checkpoint directory
  std::string config;      // the TOML config written beside it
  ModelConfig model;
  std::string tokenizer;       // what happened to tokenizer.json, in words
  bool has_tokenizer = false;  // the checkpoint carries it
  std::string summary() const;
};

// Throws an Error naming the key or tensor for anything strata cannot run exactly: an unknown
// architecture, unsupported config keys (hf_names.h), missing, extra or misshapen tensors, a head
// that contradicts tie_word_embeddings.
ImportReport import_model(const std::string& hf_dir, const std::string& out_dir);

// Before anything is sized from config.json: a model of n_layer layers (of `experts` experts each)
// stores at least one tensor per layer (and per expert), so a config with more than the file's
// `file_tensors` is refused here, naming the keys, instead of computing (and allocating) the
// parameters of a model no file could hold. `where` names config.json.
void check_import_size(const ModelConfig& model, size_t file_tensors, const std::string& where);

// The TOML config import writes for `model` (run.dir: runs/<run_name>).
std::string import_config_toml(const ModelConfig& model, const std::string& source,
                               const std::string& ckpt_dir, const std::string& run_name);

}  // namespace strata::hf
