// DeepSpeed JSON configs: `strata train CONFIG --deepspeed ds_config.json`. The TOML still gives
// the model, data and run; the DeepSpeed file's training keys (batch, precision, clipping, ZeRO,
// optimizer, scheduler, logging) override it, and `--set` overrides still apply last.
//
// The file is translated into `section.key=value` overrides (so every mapped value is type- and
// range-checked like a TOML one), plus DeepSpeed's three batch keys, which need the data-parallel
// size and so are resolved once the world size is known (resolve_deepspeed_batch). Every key is
// either mapped, accepted (no effect in strata, documented), accepted with a warning that names
// it (harmless differences), or an error: all unsupported keys of a file are named in one error,
// and unknown keys are an error listing them. "auto" (Hugging Face's placeholder) keeps strata's
// value. docs/DEEPSPEED.md has the table.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "run/config.h"

namespace strata {

// DeepSpeed's batch keys as the file gives them; 0: absent or "auto".
struct DeepSpeedBatch {
  int64_t train_batch_size = 0;  // global: micro-batch x accumulation x data-parallel size
  int64_t micro_batch = 0;       // train_micro_batch_size_per_gpu (-> train.batch_size)
  int64_t grad_accum = 0;        // gradient_accumulation_steps (-> train.grad_accum)
};

struct DeepSpeedConfig {
  std::string source;                  // the file, for messages; empty: no DeepSpeed config
  std::vector<std::string> overrides;  // "section.key=value" (TOML values), before --set
  std::vector<std::string> warnings;   // each names its DeepSpeed key
  DeepSpeedBatch batch;
  // optim.min_lr as a ratio of the final optim.lr (known only after --set): WarmupCosineLR's
  // cos_min_ratio; or, when the file sets optim.lr but no floor, the TOML's own min_lr / lr (its
  // schedule keeps its shape at the new lr, and a floor above the new lr cannot happen).
  double min_lr_ratio = -1;  // < 0: not used
  bool toml_min_lr_ratio = false;
};

// Translates a parsed DeepSpeed config; `source` names it in messages.
DeepSpeedConfig translate_deepspeed(const nlohmann::json& ds, const std::string& source);
// Reads and translates a file (a JSON syntax error names the file, line and column).
DeepSpeedConfig read_deepspeed(const std::string& path);

// The TOML config at `config_path`, then `ds`'s overrides, then `overrides` (--set). With an empty
// `ds` this is load_config. The batch keys are not applied yet: see resolve_deepspeed_batch.
RunConfig load_config_with_deepspeed(const std::string& config_path, const DeepSpeedConfig& ds,
                                     const std::vector<std::string>& overrides);

// DeepSpeed's batch rule, for a job of `world_size` ranks (dp = parallel.dp, or world_size /
// (tp * pp)): train_batch_size = micro-batch x accumulation x dp. Given train_batch_size, the
// micro-batch and accumulation that are given (by the DeepSpeed file or by --set) are kept and a
// missing one is derived (neither: accumulation 1, as DeepSpeed does); all three inconsistent, or
// a derived value that is not whole, is an error naming the numbers. Without train_batch_size
// nothing is left to resolve. Sets train.batch_size and train.grad_accum (and
// parallel.micro_batches if that is used) and validates the result. A no-op without DeepSpeed.
void resolve_deepspeed_batch(RunConfig& config, const DeepSpeedConfig& ds,
                             const std::vector<std::string>& overrides, int64_t world_size);

// What the file did, for the log: one line of the mapped keys.
std::string describe_deepspeed(const DeepSpeedConfig& ds);

}  // namespace strata
