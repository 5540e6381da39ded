#include "model/decoder.h"

#include <string>

#include "core/trace.h"

namespace strata {

// ---- construction ------------------------------------------------------------------------------

void Decoder::check_moe_supported() {
  // The MoE FFN runs in f32 on the CPU kernels (GitHub issue 21), with any tp, sp, pp and ep;
  // the rest is refused here, before anything is allocated.
  const std::string moe = cat("model.moe.experts > 0 (family ", family_name(config_.family), ")");
  STRATA_CHECK(precision_ == DType::f32, moe,
               " trains in f32 only so far: set train.precision = \"f32\"");
  STRATA_CHECK(backend_.kind() == Device::cpu, moe,
               " runs on the CPU only so far: set system.device = \"cpu\"");
  moe_stats_.resize(static_cast<size_t>(config_.n_layer));
  for (MoeLayerStats& st : moe_stats_)
    st.tokens_per_expert.assign(static_cast<size_t>(config_.moe.experts), 0);
}

void Decoder::reset_moe_stats() {
  for (MoeLayerStats& st : moe_stats_) st.reset();
}

double Decoder::moe_loss() const {
  double sum = 0;
  for (const MoeLayerStats& st : moe_stats_) sum += st.aux_loss + st.z_loss;
  return sum;
}

Decoder::Decoder(const ModelConfig& config, Arena& arena, int64_t batch, int64_t seq_len,
                 DecoderOptions o)
    : config_(config),
      arena_(arena),
      backend_(o.backend ? *o.backend : cpu_backend()),
      batch_(batch),
      seq_len_(seq_len) {
  config_.finalize();
  STRATA_CHECK(config_.flash_attention() || backend_.supports_naive_attention(),
               "model.attention = \"naive\" is not available on ", device_name(backend_.kind()),
               "; use \"flash\"");
  STRATA_CHECK(arena.memory() == backend_.memory(), "Decoder: the arena's memory (",
               arena.memory() ? arena.memory()->name() : std::string("host"),
               ") is not the memory of the model's backend (",
               backend_.memory() ? backend_.memory()->name() : std::string("host"),
               "): construct the Arena with backend.memory()");
  STRATA_CHECK(seq_len <= config_.max_seq_len, "train.seq_len = ", seq_len,
               " exceeds model.max_seq_len = ", config_.max_seq_len);
  shard_ = o.shard ? *o.shard : ModelShard::whole(config_);
  STRATA_CHECK(shard_.tp == (o.tp ? o.tp->size() : 1),
               "Decoder: the shard's tp does not match the tensor-parallel group");
  tp_ = TensorParallel(o.tp, shard_.sp, &backend_);
  STRATA_CHECK(shard_.ep == (o.ep ? o.ep->size() : 1),
               "Decoder: the shard's ep does not match the expert-parallel group");
  ep_ = ExpertParallel(o.ep);
  batch_groups_ = o.batch_groups;
  precision_ = o.precision;
  STRATA_CHECK(precision_ == DType::f32 || precision_ == DType::bf16 || precision_ == DType::f16,
               "Decoder: precision must be f32, bf16 or f16");
  block_ = &block_for(config_.family);
  if (block_->layout().moe) check_moe_supported();
  index_ = register_model_params(config_, shard_, params_);
  if (o.plan) o.plan(params_);
  if (lowp()) params_.set_param_category(MemCategory::master);
  params_.allocate(arena, &backend_);
  if (lowp()) lowp_weights_ = LowpWeights(params_, arena, backend_, precision_);
  acts_.resize(static_cast<size_t>(shard_.num_chunks()));
  if (o.offload_activations) {
    // One store whose layers are the offload's views (the store itself holds the rest: tokens,
    // embedding output, head).
    STRATA_CHECK(shard_.num_chunks() == 1 && shard_.has_embedding && shard_.has_head,
                 "activation offload runs the whole depth in one process or data-parallel rank; "
                 "it is not available with pipeline parallelism (parallel.pp > 1)");
    STRATA_CHECK(o.slots == 1 && (o.chunk_slots.empty() || o.chunk_slots == std::vector<int>{1}),
                 "activation offload keeps one micro-batch's activations (one slot), not ",
                 o.chunk_slots.empty() ? o.slots : o.chunk_slots[0]);
    const LayerRange r = shard_.chunks[0];
    acts_[0].push_back(
        std::make_unique<ActivationStore>(config_, shard_, LayerRange{r.begin, r.begin}, true, true,
                                          arena, batch, seq_len, o.recompute, precision_));
    offload_ = std::make_unique<ActivationOffload>(config_, shard_, r, o.recompute, arena, backend_,
                                                   batch, seq_len, precision_);
    acts_[0][0]->layers = offload_->layers();
  }
  for (int chunk = 0; chunk < shard_.num_chunks() && !offload_; ++chunk) {
    const int slots = o.chunk_slots.empty() ? o.slots : o.chunk_slots[chunk];
    for (int s = 0; s < slots; ++s)
      acts_[chunk].push_back(std::make_unique<ActivationStore>(
          config_, shard_, shard_.chunks[chunk], shard_.chunk_has_embedding(chunk),
          shard_.chunk_has_head(chunk), arena, batch, seq_len, o.recompute, precision_));
  }
  // Each activation store (chunk, slot) has its masks: the context slot, counted in store order.
  int context_slots = 0;
  for (auto& chunk : acts_)
    for (auto& store : chunk) store->context_slot = context_slots++;
  context_ =
      ContextAttention(o.context, config_, shard_, arena, backend_, batch, seq_len, context_slots);
  scratch_ = GradScratch(config_, shard_, arena, batch, seq_len, precision_, &backend_);
  recompute_ = o.recompute;
  recompute_buffers_ = allocate_recompute_buffers(config_, shard_, recompute_.mode, arena, batch,
                                                  seq_len, precision_);
  linear_ = ParallelLinear(backend_, tp_, shard_, params_, scratch_, lowp_weights_, precision_,
                           config_.d_model);
}

Decoder::Decoder(const ModelConfig& config, Arena& arena, int64_t batch, int64_t seq_len, int slots,
                 const std::function<void(ParamStore&)>& plan)
    : Decoder(config, arena, batch, seq_len,
              DecoderOptions{slots,
                             {},
                             plan,
                             std::nullopt,
                             nullptr,
                             nullptr,
                             {},
                             DType::f32,
                             nullptr,
                             false,
                             {},
                             {}}) {}

const float* Decoder::head_weight() const {
  return params_.param(index_.head >= 0 ? index_.head : index_.embed);
}
float* Decoder::head_grad() const {
  return params_.grad(index_.head >= 0 ? index_.head : index_.embed);
}

int64_t Decoder::boundary_elements() const {
  return shard_.local_rows(batch_ * seq_len_) * config_.d_model;
}

const float* Decoder::layer_input(const ActivationStore& a, int64_t local_layer) const {
  return local_layer == 0 ? a.embed_out : a.layers[local_layer - 1].resid_out;
}

LayerActivations Decoder::layer_view(const ActivationStore& a, int64_t local_layer,
                                     bool rebuilding) const {
  const LayerActivations& own = a.layers[local_layer];
  LayerActivations l = own;
  switch (recompute_.for_layer(local_layer)) {
    case Recompute::none:
      break;
    case Recompute::selective:
      if (!config_.flash_attention()) l.probs = recompute_buffers_.probs;
      break;
    case Recompute::full:
      l = recompute_buffers_;
      l.resid_out = rebuilding ? recompute_buffers_.resid_out : own.resid_out;
      break;
  }
  if (lowp()) {  // f32 versions of what the layer keeps in 16 bits are shared and transient
    const LayerActivations& t = scratch_.transient;
    if (!l.attn_norm) l.attn_norm = t.attn_norm;
    if (!l.qkv) l.qkv = t.qkv;
    if (!l.mlp_norm) l.mlp_norm = t.mlp_norm;
    if (!l.mlp_act) l.mlp_act = t.mlp_act;
    if (!l.attn_out) l.attn_out = t.attn_out;
    if (!l.attn_out_lp) l.attn_out_lp = t.attn_out_lp;  // flash keeps f32 attn_out instead
  }
  return l;
}

void Decoder::acquire_layer_params(int layer) {
  hooks_->acquire_params(layer_group(layer));
  if (moe()) hooks_->acquire_params(expert_group(config_, layer));
}

void Decoder::release_layer_params(int layer) {
  if (moe()) hooks_->release_params(expert_group(config_, layer));
  hooks_->release_params(layer_group(layer));
}

BlockRun Decoder::block_run(int layer, const ActivationStore& a) {
  MoeLayerStats* moe = moe_stats_.empty() ? nullptr : &moe_stats_[static_cast<size_t>(layer)];
  return BlockRun{backend_,
                  config_,
                  shard_,
                  tp_,
                  params_,
                  scratch_,
                  linear_,
                  index_.blocks[layer],
                  a.b,
                  a.t,
                  moe,
                  loss_scale_,
                  &ep_,
                  false,
                  batch_groups_.empty() ? nullptr : &batch_groups_,
                  context_.active() ? &context_ : nullptr,
                  a.context_slot};
}

// ---- forward -----------------------------------------------------------------------------------

void Decoder::embedding_forward(ActivationStore& a, const int32_t* tokens) {
  const int64_t n = a.b * a.t, c = config_.d_model, v = config_.vocab_size;
  for (int64_t i = 0; i < n; ++i) {
    STRATA_CHECK(tokens[i] >= 0 && tokens[i] < v, "token id ", tokens[i], " at position ", i,
                 " is outside the vocabulary [0, ", v, ")");
  }
  backend_.copy_from_host(a.inputs, tokens, static_cast<size_t>(n) * sizeof(int32_t));
  const float* pos = index_.pos_embed >= 0 ? params_.param(index_.pos_embed) : nullptr;
  // Context attention gives each row its position (global under cp, restarting per document).
  const int32_t* positions = context_.active() ? context_.positions(a.context_slot) : nullptr;
  if (!tp_.active()) {
    backend_.embedding_forward(a.embed_out, a.inputs, params_.param(index_.embed),
                               positions ? nullptr : pos, a.b, a.t, c);
    if (pos && positions) backend_.positions_add_forward(a.embed_out, pos, 0, n, a.t, c, positions);
    return;
  }
  // Vocab-parallel: each rank looks up the tokens of its vocabulary block; the sum over ranks
  // (reduce-scattered to row blocks under sp) is the embedding. Positions are replicated and
  // added after the reduction, to this rank's rows.
  float* partial = tp_.sp() ? scratch_.full_b : a.embed_out;
  backend_.embedding_range_forward(partial, a.inputs, params_.param(index_.embed),
                                   shard_.vocab_begin(config_), shard_.vocab(config_), n, c);
  tp_.reduce_rows(partial, a.embed_out, n, c);
  if (pos)
    backend_.positions_add_forward(a.embed_out, pos, shard_.first_row(n), shard_.local_rows(n), a.t,
                                   c, positions);
}

void Decoder::head_forward(ActivationStore& a) {
  const ModelConfig& cfg = config_;
  const int64_t n = a.b * a.t, c = cfg.d_model;
  hooks_->acquire_params(final_group());
  float* normed = a.final_norm ? a.final_norm : scratch_.final_norm;
  norm_forward(backend_, cfg, norm(), normed, a.final_mean, a.final_rstd, a.layers.back().resid_out,
               params_.param(index_.final_norm_w),
               index_.final_norm_b >= 0 ? params_.param(index_.final_norm_b) : nullptr,
               shard_.local_rows(n));
  if (tied_in_place()) hooks_->acquire_params(0);
  // Column-parallel over the vocabulary: this rank's logits only.
  const LinearInput in = linear_.column_input(normed, a.final_norm_lp, scratch_.full_a, n, true);
  linear_.forward(a.logits, in, index_.head >= 0 ? index_.head : index_.embed, -1, n, c,
                  shard_.vocab(cfg));
  if (tied_in_place()) hooks_->release_params(0);
  hooks_->release_params(final_group());
}

void Decoder::run_forward(int chunk, ActivationStore& a, const int32_t* tokens, bool saving) {
  hooks_->begin_forward();
  if (shard_.chunk_has_embedding(chunk)) {
    hooks_->acquire_params(0);
    embedding_forward(a, tokens);
    hooks_->release_params(0);
  }
  const LayerRange r = shard_.chunks[chunk];
  for (int64_t local = 0; local < r.size(); ++local) {
    const int layer = static_cast<int>(r.begin + local);
    const TraceSpan span("fwd layer", "compute", layer);
    acquire_layer_params(layer);
    if (offload_) offload_->before_forward(local);
    LayerActivations l = layer_view(a, local, /*rebuilding=*/false);
    BlockRun run = block_run(layer, a);
    block_->forward(run, l, layer_input(a, local));
    if (offload_) offload_->after_forward(local, saving);
    release_layer_params(layer);
  }
  if (shard_.chunk_has_head(chunk)) head_forward(a);
}

double Decoder::loss(ActivationStore& a, const int32_t* targets, bool backward, float grad_scale) {
  const int64_t n = a.b * a.t, v = config_.vocab_size;
  int64_t valid = 0;
  for (int64_t i = 0; i < n; ++i) {  // targets: host memory
    STRATA_CHECK(targets[i] < v, "target token ", targets[i], " at position ", i,
                 " is outside the vocabulary [0, ", v, ")");
    valid += targets[i] >= 0;
  }
  backend_.copy_from_host(a.targets, targets, static_cast<size_t>(n) * sizeof(int32_t));
  a.has_targets = true;
  if (backward) loss_scale_ = grad_scale;  // the MoE balancing losses' weight in backward
  double sum = 0;
  // bf16: the head's backward GEMMs read bf16 dlogits, which the loss writes directly.
  a.dlogits_bf16 = backward && precision_ == DType::bf16 && !tp_.active();
  if (!tp_.active()) {
    sum = backward ? backend_.cross_entropy_forward_backward(
                         a.dlogits_bf16 ? DType::bf16 : DType::f32, a.losses, a.logits, a.targets,
                         n, v, grad_scale)
                   : backend_.cross_entropy_forward(a.losses, a.logits, a.targets, n, v);
  } else {
    // Vocab-parallel: two all-reduces of per-row statistics instead of gathering the logits.
    const int64_t vl = shard_.vocab(config_), v0 = shard_.vocab_begin(config_);
    float* row_max = a.ce_stats;
    float* sum_exp = row_max + n;  // followed by target_logit: one all-reduce for both
    float* target_logit = sum_exp + n;
    backend_.vocab_parallel_ce_max(row_max, a.logits, n, vl);
    tp_.all_reduce(row_max, n, ReduceOp::max);
    backend_.vocab_parallel_ce_sums(sum_exp, target_logit, a.logits, row_max, a.targets, n, vl, v0);
    tp_.all_reduce(sum_exp, 2 * n, ReduceOp::sum);
    sum = backend_.vocab_parallel_ce_finish(a.losses, a.logits, row_max, sum_exp, target_logit,
                                            a.targets, n, vl, v0, backward, grad_scale);
  }
  return valid > 0 ? sum / static_cast<double>(valid) : 0.0;
}

void Decoder::prepare_context(ActivationStore& a, const int32_t* doc_start) {
  if (!context_.active()) return;
  STRATA_CHECK(a.t == seq_len_,
               "Decoder: with parallel.cp > 1 or data.document_mask, a "
               "micro-batch has the planned ",
               seq_len_, " rows per sequence, not ", a.t);
  context_.prepare(a.context_slot, doc_start, a.b);
}

double Decoder::forward(const int32_t* inputs, const int32_t* targets, int64_t b, int64_t t,
                        int slot, const int32_t* doc_start) {
  STRATA_CHECK(shard_.num_chunks() == 1 && shard_.has_embedding && shard_.has_head,
               "Decoder::forward runs the whole depth; a pipeline stage uses the chunk API");
  STRATA_CHECK(b >= 1 && b <= batch_ && t >= 1 && t <= seq_len_, "Decoder::forward: shape (", b,
               ", ", t, ") exceeds the planned (", batch_, ", ", seq_len_, ")");
  ActivationStore& a = *acts_[0][slot];
  a.b = b;
  a.t = t;
  a.has_targets = false;
  prepare_context(a, doc_start);
  run_forward(0, a, inputs, /*saving=*/false);
  return targets ? loss(a, targets, /*backward=*/false, 0.0f) : 0.0;
}

// ---- backward ----------------------------------------------------------------------------------

void Decoder::head_backward(ActivationStore& a) {
  const ModelConfig& cfg = config_;
  GradScratch& s = scratch_;
  const int64_t n = a.b * a.t, ns = shard_.local_rows(n), c = cfg.d_model, v = shard_.vocab(cfg);
  const int last = final_group();
  hooks_->acquire_params(last);
  hooks_->begin_grads(last);
  float* dx = tp_.sp() ? s.full_a : s.dnorm;
  const int head = index_.head >= 0 ? index_.head : index_.embed;
  if (tied_in_place()) hooks_->acquire_params(0);
  // A tied head's weight gradient belongs to the embedding group: it is computed at the end of
  // backward (dlogits stay in a.logits), so that every group's gradients complete at one time.
  const LinearInput in = linear_.column_input(a.final_norm, a.final_norm_lp, s.full_b, n, false);
  if (a.dlogits_bf16) {
    const uint16_t* dl = reinterpret_cast<const uint16_t*>(a.logits);
    backend_.gemm(DType::bf16, false, false, n, c, v, 1.0f, dl, v, linear_.lowp_weight(head), c,
                  0.0f, dx, c);
    if (!tied_in_place())
      backend_.gemm(DType::bf16, true, false, v, c, n, 1.0f, dl, v, in.lowp, c, 1.0f, head_grad(),
                    c);
  } else {
    linear_.backward(dx, tied_in_place() ? nullptr : head_grad(), nullptr, a.logits, in, head, n, c,
                     v);
  }
  if (tied_in_place()) hooks_->release_params(0);
  tp_.reduce_rows(dx, s.dnorm, n, c);
  backend_.zero(s.dresid, static_cast<size_t>(ns * c) * sizeof(float));
  norm_backward(backend_, cfg, norm(), s.dresid, params_.grad(index_.final_norm_w),
                index_.final_norm_b >= 0 ? params_.grad(index_.final_norm_b) : nullptr, s.dnorm,
                a.layers.back().resid_out, params_.param(index_.final_norm_w), a.final_mean,
                a.final_rstd, ns);
  hooks_->end_grads(last);
  hooks_->release_params(last);
}

void Decoder::embedding_backward(ActivationStore& a) {
  GradScratch& s = scratch_;
  const int64_t n = a.b * a.t, c = config_.d_model;
  hooks_->acquire_params(0);
  hooks_->begin_grads(0);
  float* dpos = index_.pos_embed >= 0 ? params_.grad(index_.pos_embed) : nullptr;
  const int32_t* positions = context_.active() ? context_.positions(a.context_slot) : nullptr;
  if (!tp_.active()) {
    backend_.embedding_backward(params_.grad(index_.embed), positions ? nullptr : dpos, s.dresid,
                                a.inputs, a.b, a.t, c);
    if (dpos && positions) backend_.positions_add_backward(dpos, s.dresid, 0, n, a.t, c, positions);
  } else {
    if (dpos)
      backend_.positions_add_backward(dpos, s.dresid, shard_.first_row(n), shard_.local_rows(n),
                                      a.t, c, positions);
    const float* d = tp_.gather_rows(s.dresid, s.full_a, n, c);
    backend_.embedding_range_backward(params_.grad(index_.embed), d, a.inputs,
                                      shard_.vocab_begin(config_), shard_.vocab(config_), n, c);
  }
  if (tied_in_place()) {
    // dW_head[v, c] += dlogits^T[v, n] * final_norm[n, c]
    const int64_t v = shard_.vocab(config_);
    const LinearInput in = linear_.column_input(a.final_norm, a.final_norm_lp, s.full_b, n, false);
    if (!lowp())
      backend_.gemm(DType::f32, true, false, v, c, n, 1.0f, a.logits, v, in.f32, c, 1.0f,
                    params_.grad(index_.embed), c);
    else if (a.dlogits_bf16)  // the bf16 dlogits packed at the front of a.logits
      backend_.gemm(DType::bf16, true, false, v, c, n, 1.0f, a.logits, v, in.lowp, c, 1.0f,
                    params_.grad(index_.embed), c);
    else
      linear_.backward(nullptr, params_.grad(index_.embed), nullptr, a.logits, in, index_.embed, n,
                       c, v);
  }
  hooks_->end_grads(0);
  hooks_->release_params(0);
}

void Decoder::run_backward(int chunk, ActivationStore& a) {
  hooks_->begin_backward();
  if (shard_.chunk_has_head(chunk)) head_backward(a);
  const LayerRange r = shard_.chunks[chunk];
  for (int64_t local = r.size() - 1; local >= 0; --local) {
    const int layer = static_cast<int>(r.begin + local);
    const TraceSpan span("bwd layer", "compute", layer);
    acquire_layer_params(layer);
    hooks_->begin_grads(layer_group(layer));
    if (moe()) hooks_->begin_grads(expert_group(config_, layer));
    if (offload_) offload_->before_backward(local);
    LayerActivations l = layer_view(a, local, /*rebuilding=*/true);
    const float* x = layer_input(a, local);
    // Recomputation reruns exactly the forward kernels on the same inputs: the rebuilt
    // activations, and so the gradients, are bitwise those of a run that kept them.
    const Recompute mode = recompute_.for_layer(local);
    if (lowp() && mode != Recompute::full && !bf16_flash())  // widen the kept q, k, v
      backend_.from_lowp(precision_, l.qkv, l.qkv_lp, a.b * a.t * shard_.qkv_width(config_));
    BlockRun run = block_run(layer, a);
    if (mode == Recompute::full) {
      run.rebuilding = true;
      block_->forward(run, l, x);
      run.rebuilding = false;
    } else if (mode == Recompute::selective && !config_.flash_attention()) {
      backend_.attention_forward(recompute_buffers_.attn_out, l.probs, l.qkv,
                                 run.attention_shape());
    }
    block_->backward(run, l, x);
    if (moe()) hooks_->end_grads(expert_group(config_, layer));
    hooks_->end_grads(layer_group(layer));
    release_layer_params(layer);
  }
  if (shard_.chunk_has_embedding(chunk)) embedding_backward(a);
}

double Decoder::forward_backward(const int32_t* inputs, const int32_t* targets, float grad_scale,
                                 int slot, const int32_t* doc_start) {
  STRATA_CHECK(targets != nullptr, "Decoder::forward_backward needs targets");
  STRATA_CHECK(shard_.num_chunks() == 1 && shard_.has_embedding && shard_.has_head,
               "Decoder::forward_backward runs the whole depth; a pipeline stage uses the chunk "
               "API");
  ActivationStore& a = *acts_[0][slot];
  a.b = batch_;
  a.t = seq_len_;
  prepare_context(a, doc_start);
  run_forward(0, a, inputs, /*saving=*/true);
  const double mean = loss(a, targets, /*backward=*/true, grad_scale);
  run_backward(0, a);
  return mean;
}

// ---- chunk API ---------------------------------------------------------------------------------

void Decoder::chunk_forward(int chunk, int slot, const int32_t* tokens, const int32_t* doc_start) {
  ActivationStore& a = *acts_[chunk][slot];
  a.b = batch_;
  a.t = seq_len_;
  a.has_targets = false;
  prepare_context(a, doc_start);
  run_forward(chunk, a, tokens, /*saving=*/true);
}

const float* Decoder::chunk_output(int chunk, int slot) const {
  return acts_[chunk][slot]->layers.back().resid_out;
}

double Decoder::chunk_loss(int chunk, int slot, const int32_t* targets, bool backward,
                           float grad_scale) {
  STRATA_CHECK(shard_.chunk_has_head(chunk), "Decoder::chunk_loss: chunk ", chunk, " has no head");
  return loss(*acts_[chunk][slot], targets, backward, grad_scale);
}

void Decoder::chunk_backward(int chunk, int slot, const float* doutput, float* dinput) {
  ActivationStore& a = *acts_[chunk][slot];
  const size_t bytes = static_cast<size_t>(boundary_elements()) * sizeof(float);
  if (!shard_.chunk_has_head(chunk)) backend_.copy(scratch_.dresid, doutput, bytes);
  run_backward(chunk, a);
  if (!shard_.chunk_has_embedding(chunk)) backend_.copy(dinput, scratch_.dresid, bytes);
}

double Decoder::train_flops_per_token() const {
  const double n = static_cast<double>(config_.num_active_params(false));
  // Attention over the whole sequence (under cp each rank holds seq_len_ of its rows).
  const int64_t t = context_.active() ? context_.split().t : seq_len_;
  return 6.0 * n + 12.0 * static_cast<double>(config_.n_layer * config_.d_model * t);
}

}  // namespace strata
