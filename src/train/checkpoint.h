// Checkpoints: every rank writes only its own slices; one global index describes them all.
//
//   <run>/ckpt/step_00000200/
//       rank_00000.safetensors  the slices rank 0 holds (model/params, exp_avg., exp_avg_sq.)
//       rank_00003.safetensors  ...one file per rank that holds something no other rank saves
//       index.json              every tensor's global name, shape and dtype, and each slice's
//                               block, element range, file, key and xxHash64
//       tokenizer.json          (when the run has one) so the checkpoint is self-contained
//       state.json              config, step, optimizer step, scheduler, loss scaler, data
//                               position, RNG; written last: a directory without it is not a
//                               checkpoint
//   <run>/ckpt/latest           the name of the newest committed checkpoint
//
// A save writes into a hidden temporary directory (every rank its own file, fsynced), and only
// when every rank's file is complete does rank 0 write the index and state.json, fsync, rename
// the directory into place and move `latest`; a failed save never touches the previous
// checkpoints, and older ones are deleted (keep_last) only after a newer one is committed.
// Slices are layout independent (checkpoint_slices.h): any (tp, pp, dp, zero) loads them.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "model/params.h"
#include "train/checkpoint_slices.h"

namespace strata {

struct CheckpointState {
  int64_t step = 0;       // optimizer steps completed
  nlohmann::json config;  // the run's config (config_to_json)
  nlohmann::json data;    // loader position
  nlohmann::json extra;   // anything else (metrics at save time, ...)
};

// The hidden directory a save of `step` writes into, emptied of any leftover of an earlier
// failed save and created (call on one rank, before the others write).
std::string prepare_checkpoint_dir(const std::string& ckpt_root, int64_t step);
// Its path (on every rank).
std::string checkpoint_tmp_dir(const std::string& ckpt_root, int64_t step);
// The file rank `rank` writes its slices to, inside the prepared directory.
std::string rank_slice_path(const std::string& tmp_dir, int rank);
// Commits the prepared directory once every rank's file is in it (call on one rank): writes the
// index from the rank files, the tokenizer, state.json last, renames it into place, moves
// `latest` and deletes all but the newest keep_last. Returns the committed directory.
std::string commit_checkpoint(const std::string& ckpt_root, const CheckpointState& state,
                              const std::string& tokenizer_path, int64_t keep_last);
// Removes the prepared directory of a save that failed.
void abandon_checkpoint(const std::string& ckpt_root, int64_t step);

// Committed checkpoint directories under ckpt_root, newest first.
std::vector<std::string> committed_checkpoints(const std::string& ckpt_root);

// The slices index.json lists; throws CheckpointCorrupt when it is missing or malformed.
std::vector<SliceEntry> read_checkpoint_index(const std::string& dir);
// The same for index.json's text; `path` names it in messages.
std::vector<SliceEntry> parse_checkpoint_index(const std::string& text, const std::string& path);

// The directory `latest` names under ckpt_root, or nullopt when there is none.
std::optional<std::string> latest_checkpoint(const std::string& ckpt_root);

// Reads state.json of a checkpoint directory (or of ckpt_root/latest when given a run's ckpt
// root); throws naming the file when it is missing or malformed.
CheckpointState read_checkpoint_state(const std::string& dir);
// The same for state.json's text; `path` names it in messages.
CheckpointState parse_checkpoint_state(const std::string& text, const std::string& path);

// Loads every local block of `params` (values into param_data, a buffer in its flat layout) and,
// when exp_avg/exp_avg_sq are not null, the optimizer moments, whatever layout saved them.
void load_checkpoint_tensors(const std::string& dir, const ParamStore& params, float* param_data,
                             float* exp_avg, float* exp_avg_sq);

// Accepts a checkpoint directory, a run's ckpt directory, or a run directory, and returns the
// checkpoint directory it means (following `latest`).
std::string resolve_checkpoint(const std::string& path);

}  // namespace strata
