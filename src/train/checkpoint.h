// Checkpoints: named global tensors in safetensors plus JSON state, committed atomically.
//
//   <run>/ckpt/step_00000200/
//       model.safetensors      parameters by global name ("layers.0.attn.q.weight", ...)
//       optimizer.safetensors  "exp_avg.<name>" and "exp_avg_sq.<name>"
//       tokenizer.json         (when the run has one) so the checkpoint is self-contained
//       state.json             config, step, optimizer step, data position, RNG, metrics; written
//                              last: a directory without it is not a checkpoint
//   <run>/ckpt/latest          the name of the newest committed checkpoint
//
// A save writes into a hidden temporary directory, fsyncs every file, renames it into place and
// only then moves `latest`; a failed save never touches the previous checkpoints, and older ones
// are deleted (keep_last) only after a newer one is committed.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "model/params.h"

namespace strata {

struct CheckpointState {
  int64_t step = 0;       // optimizer steps completed
  nlohmann::json config;  // the run's config (config_to_json)
  nlohmann::json data;    // loader position
  nlohmann::json extra;   // anything else (metrics at save time, ...)
};

// Saves the parameters (values at param_data + offset of each parameter of `params`, i.e. a
// buffer in the flat layout) and the optimizer moments (same layout; skipped when null) under
// ckpt_root; returns the committed directory.
std::string save_checkpoint(const std::string& ckpt_root, const ParamStore& params,
                            const float* param_data, const float* exp_avg, const float* exp_avg_sq,
                            const CheckpointState& state, const std::string& tokenizer_path,
                            int64_t keep_last);

// The directory `latest` names under ckpt_root, or nullopt when there is none.
std::optional<std::string> latest_checkpoint(const std::string& ckpt_root);

// Reads state.json of a checkpoint directory (or of ckpt_root/latest when given a run's ckpt
// root); throws naming the file when it is missing or malformed.
CheckpointState read_checkpoint_state(const std::string& dir);

// Loads parameters into param_data (flat layout of `params`; every parameter must be present
// with the same shape) and, when exp_avg/exp_avg_sq are not null, the optimizer moments.
void load_checkpoint_tensors(const std::string& dir, const ParamStore& params, float* param_data,
                             float* exp_avg, float* exp_avg_sq);

// Accepts a checkpoint directory, a run's ckpt directory, or a run directory, and returns the
// checkpoint directory it means (following `latest`).
std::string resolve_checkpoint(const std::string& path);

}  // namespace strata
