// DeepSpeed JSON configs mapped onto RunConfig: each key, DeepSpeed's batch rule (and its error),
// unsupported keys named in one error, harmless ones warned about, and "auto".
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "run/deepspeed_config.h"

namespace strata {
namespace {

using json = nlohmann::json;

const char* kToml = R"(
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
grad_accum = 3
precision = "f32"
log_every = 10
[optim]
lr = 3e-3
min_lr = 3e-4
warmup_steps = 2
grad_clip = 1.0
[data]
source = "synthetic"
)";

// The TOML above with the DeepSpeed overrides applied (as load_config_with_deepspeed does).
RunConfig apply(const DeepSpeedConfig& ds, std::vector<std::string> sets = {}) {
  std::vector<std::string> all = ds.overrides;
  all.insert(all.end(), sets.begin(), sets.end());
  return parse_config(kToml, "test.toml", all);
}

std::string toml_file() {
  const auto path = std::filesystem::temp_directory_path() / "strata_test_deepspeed.toml";
  std::ofstream(path) << kToml;
  return path.string();
}

// The message of the error `f` throws ("" if none).
template <typename F>
std::string error_of(F f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

bool has_warning(const DeepSpeedConfig& ds, const std::string& key) {
  for (const std::string& w : ds.warnings)
    if (w.rfind(key + ":", 0) == 0) return true;
  return false;
}

TEST(DeepSpeedConfig, MapsTrainingKeys) {
  const json j = json::parse(R"({
    "train_micro_batch_size_per_gpu": 2,
    "gradient_accumulation_steps": 5,
    "bf16": {"enabled": true},
    "gradient_clipping": 0.5,
    "zero_optimization": {"stage": 2, "overlap_comm": false, "reduce_bucket_size": 5e8,
                          "allgather_bucket_size": 5e8, "contiguous_gradients": true},
    "optimizer": {"type": "AdamW",
                  "params": {"lr": 2e-4, "betas": [0.8, 0.99], "eps": 1e-6, "weight_decay": 0.05}},
    "steps_per_print": 7,
    "wall_clock_breakdown": true,
    "tensorboard": {"enabled": false},
    "communication_data_type": "bf16"
  })");
  const DeepSpeedConfig ds = translate_deepspeed(j, "ds.json");
  EXPECT_TRUE(ds.warnings.empty()) << ds.warnings.front();
  const RunConfig c = load_config_with_deepspeed(toml_file(), ds, {});
  EXPECT_EQ(c.train.batch_size, 2);
  EXPECT_EQ(c.train.grad_accum, 5);
  EXPECT_EQ(c.train.precision, Precision::bf16);
  EXPECT_FLOAT_EQ(c.optim.grad_clip, 0.5f);
  EXPECT_EQ(c.parallel.zero, 2);
  EXPECT_FALSE(c.parallel.overlap);
  // 5e8 elements of f32 are 5e8 * 4 / 2^20 MiB.
  EXPECT_DOUBLE_EQ(c.parallel.bucket_mb, 5e8 * 4 / (1 << 20));
  EXPECT_FLOAT_EQ(c.optim.lr, 2e-4f);
  // No scheduler: the TOML's schedule, its floor scaled with the lr (3e-4 / 3e-3 of it).
  EXPECT_FLOAT_EQ(c.optim.min_lr, 2e-5f);
  EXPECT_FLOAT_EQ(c.optim.beta1, 0.8f);
  EXPECT_FLOAT_EQ(c.optim.beta2, 0.99f);
  EXPECT_FLOAT_EQ(c.optim.eps, 1e-6f);
  EXPECT_FLOAT_EQ(c.optim.weight_decay, 0.05f);
  EXPECT_EQ(c.train.log_every, 7);
  EXPECT_FALSE(c.track.tensorboard);
  EXPECT_EQ(c.parallel.grad_reduce_dtype, GradReduceType::bf16);
  // Keys the file does not mention keep the TOML's values.
  EXPECT_EQ(c.train.steps, 6);
  EXPECT_EQ(c.optim.warmup_steps, 2);
  EXPECT_EQ(c.optim.decay, LrDecay::cosine);
}

TEST(DeepSpeedConfig, Fp16LossScaler) {
  const json j = json::parse(R"({"fp16": {"enabled": true, "loss_scale": 0,
    "initial_scale_power": 12, "loss_scale_window": 500, "hysteresis": 3, "min_loss_scale": 0.5,
    "consecutive_hysteresis": true}})");
  const RunConfig c = apply(translate_deepspeed(j, "ds.json"));
  EXPECT_EQ(c.train.precision, Precision::fp16);
  EXPECT_EQ(c.fp16.loss_scale, 0.0f);
  EXPECT_EQ(c.fp16.initial_scale_power, 12);
  EXPECT_EQ(c.fp16.loss_scale_window, 500);
  EXPECT_EQ(c.fp16.hysteresis, 3);
  EXPECT_FLOAT_EQ(c.fp16.min_loss_scale, 0.5f);
  EXPECT_TRUE(c.fp16.consecutive_hysteresis);
}

