// Applying a translated DeepSpeed config: the TOML, the DeepSpeed overrides, --set, and
// DeepSpeed's batch rule once the world size is known (deepspeed_config.h).
#include <algorithm>
#include <charconv>

#include "core/error.h"
#include "run/config_validate.h"
#include "run/deepspeed_config.h"
#include "run/run_plan.h"

namespace strata {

namespace {

std::string toml_number(double v) {
  char buf[32];
  const auto res = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, res.ptr);
}

// Whether `--set key=...` is among the overrides.
bool user_sets(const std::vector<std::string>& overrides, const std::string& key) {
  for (const std::string& o : overrides) {
    const std::string k = o.substr(0, o.find('='));
    const size_t b = k.find_first_not_of(" \t"), e = k.find_last_not_of(" \t");
    if (b != std::string::npos && k.substr(b, e - b + 1) == key) return true;
  }
  return false;
}

}  // namespace

RunConfig load_config_with_deepspeed(const std::string& config_path, const DeepSpeedConfig& ds,
                                     const std::vector<std::string>& overrides) {
  if (ds.source.empty()) return load_config(config_path, overrides);
  std::vector<std::string> all = ds.overrides;
  try {
    double ratio = ds.min_lr_ratio;
    if (ds.toml_min_lr_ratio) {
      const RunConfig toml = load_config(config_path, overrides);
      ratio = toml.optim.min_lr / toml.optim.lr;
    }
    if (ratio >= 0) {
      // The floor is a ratio of the final lr: find that first (min_lr 0, so that an old floor
      // above the new lr cannot fail this pass), then set the floor before --set.
      std::vector<std::string> first = all;
      first.push_back("optim.min_lr=0");
      first.insert(first.end(), overrides.begin(), overrides.end());
      const double lr = load_config(config_path, first).optim.lr;
      all.push_back("optim.min_lr=" + toml_number(lr * ratio));
    }
    all.insert(all.end(), overrides.begin(), overrides.end());
    return load_config(config_path, all);
  } catch (const Error& e) {
    fail(e.what(), "\n  (with DeepSpeed config ", ds.source,
         " applied as: ", describe_deepspeed(ds), ")");
  }
}

void resolve_deepspeed_batch(RunConfig& c, const DeepSpeedConfig& ds,
                             const std::vector<std::string>& overrides, int64_t world_size) {
  const DeepSpeedBatch& b = ds.batch;
  if (ds.source.empty() || b.train_batch_size == 0) return;
  // The data-parallel size as the ranks will derive it (resolve_layout, through the run plan), in
  // data replicas: the cp ranks of a replica share its sequences (as DeepSpeed-Ulysses' sequence
  // parallel ranks do, which its train_batch_size does not count either).
  int64_t dp = 0;
  try {
    dp = data_parallel_size(c.parallel, world_size) / std::max<int64_t>(1, c.parallel.cp);
  } catch (const Error& e) {
    fail(ds.source, ": train_batch_size needs the data-parallel size: ", e.what());
  }
  const bool micro_set = user_sets(overrides, "train.batch_size");
  const bool accum_set =
      user_sets(overrides, "train.grad_accum") || user_sets(overrides, "parallel.micro_batches");
  const bool micro_given = b.micro_batch > 0 || micro_set;
  const bool accum_given = b.grad_accum > 0 || accum_set;
  int64_t micro = c.train.batch_size;
  int64_t accum = micro_batches_per_step(c);
  const int64_t global = b.train_batch_size;
  const std::string micro_from = micro_set ? " (--set train.batch_size)" : "";
  const std::string accum_from = accum_set ? " (--set)" : "";
  if (micro_given && accum_given) {
    if (micro * accum * dp != global)
      fail(ds.source, ": train_batch_size ", global, " != train_micro_batch_size_per_gpu ", micro,
           micro_from, " x gradient_accumulation_steps ", accum, accum_from,
           " x data-parallel size ", dp, " = ", micro * accum * dp,
           " (DeepSpeed's rule; give two of the three and the third is derived)");
  } else if (micro_given) {
    if (global % (micro * dp) != 0)
      fail(ds.source, ": train_batch_size ", global,
           " is not a multiple of "
           "train_micro_batch_size_per_gpu ",
           micro, micro_from, " x data-parallel size ", dp,
           ", so gradient_accumulation_steps would not be whole");
    accum = global / (micro * dp);
  } else {
    if (!accum_given) accum = 1;  // DeepSpeed's choice when only train_batch_size is given
    if (global % (accum * dp) != 0)
      fail(ds.source, ": train_batch_size ", global,
           " is not a multiple of "
           "gradient_accumulation_steps ",
           accum, accum_from, " x data-parallel size ", dp,
           ", so train_micro_batch_size_per_gpu would not be whole");
    micro = global / (accum * dp);
  }
  c.train.batch_size = micro;
  c.train.grad_accum = accum;
  if (c.parallel.micro_batches > 0) c.parallel.micro_batches = accum;
  validate_config(c, ds.source);
}

std::string describe_deepspeed(const DeepSpeedConfig& ds) {
  std::vector<std::string> parts = ds.overrides;
  if (ds.batch.train_batch_size > 0)
    parts.push_back(cat("train_batch_size ", ds.batch.train_batch_size,
                        " (resolved with the data-parallel size)"));
  if (ds.min_lr_ratio >= 0) parts.push_back(cat("optim.min_lr = ", ds.min_lr_ratio, " x optim.lr"));
  if (ds.toml_min_lr_ratio) parts.push_back("optim.min_lr = optim.lr x the TOML's min_lr / lr");
  std::string out;
  for (const std::string& s : parts) out += (out.empty() ? "" : ", ") + s;
  return out.empty() ? "nothing" : out;
}

}  // namespace strata
