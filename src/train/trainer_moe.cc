// The Trainer's Mixture-of-Experts bookkeeping after a step's micro-batches: the statistics over
// the step's global batch (record_moe) and DeepSeek-V3's router-bias update (update_router_bias).
#include <algorithm>
#include <vector>

#include "comm/process_groups.h"
#include "kernels/cpu/moe.h"
#include "model/decoder.h"
#include "parallel/data_parallel.h"
#include "train/train_device.h"
#include "train/trainer.h"

namespace strata {

void Trainer::update_router_bias(const StepResult& r) {
  const MoeConfig& m = config_.model.moe;
  if (m.bias_update_rate <= 0) return;
  const int64_t e = m.experts;
  const ParamStore& params = model_->params();
  const std::vector<BlockParams>& blocks = model_->index().blocks;
  std::vector<float> delta(static_cast<size_t>(e)), bias;
  for (size_t l = 0; l < blocks.size(); ++l) {
    const int idx = blocks[l].router_b;
    if (idx < 0) continue;  // a layer another pipeline stage holds
    // The step's load over the whole global batch (record_moe), the same on every rank, so
    // every replica (and ZeRO shard) moves its copy of the bias alike.
    std::fill(delta.begin(), delta.end(), 0.0f);
    kernels::moe_update_bias(delta.data(), r.moe_tokens_per_expert[l].data(), e,
                             m.bias_update_rate);
    auto add = [&](float* device, int64_t begin, int64_t count) {
      bias.resize(static_cast<size_t>(count));
      device_->download(bias.data(), device, count);
      for (int64_t i = 0; i < count; ++i) bias[i] += delta[begin + i];
      device_->upload(device, bias.data(), count);
    };
    if (!dp_->params_sharded())
      add(params.param(idx), 0, e);
    else
      for (const DataParallel::ShardRun& run : dp_->shard_runs(idx))
        add(dp_->shard_params() + run.shard_offset, run.begin, run.count);
  }
}

void Trainer::record_moe(StepResult& r, int64_t micro_batches) {
  // Per layer [aux, z, dropped, tokens per expert...]: the layers this pipeline stage holds (the
  // others are zero here), summed over pp; the loads and drops summed over the ranks whose rows
  // differ (dp, and tp under sp), the balancing losses averaged over them, as the loss is.
  const std::vector<MoeLayerStats>& layers = model_->moe_stats();
  const int64_t e = config_.model.moe.experts, width = 3 + e;
  const size_t L = layers.size();
  std::vector<float> v(L * static_cast<size_t>(width), 0.0f);
  for (size_t l = 0; l < L; ++l) {
    float* row = v.data() + l * static_cast<size_t>(width);
    row[0] = static_cast<float>(layers[l].aux_loss / static_cast<double>(micro_batches));
    row[1] = static_cast<float>(layers[l].z_loss / static_cast<double>(micro_batches));
    row[2] = static_cast<float>(layers[l].dropped);
    for (int64_t x = 0; x < e && x < static_cast<int64_t>(layers[l].tokens_per_expert.size()); ++x)
      row[3 + x] = static_cast<float>(layers[l].tokens_per_expert[x]);
  }
  const int64_t count = static_cast<int64_t>(v.size());
  const bool sp = config_.parallel.sp && groups_->tp().size() > 1;
  double replicas = 1;
  for (Comm* c : {&groups_->dp(), sp ? &groups_->tp() : nullptr})
    if (c && c->size() > 1) {
      c->all_reduce(v.data(), count, DType::f32, ReduceOp::sum)->wait();
      replicas *= c->size();
    }
  if (groups_->pp().size() > 1)
    groups_->pp().all_reduce(v.data(), count, DType::f32, ReduceOp::sum)->wait();
  r.moe_layers.assign(L, {});
  r.moe_tokens_per_expert.assign(L, std::vector<int64_t>(static_cast<size_t>(e), 0));
  for (size_t l = 0; l < L; ++l) {
    const float* row = v.data() + l * static_cast<size_t>(width);
    StepResult::MoeLayer& out = r.moe_layers[l];
    out.aux_loss = row[0] / replicas;
    out.z_loss = row[1] / replicas;
    out.dropped = static_cast<int64_t>(row[2]);
    for (int64_t x = 0; x < e; ++x)
      r.moe_tokens_per_expert[l][x] = static_cast<int64_t>(row[3 + x]);
    r.moe_aux_loss += out.aux_loss;
    r.moe_z_loss += out.z_loss;
    r.moe_dropped += out.dropped;
  }
}

}  // namespace strata