TEST(DeepSpeedConfig, PrecisionRules) {
  // Disabled precision sections mean f32, as in DeepSpeed.
  auto c = apply(translate_deepspeed(json::parse(R"({"fp16": {"enabled": false}})"), "d"),
                 {"train.precision=bf16"});
  EXPECT_EQ(c.train.precision, Precision::bf16);  // --set still applies last
  c = apply(translate_deepspeed(
      json::parse(R"({"bf16": {"enabled": false}, "fp16": {"enabled": false}})"), "d"));
  EXPECT_EQ(c.train.precision, Precision::f32);
  const std::string both = error_of([] {
    translate_deepspeed(json::parse(R"({"bf16": {"enabled": true}, "fp16": {"enabled": true}})"),
                        "d");
  });
  EXPECT_NE(both.find("both are true"), std::string::npos) << both;
}

TEST(DeepSpeedConfig, OptimizerOffload) {
  DeepSpeedConfig ds = translate_deepspeed(json::parse(R"({"zero_optimization": {"stage": 1,
        "offload_optimizer": {"device": "nvme", "nvme_path": "/tmp/strata \"nvme\"",
                              "pin_memory": true}}})"),
                                           "ds.json");
  RunConfig c = apply(ds);
  EXPECT_EQ(c.optim.offload, OptimizerOffload::nvme);
  EXPECT_EQ(c.optim.offload_dir, "/tmp/strata \"nvme\"");
  EXPECT_TRUE(ds.warnings.empty());
  // "cpu": ZeRO-Offload, strata's optim.offload = "cpu" (state and update on the host).
  ds = translate_deepspeed(
      json::parse(R"({"zero_optimization": {"offload_optimizer": {"device": "cpu"}}})"), "ds");
  c = apply(ds, {"optim.offload=nvme"});
  EXPECT_EQ(c.optim.offload, OptimizerOffload::nvme);  // --set wins
  EXPECT_EQ(apply(ds).optim.offload, OptimizerOffload::cpu);
  EXPECT_TRUE(ds.warnings.empty());
  // The deprecated spelling maps the same way, with a warning naming the current one.
  ds = translate_deepspeed(json::parse(R"({"zero_optimization": {"cpu_offload": true}})"), "ds");
  EXPECT_EQ(apply(ds).optim.offload, OptimizerOffload::cpu);
  EXPECT_TRUE(has_warning(ds, "zero_optimization.cpu_offload"));
}

TEST(DeepSpeedConfig, AutoKeepsStrataValues) {
  const json j = json::parse(R"({
    "train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
    "gradient_accumulation_steps": "auto", "gradient_clipping": "auto",
    "fp16": {"enabled": "auto"}, "bf16": {"enabled": "auto"},
    "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto",
                                              "weight_decay": "auto"}},
    "zero_optimization": {"stage": 3, "stage3_prefetch_bucket_size": "auto",
                          "reduce_bucket_size": "auto"}
  })");
  const DeepSpeedConfig ds = translate_deepspeed(j, "ds.json");
  EXPECT_TRUE(ds.warnings.empty());
  EXPECT_EQ(ds.batch.train_batch_size, 0);
  EXPECT_EQ(ds.overrides, std::vector<std::string>{"parallel.zero=3"});
  const RunConfig c = apply(ds);
  EXPECT_EQ(c.train.batch_size, 4);
  EXPECT_EQ(c.train.grad_accum, 3);
  EXPECT_FLOAT_EQ(c.optim.lr, 3e-3f);
  EXPECT_EQ(c.train.precision, Precision::f32);
}

