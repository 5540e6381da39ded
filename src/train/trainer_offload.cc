// optim.offload = "cpu" (ZeRO-Offload): the trainer's side of HostOffloadAdamW.
#include "comm/process_groups.h"
#include "core/log.h"
#include "model/decoder.h"
#include "optim/host_offload.h"
#include "parallel/data_parallel.h"
#include "parallel/model_parallel.h"
#include "parallel/pipeline_executor.h"
#include "run/run_plan.h"
#include "track/console.h"
#include "track/metrics.h"
#include "train/token_source.h"
#include "train/train_device.h"
#include "train/trainer.h"

namespace strata {

void Trainer::make_host_offload(std::vector<OptimSegment> segments, int64_t state_size) {
  // The host update rounds the bf16 working copy as AdamW would, and uploads it with the params.
  optimizer_writes_bf16_ = attach_bf16_copy(segments);
  HostOffloadOptions o;
  o.chunk_elements = plan_.offload_chunk_elements;
  auto host = std::make_unique<HostOffloadAdamW>(std::move(segments), state_size, config_.optim,
                                                 model_->backend(), o);
  // A world of one rank at ZeRO stage 0 reduces nothing, so each group's gradients are final
  // when backward has finished them and start downloading then (DataParallel's hooks do nothing
  // there and give way). Otherwise the DataParallel hooks are the model's, and step() downloads
  // after the reduction.
  if (world_ == 1 && dp_->zero_stage() == 0) {
    offload_hooks_ = std::make_unique<HostOffloadGradHooks>(model_->params(), *host);
    model_->set_hooks(offload_hooks_.get());
  }
  const MemStats host_mem = host->host_arena().stats();
  log::info("optimizer state offloaded to host memory: ", host_mem.total_current >> 20, " MiB in ",
            host->num_chunks(), " chunks of ", config_.optim.offload_chunk_mb, " MB",
            offload_hooks_ ? "; gradients download during backward" : "");
  optimizer_ = std::move(host);
}

}  // namespace strata
