// RunConfig: everything a run needs, read from TOML with `--set section.key=value` overrides.
// Unknown keys, wrong types and inconsistent values are errors that name the key and the problem.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "data/data_config.h"
#include "model/config.h"
#include "model/cp_impl.h"
#include "model/recompute_mode.h"
#include "optim/optim_config.h"
#include "parallel/pipeline_schedule.h"
#include "run/ecosystem_config.h"
#include "run/reliability_config.h"

namespace strata {

// train.precision: f32, or mixed precision with 16-bit GEMMs (run_plan.h maps it to a DType).
enum class Precision { f32, bf16, fp16 };
template <>
struct EnumNames<Precision> {
  static constexpr std::string_view names[] = {"f32", "bf16", "fp16"};
};

// parallel.grad_reduce_dtype: the type gradients travel in across data-parallel ranks.
enum class GradReduceType { f32, bf16 };
template <>
struct EnumNames<GradReduceType> {
  static constexpr std::string_view names[] = {"f32", "bf16"};
};

struct TrainConfig {
  int64_t steps = 200;           // optimizer steps
  uint64_t seed = 1337;          // model init, data order, sampling
  int64_t batch_size = 8;        // micro-batch size B (sequences per micro-batch per rank)
  int64_t seq_len = 256;         // T; must be <= model.max_seq_len
  int64_t grad_accum = 1;        // micro-batches per optimizer step
  int64_t eval_every = 50;       // steps between validation evaluations (0: only at the end)
  int64_t eval_batches = 8;      // micro-batches per evaluation
  int64_t log_every = 10;        // steps between plain log lines when not on a terminal
  int64_t checkpoint_every = 0;  // steps between checkpoints (0: only at the end)
  int64_t keep_last = 2;         // checkpoints kept
  // Snapshot the state into a buffer and write it on a background thread while training goes on
  // (false: write before the next step starts).
  bool async_checkpoint = true;
  // "f32", or mixed precision "bf16" / "fp16": 16-bit GEMMs with f32 accumulation, f32 master
  // weights and optimizer state; fp16 adds dynamic loss scaling ([fp16]).
  Precision precision = Precision::f32;
  // Activation recomputation: "none", "selective" (attention probabilities) or "full" (keep
  // only each block's input); recompute_layers: the first N layers of each pipeline chunk (0: all).
  Recompute recompute = Recompute::none;
  int64_t recompute_layers = 0;
  // Move each block's saved activations to host memory after its forward and back before its
  // backward (DecoderOptions::offload_activations); with recompute "none" or "selective", and
  // without pipeline parallelism.
  bool activation_offload = false;
};

struct RunDirConfig {
  std::string dir = "runs/default";
  std::string resume = "auto";  // "auto": from dir/ckpt/latest if present; "none"; or a path
};

struct SystemConfig {
  int64_t threads = 0;          // 0: all cores
  int64_t memory_limit_mb = 0;  // 0: no limit; otherwise the arena enforces it
  // Where the model, its gradients and the optimizer state live: "cpu", or "cuda" (one GPU per
  // rank: local rank modulo the visible GPUs; builds with the CUDA backend only).
  Device device = Device::cpu;
};

// [parallel]: how ranks are arranged (Megatron order: tp fastest, then dp, then pp) and how
// gradients are synchronised across data-parallel ranks.
struct ParallelConfig {
  int64_t tp = 1;    // tensor-parallel size
  int64_t pp = 1;    // pipeline-parallel size
  int64_t dp = 0;    // data-parallel size; 0 derives it from the world size
  int64_t zero = 0;  // ZeRO stage: 0 (DDP), 1 (optimizer state), 2 (+ gradients), 3 (+ parameters)
  // Expert parallelism (MoE families): the experts of each layer split over ep ranks, carved out
  // of dp (comm/layout.h); must divide dp and model.moe.experts.
  int64_t ep = 1;
  // Context parallelism: each sequence split over cp ranks (2 * cp chunks, rank r holding chunks
  // r and 2cp-1-r so that causal attention costs every rank the same), carved out of dp like ep
  // (comm/layout.h); cp_impl: how attention sees the other ranks' keys and values
  // (model/context_attention.h).
  int64_t cp = 1;
  CpImpl cp_impl = CpImpl::ring;
  bool sp = false;  // sequence parallelism (with tp > 1)
  int64_t vpp = 1;  // virtual pipeline stages (model chunks) per pp rank
  ScheduleKind schedule = ScheduleKind::one_f_one_b;
  int64_t micro_batches = 0;  // micro-batches per step; 0: train.grad_accum
  std::vector<int64_t>
      stage_layers;             // layers per virtual stage (pp * vpp entries); empty: balanced
  double bucket_mb = 25;        // gradient bucket size for the overlapped reduction
  bool overlap = true;          // start each bucket's reduction as soon as backward fills it
  double comm_timeout_s = 300;  // every wait on a collective ends after this, naming the op
  GradReduceType grad_reduce_dtype = GradReduceType::f32;
};

struct SampleConfig {
  std::string prompt = "";
  int64_t max_new_tokens = 0;  // 0: no sample at the end of training
  float temperature = 0.8f;
  int64_t top_k = 40;
};

// [track]: where metrics go besides RUN_DIR/metrics.jsonl (which is always written).
struct TrackConfig {
  // TensorBoard event files in RUN_DIR/tensorboard (rank 0): every number of each metrics line.
  bool tensorboard = true;
};

// [profile]: the tracer (core/trace.h) over a window of steps, as torch.profiler's schedule:
// Chrome-trace JSON per rank in RUN_DIR/trace/rank_N.json, merged into RUN_DIR/trace/trace.json.
struct ProfileConfig {
  bool enabled = false;
  int64_t start_step = 2;      // the first traced step (1-based; step 1 pays one-time costs)
  int64_t steps = 3;           // steps traced
  int64_t max_events = 65536;  // buffer per rank, preallocated (200 bytes an event)
};

struct RunConfig {
  ModelConfig model;
  TrainConfig train;
  OptimConfig optim;
  DataConfig data;
  RunDirConfig run;
  SystemConfig system;
  ParallelConfig parallel;
  SampleConfig sample;
  LossScalerConfig fp16;  // [fp16]: loss scaling for train.precision = "fp16" (DeepSpeed's keys)
  FaultConfig fault;      // [fault]: injected faults (reliability_config.h)
  AnomalyConfig anomaly;  // [anomaly]: detectors
  TrackConfig track;      // [track]: metric sinks
  PostTrainConfig post_train;  // [post_train]: registry hand-off and evaluation
  MlflowConfig mlflow;         // [mlflow]: MLflow tracking
  ProfileConfig profile;       // [profile]: the tracer
};

// Parses TOML text; `source` names the file in messages. Overrides are "section.key=value" with the
// value in TOML syntax, or a bare string (`--set run.dir=runs/x` works without quotes).
RunConfig parse_config(const std::string& toml_text, const std::string& source,
                       const std::vector<std::string>& overrides = {});
RunConfig load_config(const std::string& path, const std::vector<std::string>& overrides = {});
// For `strata plan`, which predicts runs this build's engine cannot train yet (an MoE model in
// bf16 on GPUs, say): everything is checked as above except the engine's own limits
// (validate_config), which are returned in `engine_limits`, one message each, instead of failing.
RunConfig parse_config(const std::string& toml_text, const std::string& source,
                       const std::vector<std::string>& overrides,
                       std::vector<std::string>* engine_limits);
RunConfig load_config_for_plan(const std::string& path, const std::vector<std::string>& overrides,
                               std::vector<std::string>& engine_limits);

// Round trip through JSON (for checkpoint metadata and reports). Keys match the TOML keys.
nlohmann::json config_to_json(const RunConfig& config);
RunConfig config_from_json(const nlohmann::json& j);

}  // namespace strata