TEST(DeepSpeedConfig, UnsupportedKeysAreNamedInOneError) {
  const std::string e = error_of([] {
    translate_deepspeed(json::parse(R"({
      "optimizer": {"type": "Lamb", "params": {"lr": 1e-3}},
      "zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"}, "bogus": 1},
      "gradient_clipping": "big",
      "fooo": 1, "bar": {}
    })"),
                        "ds.json");
  });
  EXPECT_EQ(e.rfind("ds.json: 5 problems", 0), 0u) << e;
  for (const char* named : {"optimizer.type: 'Lamb'", "zero_optimization.offload_param",
                            "zero_optimization.bogus: unknown key", "gradient_clipping: expected",
                            "unknown top-level keys 'bar', 'fooo'"})
    EXPECT_NE(e.find(named), std::string::npos) << named << " in\n" << e;
  // One problem: one line.
  const std::string one = error_of(
      [] { translate_deepspeed(json::parse(R"({"pipeline": {"stages": 2}})"), "ds.json"); });
  EXPECT_EQ(one.rfind("ds.json: pipeline: not mapped", 0), 0u) << one;
  for (const char* bad : {R"({"optimizer": {"type": "Adam", "params": {"adam_w_mode": false}}})",
                          R"({"scheduler": {"type": "OneCycle", "params": {}}})",
                          R"({"zero_optimization": {"stage": 4}})", R"({"amp": {"enabled": true}})",
                          R"({"fp16": {"enabled": true, "fp16_master_weights_and_grads": true}})",
                          R"({"communication_data_type": "fp16"})"})
    EXPECT_NE(error_of([&] { translate_deepspeed(json::parse(bad), "d"); }), "") << bad;
}

TEST(DeepSpeedConfig, HarmlessKeysWarn) {
  const DeepSpeedConfig ds = translate_deepspeed(json::parse(R"({
    "zero_optimization": {"stage": 3, "stage3_prefetch_bucket_size": 1000,
                          "stage3_gather_16bit_weights_on_model_save": true,
                          "reduce_bucket_size": 1000, "allgather_bucket_size": 2000},
    "wandb": {"enabled": true, "project": "p"}, "csv_monitor": {"enabled": false},
    "optimizer": {"type": "Adam", "params": {"weight_decay": 0.1}},
    "activation_checkpointing": {"partition_activations": false}
  })"),
                                                 "ds.json");
  for (const char* key : {"zero_optimization.stage3_prefetch_bucket_size",
                          "zero_optimization.stage3_gather_16bit_weights_on_model_save",
                          "zero_optimization.allgather_bucket_size", "wandb", "optimizer.type",
                          "activation_checkpointing"})
    EXPECT_TRUE(has_warning(ds, key)) << key;
  EXPECT_FALSE(has_warning(ds, "csv_monitor"));
  for (const std::string& w : ds.warnings) {
    if (w.rfind("optimizer.type", 0) == 0) {
      EXPECT_NE(w.find("decouple"), std::string::npos) << w;
    }
  }
  // reduce_bucket_size's size wins.
  EXPECT_DOUBLE_EQ(apply(ds).parallel.bucket_mb, 1000 * 4.0 / (1 << 20));
}

