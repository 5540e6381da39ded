// RunPlan: what a RunConfig becomes once the world size is known, resolved in one place
// (resolve_run_plan) and read by everything that acts on a run: `strata train` (which layout to
// start, whether MPI is needed), the Trainer (build_model, make_optimizer, resume), the planner
// (plan/memory_model.cc, plan/perf_model.cc: the same buffers the trainer allocates), `strata
// launch` and the DeepSpeed batch rule (the data-parallel size). The config's string options are
// enums by now (parsed once, in run/config.cc); the plan adds what follows from them together:
// the layout with dp derived, the shard, the decoder and data-parallel options, the GEMM type.
#pragma once
#include <cstdint>
#include <string>

#include "comm/layout.h"
#include "core/dtype.h"
#include "model/activations.h"
#include "model/decoder.h"
#include "parallel/data_parallel.h"
#include "parallel/model_parallel.h"
#include "run/config.h"

namespace strata {

// run.resume: "auto" (dir/ckpt/latest if present), "none", or a checkpoint path.
enum class ResumeMode { latest, none, path };

struct RunPlan {
  RunConfig config;  // validated; the plain numbers (steps, lr, ...) are read from it
  int64_t world = 1;
  Layout layout;      // tp, pp, dp and zero; dp derived here; zero 0 for a process that runs alone
  ModelConfig model;  // config.model, finalized
  ShardSpec shard;    // how the model splits over tp and pp (for_rank)
  int64_t micro_batches = 1;  // per optimizer step (parallel.micro_batches or train.grad_accum)
  int64_t tokens = 0;         // per micro-batch and rank: batch_size x seq_len
  // Rows per sequence this rank holds: train.seq_len, or train.seq_len / cp with context
  // parallelism (ContextSplit in model/context_attention.h).
  int64_t seq_len = 0;
  DType precision = DType::f32;  // the GEMMs' operand type (f32, bf16 or f16)
  bool loss_scaling = false;     // fp16: dynamic loss scaling ([fp16])
  RecomputePolicy recompute;
  bool offload_activations = false;
  AttentionKernel attention = AttentionKernel::naive;
  OptimizerOffload optimizer_offload = OptimizerOffload::none;
  int64_t offload_chunk_elements = 0;  // optim.offload_chunk_mb in f32 elements
  DataParallelOptions data_parallel;
  ScheduleKind schedule = ScheduleKind::one_f_one_b;
  Device device = Device::cpu;
  ResumeMode resume = ResumeMode::latest;
  std::string resume_path;  // ResumeMode::path

  // The model is split over ranks (tp, pp or ep > 1); otherwise every rank holds all of it.
  bool sharded_model() const { return layout.tp > 1 || layout.pp > 1 || layout.ep > 1; }
  // The part of the model the rank at (tp_rank, pp_rank, ep_rank) holds: the whole model unless
  // sharded.
  ModelShard shard_for(int tp_rank, int pp_rank, int ep_rank = 0) const;
  // The decoder's options that follow from the config: recomputation, precision, activation
  // offload and the shard at (tp_rank, pp_rank). The caller adds the runtime parts (backend,
  // tp group, pipeline slots, the data-parallel plan hook).
  DecoderOptions decoder_options(int tp_rank = 0, int pp_rank = 0, int ep_rank = 0) const;
};

// `under_launcher`: this process is one rank of a launched job (it has process groups even at
// world size 1). Throws, naming the keys, when the layout does not fit `world` or the model does
// not split over it.
RunPlan resolve_run_plan(const RunConfig& config, int64_t world, bool under_launcher);

// The data-parallel size: parallel.dp, or what the world leaves after tp x pp, derived by
// resolve_layout (comm/layout.h) as for the ranks themselves; throws, saying what would fit, when
// the world is not a multiple of tp x pp.
int64_t data_parallel_size(const ParallelConfig& parallel, int64_t world);

int64_t micro_batches_per_step(const RunConfig& config);  // parallel.micro_batches or grad_accum

}  // namespace strata
