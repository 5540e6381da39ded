#include "run/run_plan.h"

#include <algorithm>

#include "core/error.h"

namespace strata {

namespace {

DType gemm_type(Precision p) {
  switch (p) {
    case Precision::bf16:
      return DType::bf16;
    case Precision::fp16:
      return DType::f16;
    case Precision::f32:
      break;
  }
  return DType::f32;
}

DataParallelOptions data_parallel_options(const ParallelConfig& p) {
  DataParallelOptions opt;
  opt.zero = static_cast<int>(p.zero);
  opt.bucket_elements = std::max<int64_t>(1, static_cast<int64_t>(p.bucket_mb * (1 << 20) / 4));
  opt.overlap = p.overlap;
  opt.reduce_dtype = p.grad_reduce_dtype == GradReduceType::bf16 ? DType::bf16 : DType::f32;
  return opt;
}

}  // namespace

int64_t micro_batches_per_step(const RunConfig& config) {
  return config.parallel.micro_batches > 0 ? config.parallel.micro_batches
                                           : config.train.grad_accum;
}

int64_t data_parallel_size(const ParallelConfig& p, int64_t world) {
  if (p.dp > 0) return p.dp;
  // resolve_layout derives it (and says what would fit when the world does not divide).
  return resolve_layout(static_cast<int>(p.tp), static_cast<int>(p.pp), 0, 0,
                        static_cast<int>(world))
      .dp;
}

RunPlan resolve_run_plan(const RunConfig& config, int64_t world, bool under_launcher) {
  RunPlan r;
  r.config = config;
  r.world = world;
  const ParallelConfig& p = config.parallel;
  const TrainConfig& t = config.train;
  // A process that runs alone (no launcher, world 1) has one-rank groups of its own and ZeRO
  // stage 0, nothing to shard over; a layout of more than one rank is refused here, saying what
  // would fit. One rank of a launched job keeps parallel.zero, even at world size 1.
  const bool alone = !under_launcher && world == 1;
  r.layout = resolve_layout(static_cast<int>(p.tp), static_cast<int>(p.pp), static_cast<int>(p.dp),
                            alone ? 0 : static_cast<int>(p.zero), static_cast<int>(world),
                            static_cast<int>(p.ep), static_cast<int>(p.cp));
  r.model = config.model;
  r.model.finalize();
  r.micro_batches = micro_batches_per_step(config);
  r.seq_len = t.seq_len / r.layout.cp;
  r.tokens = t.batch_size * r.seq_len;
  r.shard = ShardSpec{r.layout.tp,    r.layout.pp, static_cast<int>(p.vpp), p.sp, r.tokens,
                      p.stage_layers, r.layout.ep};
  // The model must split over tp (heads, kv heads, MLP, vocabulary), sp and the pipeline
  // stages: checked once, here, for the first rank (every rank's split has the same rules).
  if (r.sharded_model()) r.shard.for_rank(r.model, 0, 0);
  r.precision = gemm_type(t.precision);
  r.loss_scaling = t.precision == Precision::fp16;
  r.recompute = {t.recompute, t.recompute_layers};
  r.offload_activations = t.activation_offload;
  r.attention = config.model.attention;
  r.optimizer_offload = config.optim.offload;
  r.offload_chunk_elements =
      std::max<int64_t>(1024, static_cast<int64_t>(config.optim.offload_chunk_mb * (1 << 20) / 4));
  r.data_parallel = data_parallel_options(p);
  r.data_parallel.zero = r.layout.zero;
  r.schedule = p.schedule;
  r.device = config.system.device;
  const std::string& resume = config.run.resume;
  r.resume = resume == "auto"   ? ResumeMode::latest
             : resume == "none" ? ResumeMode::none
                                : ResumeMode::path;
  if (r.resume == ResumeMode::path) r.resume_path = resume;
  return r;
}

ModelShard RunPlan::shard_for(int tp_rank, int pp_rank, int ep_rank) const {
  return sharded_model() ? shard.for_rank(model, tp_rank, pp_rank, ep_rank)
                         : ModelShard::whole(model);
}

DecoderOptions RunPlan::decoder_options(int tp_rank, int pp_rank, int ep_rank) const {
  DecoderOptions o;
  o.recompute = recompute;
  o.precision = precision;
  o.offload_activations = offload_activations;
  if (sharded_model()) o.shard = shard.for_rank(model, tp_rank, pp_rank, ep_rank);
  return o;
}

}  // namespace strata