TEST(DeepSpeedConfig, Schedulers) {
  // WarmupDecayLR: linear to warmup_min_lr at total_num_steps (strata's linear decay is the same
  // line); warmup_type linear is strata's warmup shape, so no warning.
  DeepSpeedConfig ds = translate_deepspeed(json::parse(R"({"scheduler": {"type": "WarmupDecayLR",
    "params": {"warmup_min_lr": 0, "warmup_max_lr": 5e-4, "warmup_num_steps": 10,
               "total_num_steps": 100, "warmup_type": "linear"}}})"),
                                           "ds");
  EXPECT_TRUE(ds.warnings.empty());
  RunConfig c = apply(ds);
  EXPECT_EQ(c.optim.decay, LrDecay::linear);
  EXPECT_FLOAT_EQ(c.optim.lr, 5e-4f);
  EXPECT_EQ(c.optim.min_lr, 0.0f);
  EXPECT_EQ(c.optim.warmup_steps, 10);
  EXPECT_EQ(c.train.steps, 100);

  // WarmupLR: constant after warmup; DeepSpeed's default warmup_type is "log" (warned about);
  // warmup_min_lr > 0 cannot start strata's warmup (warned about).
  ds = translate_deepspeed(json::parse(R"({"scheduler": {"type": "WarmupLR",
    "params": {"warmup_min_lr": 1e-5, "warmup_max_lr": 1e-3, "warmup_num_steps": 4}}})"),
                           "ds");
  c = apply(ds);
  EXPECT_EQ(c.optim.decay, LrDecay::constant);
  EXPECT_FLOAT_EQ(c.optim.lr, 1e-3f);
  EXPECT_EQ(c.optim.warmup_steps, 4);
  EXPECT_EQ(c.train.steps, 6);
  EXPECT_TRUE(has_warning(ds, "scheduler.params.warmup_type"));
  EXPECT_TRUE(has_warning(ds, "scheduler.params.warmup_min_lr"));

  // WarmupCosineLR: the floor is cos_min_ratio times the final lr, --set included.
  ds = translate_deepspeed(json::parse(R"({"optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
    "scheduler": {"type": "WarmupCosineLR", "params": {"total_num_steps": 50,
      "warmup_num_steps": 5, "cos_min_ratio": 0.1, "warmup_type": "linear"}}})"),
                           "ds");
  const std::string toml = toml_file();
  c = load_config_with_deepspeed(toml, ds, {});
  EXPECT_EQ(c.optim.decay, LrDecay::cosine);
  EXPECT_FLOAT_EQ(c.optim.lr, 1e-3f);
  EXPECT_FLOAT_EQ(c.optim.min_lr, 1e-4f);
  EXPECT_EQ(c.train.steps, 50);
  c = load_config_with_deepspeed(toml, ds, {"optim.lr=2e-3"});
  EXPECT_FLOAT_EQ(c.optim.min_lr, 2e-4f);
  c = load_config_with_deepspeed(toml, ds, {"optim.min_lr=0"});
  EXPECT_EQ(c.optim.min_lr, 0.0f);  // --set wins

  EXPECT_NE(error_of([] {
              translate_deepspeed(json::parse(R"({"scheduler": {"type": "WarmupLR",
                "params": {"total_num_steps": 5}}})"),
                                  "d");
            }).find("scheduler.params.total_num_steps"),
            std::string::npos);
}

// The batch rule with a given world size: resolve_deepspeed_batch over the TOML (micro-batch 4,
// accumulation 3).
RunConfig resolved(const std::string& ds_json, int64_t world, std::vector<std::string> sets = {},
                   std::vector<std::string> toml_sets = {}) {
  const DeepSpeedConfig ds = translate_deepspeed(json::parse(ds_json), "ds.json");
  toml_sets.insert(toml_sets.end(), sets.begin(), sets.end());
  RunConfig c = apply(ds, toml_sets);
  resolve_deepspeed_batch(c, ds, sets, world);
  return c;
}

TEST(DeepSpeedConfig, BatchRule) {
  // Two given: the third derived, with dp = world / (tp * pp).
  RunConfig c = resolved(R"({"train_batch_size": 16, "train_micro_batch_size_per_gpu": 2})", 4);
  EXPECT_EQ(c.train.batch_size, 2);
  EXPECT_EQ(c.train.grad_accum, 2);
  c = resolved(R"({"train_batch_size": 16, "gradient_accumulation_steps": 2})", 2);
  EXPECT_EQ(c.train.batch_size, 4);
  EXPECT_EQ(c.train.grad_accum, 2);
  c = resolved(R"({"train_batch_size": 16, "train_micro_batch_size_per_gpu": 2})", 4, {},
               {"parallel.tp=2"});
  EXPECT_EQ(c.train.grad_accum, 4);  // dp = 4 / 2
  // Context parallelism: the cp ranks of a data replica share its sequences (dp / cp replicas).
  c = resolved(R"({"train_batch_size": 16, "train_micro_batch_size_per_gpu": 2})", 4, {},
               {"parallel.cp=2", "model.attention=\"flash\""});
  EXPECT_EQ(c.train.grad_accum, 4);  // 2 replicas of 2 cp ranks
  // Only train_batch_size: accumulation 1, as DeepSpeed does.
  c = resolved(R"({"train_batch_size": 16})", 2);
  EXPECT_EQ(c.train.batch_size, 8);
  EXPECT_EQ(c.train.grad_accum, 1);
  // All three, consistent.
  c = resolved(R"({"train_batch_size": 12, "train_micro_batch_size_per_gpu": 2,
                   "gradient_accumulation_steps": 3})",
               2);
  EXPECT_EQ(c.train.batch_size, 2);
  EXPECT_EQ(c.train.grad_accum, 3);
  // Without train_batch_size nothing depends on the world size.
  c = resolved(R"({"train_micro_batch_size_per_gpu": 2})", 8);
  EXPECT_EQ(c.train.batch_size, 2);
  EXPECT_EQ(c.train.grad_accum, 3);
  // --set counts as given: an elastic restart's accumulation keeps the global batch.
  c = resolved(R"({"train_batch_size": 16, "train_micro_batch_size_per_gpu": 2})", 1,
               {"train.grad_accum=8"});
  EXPECT_EQ(c.train.grad_accum, 8);
}

