// The small model the step-loop tests train (gpt2 family by default, 2 layers, d_model 64,
// vocabulary 512, T = 32, synthetic tokens, 6 steps), and a fresh run directory for it.
#pragma once
#include <filesystem>
#include <string>
#include <vector>

#include "run/config.h"

namespace strata::test_support {

// A path under the temp directory, removed if it exists.
inline std::string fresh_dir(const std::string& name) {
  const std::filesystem::path p = std::filesystem::temp_directory_path() / ("strata_test_" + name);
  std::filesystem::remove_all(p);
  return p.string();
}

// `overrides` are `--set` strings applied in order after run.dir.
inline RunConfig small_run_config(const std::string& run_dir,
                                  const std::vector<std::string>& overrides = {}) {
  std::vector<std::string> sets = {"run.dir=" + run_dir};
  sets.insert(sets.end(), overrides.begin(), overrides.end());
  return parse_config(R"(
[model]
n_layer = 2
n_head = 4
d_model = 64
vocab_size = 512
max_seq_len = 32
[train]
steps = 6
batch_size = 4
seq_len = 32
eval_every = 0
eval_batches = 2
[optim]
lr = 3e-3
warmup_steps = 2
[data]
source = "synthetic"
)",
                      "test", sets);
}

}  // namespace strata::test_support