TEST(DeepSpeedConfig, BatchRuleErrorsNameTheNumbers) {
  std::string e = error_of([] {
    resolved(R"({"train_batch_size": 16, "train_micro_batch_size_per_gpu": 2,
                 "gradient_accumulation_steps": 3})",
             2);
  });
  EXPECT_NE(e.find("train_batch_size 16 != train_micro_batch_size_per_gpu 2 x "
                   "gradient_accumulation_steps 3 x data-parallel size 2 = 12"),
            std::string::npos)
      << e;
  e = error_of([] {
    resolved(R"({"train_batch_size": 16, "train_micro_batch_size_per_gpu": 2})", 2,
             {"train.grad_accum=3"});
  });
  EXPECT_NE(e.find("gradient_accumulation_steps 3 (--set)"), std::string::npos) << e;
  e = error_of(
      [] { resolved(R"({"train_batch_size": 10, "train_micro_batch_size_per_gpu": 4})", 1); });
  EXPECT_NE(e.find("train_batch_size 10 is not a multiple of train_micro_batch_size_per_gpu 4"),
            std::string::npos)
      << e;
  e = error_of([] { resolved(R"({"train_batch_size": 16})", 3, {}, {"parallel.tp=2"}); });
  EXPECT_NE(e.find("train_batch_size needs the data-parallel size: parallel.tp=2 x parallel.pp=1 "
                   "= 2 ranks per model replica does not divide the world size 3"),
            std::string::npos)
      << e;
}

TEST(DeepSpeedConfig, WithoutDeepSpeedNothingChanges) {
  const std::string toml = toml_file();
  RunConfig c = load_config_with_deepspeed(toml, DeepSpeedConfig{}, {"train.steps=9"});
  EXPECT_EQ(c.train.steps, 9);
  resolve_deepspeed_batch(c, DeepSpeedConfig{}, {}, 7);
  EXPECT_EQ(c.train.batch_size, 4);
  EXPECT_EQ(c.train.grad_accum, 3);
}

TEST(DeepSpeedConfig, FileErrors) {
  const auto path = std::filesystem::temp_directory_path() / "strata_test_ds_bad.json";
  std::ofstream(path) << "{\"train_batch_size\": 8,,}";
  const std::string e = error_of([&] { read_deepspeed(path.string()); });
  EXPECT_NE(e.find("strata_test_ds_bad.json: JSON syntax error"), std::string::npos) << e;
  EXPECT_NE(error_of([] { read_deepspeed("/nonexistent/ds.json"); }).find("/nonexistent/ds.json"),
            std::string::npos);
  // A mapped value the TOML checks reject names the DeepSpeed file too.
  const std::string bad = error_of([] {
    load_config_with_deepspeed(
        toml_file(), translate_deepspeed(json::parse(R"({"gradient_clipping": -1})"), "ds.json"),
        {});
  });
  EXPECT_NE(bad.find("optim.grad_clip"), std::string::npos) << bad;
  EXPECT_NE(bad.find("with DeepSpeed config ds.json"), std::string::npos) << bad;
}

}  // namespace
}  // namespace strata
