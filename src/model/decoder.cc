#include "model/decoder.h"

#include <string>

#include "core/trace.h"

namespace strata {

// ---- construction ------------------------------------------------------------------------------

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
  precision_ = o.precision;
  STRATA_CHECK(precision_ == DType::f32 || precision_ == DType::bf16 || precision_ == DType::f16,
               "Decoder: precision must be f32, bf16 or f16");
  index_ = register_model_params(config_, shard_, params_);
  if (o.plan) o.plan(params_);
  if (lowp()) params_.set_param_category(MemCategory::master);
  params_.allocate(arena, &backend_);
  if (lowp()) {
    // No resident f32 parameters means a strategy gathers each group on use (ZeRO-3): convert
    // the gathered group into one transient group-sized slot instead of keeping 2 bytes per
    // parameter of the whole model.
    lowp_single_slot_ = params_.data() == nullptr;
    lowp_params_ = arena.alloc<uint16_t>(
        MemCategory::params,
        lowp_weight_elements(!lowp_single_slot_, params_.size(), params_.group_sizes()),
        lowp_single_slot_ ? "parameters (16-bit copy of the gathered group)"
                          : "parameters (16-bit working copy)");
    const size_t entries = lowp_single_slot_ ? 1 : static_cast<size_t>(params_.num_groups());
    lowp_version_.assign(entries, -1);
    lowp_source_.assign(entries, nullptr);
  }
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
  scratch_ = GradScratch(config_, shard_, arena, batch, seq_len, precision_, &backend_);
  recompute_ = o.recompute;
  recompute_buffers_ = allocate_recompute_buffers(config_, shard_, recompute_.mode, arena, batch,
                                                  seq_len, precision_);
}

Decoder::Decoder(const ModelConfig& config, Arena& arena, int64_t batch, int64_t seq_len, int slots,
                 const std::function<void(ParamStore&)>& plan)
    : Decoder(config, arena, batch, seq_len,
              DecoderOptions{slots, {}, plan, std::nullopt, nullptr, {}, DType::f32, nullptr}) {}

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

void Decoder::linear_fwd(float* y, const float* x32, const uint16_t* xlp, int w, int bias,
                         int64_t n, int64_t in, int64_t out) {
  const float* b = bias >= 0 ? params_.param(bias) : nullptr;
  if (!lowp()) {
    backend_.linear_forward(y, x32, params_.param(w), b, n, in, out);
    return;
  }
  backend_.linear_forward_lowp(precision_, y, xlp, lowp_weight(w), b, n, in, out,
                               scratch_.lowp_wide);
}

void Decoder::linear_bwd(float* dx, float* dw, float* dbias, const float* dy, const float* x32,
                         const uint16_t* xlp, int w, int64_t n, int64_t in, int64_t out) {
  if (!lowp()) {
    if (dw) {
      backend_.linear_backward(dx, dw, dbias, dy, x32, params_.param(w), n, in, out);
    } else {  // a tied head: dx only here, its weight gradient later
      backend_.gemm(false, false, n, in, out, 1.0f, dy, out, params_.param(w), in, 0.0f, dx, in);
    }
    return;
  }
  backend_.linear_backward_lowp(precision_, dx, dw, dbias, dy, scratch_.dy_lp, scratch_.dy_capacity,
                                xlp, lowp_weight(w), n, in, out, scratch_.lowp_wide);
}

std::pair<const float*, const uint16_t*> Decoder::column_input(const float* x, uint16_t* keep,
                                                               float* gather32, int64_t n,
                                                               bool convert) {
  const int64_t c = config_.d_model;
  if (!lowp()) return {tp_.gather_rows(x, gather32, n, c), nullptr};
  if (convert) backend_.to_lowp(precision_, keep, x, shard_.local_rows(n) * c);
  return {nullptr, tp_.gather_rows(keep, scratch_.full_lp, n, c, precision_)};
}

// ---- forward -----------------------------------------------------------------------------------

namespace {
void norm_forward(Backend& k, const ModelConfig& cfg, float* y, float* mean, float* rstd,
                  const float* x, const float* w, const float* bias, int64_t n) {
  if (cfg.family == ModelFamily::gpt2)
    k.layernorm_forward(y, mean, rstd, x, w, bias, n, cfg.d_model, cfg.norm_eps);
  else
    k.rmsnorm_forward(y, rstd, x, w, n, cfg.d_model, cfg.norm_eps);
}

void norm_backward(Backend& k, const ModelConfig& cfg, float* dx, float* dw, float* db,
                   const float* dy, const float* x, const float* w, const float* mean,
                   const float* rstd, int64_t n) {
  if (cfg.family == ModelFamily::gpt2)
    k.layernorm_backward(dx, dw, db, dy, x, w, mean, rstd, n, cfg.d_model);
  else
    k.rmsnorm_backward(dx, dw, dy, x, w, rstd, n, cfg.d_model);
}
}  // namespace

void Decoder::embedding_forward(ActivationStore& a, const int32_t* tokens) {
  const int64_t n = a.b * a.t, c = config_.d_model, v = config_.vocab_size;
  for (int64_t i = 0; i < n; ++i) {
    STRATA_CHECK(tokens[i] >= 0 && tokens[i] < v, "token id ", tokens[i], " at position ", i,
                 " is outside the vocabulary [0, ", v, ")");
  }
  backend_.copy_from_host(a.inputs, tokens, static_cast<size_t>(n) * sizeof(int32_t));
  const float* pos = index_.pos_embed >= 0 ? params_.param(index_.pos_embed) : nullptr;
  if (!tp_.active()) {
    backend_.embedding_forward(a.embed_out, a.inputs, params_.param(index_.embed), pos, a.b, a.t,
                               c);
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
                                   c);
}

void Decoder::row_parallel(float* out, const float* x32, const uint16_t* xlp, int w, int bias,
                           const float* residual, int64_t n, int64_t in) {
  const int64_t c = config_.d_model;
  const float* b = bias >= 0 ? params_.param(bias) : nullptr;
  if (!tp_.active()) {
    linear_fwd(out, x32, xlp, w, bias, n, in, c);
    backend_.add_inplace(out, residual, n * c);
    return;
  }
  float* partial = tp_.sp() ? scratch_.full_b : out;
  linear_fwd(partial, x32, xlp, w, -1, n, in, c);
  tp_.reduce_rows(partial, out, n, c);
  const int64_t ns = shard_.local_rows(n);
  if (b) backend_.add_bias(out, b, ns, c);
  backend_.add_inplace(out, residual, ns * c);
}

void Decoder::block_forward(int layer, ActivationStore& a, LayerActivations& l, const float* x) {
  const ModelConfig& cfg = config_;
  const BlockParams& bp = index_.blocks[layer];
  const int64_t b = a.b, t = a.t, n = b * t, ns = shard_.local_rows(n), c = cfg.d_model;
  const int64_t nh = shard_.heads(cfg), nkv = shard_.kv_heads(cfg), hd = cfg.head_dim();
  const int64_t f = shard_.ffn(cfg);
  auto P = [&](int idx) { return idx < 0 ? nullptr : params_.param(idx); };

  norm_forward(backend_, cfg, l.attn_norm, l.attn_mean, l.attn_rstd, x, P(bp.attn_norm_w),
               P(bp.attn_norm_b), ns);
  auto [in32, inlp] = column_input(l.attn_norm, l.attn_norm_lp, scratch_.full_a, n, true);
  linear_fwd(l.qkv, in32, inlp, bp.q_w, bp.q_b, n, c, shard_.qkv_width(cfg));
  if (cfg.family == ModelFamily::llama)
    backend_.rope_forward(l.qkv, b, t, nh, nkv, hd, cfg.rope_theta);
  if (lowp()) {
    // q, k, v are kept in 16 bits; attention (scores, softmax, weighted sum in f32) reads the
    // rounded values in forward as backward will: bf16 flash attention reads them directly
    // (vdpbf16ps products), the other kernels widened to f32.
    const int64_t count = n * shard_.qkv_width(cfg);
    backend_.to_lowp(precision_, l.qkv_lp, l.qkv, count);
    if (!bf16_flash()) backend_.from_lowp(precision_, l.qkv, l.qkv_lp, count);
  }
  if (bf16_flash())
    backend_.flash_attention_forward_bf16(l.attn_out, l.lse, l.qkv_lp, b, t, nh, nkv, hd);
  else if (cfg.flash_attention())
    backend_.flash_attention_forward(l.attn_out, l.lse, l.qkv, b, t, nh, nkv, hd);
  else
    backend_.attention_forward(l.attn_out, l.probs, l.qkv, b, t, nh, nkv, hd);
  if (lowp()) backend_.to_lowp(precision_, l.attn_out_lp, l.attn_out, n * nh * hd);
  row_parallel(l.resid_mid, l.attn_out, l.attn_out_lp, bp.o_w, bp.o_b, x, n, nh * hd);

  norm_forward(backend_, cfg, l.mlp_norm, l.mlp_mean, l.mlp_rstd, l.resid_mid, P(bp.mlp_norm_w),
               P(bp.mlp_norm_b), ns);
  std::tie(in32, inlp) = column_input(l.mlp_norm, l.mlp_norm_lp, scratch_.full_a, n, true);
  // bf16 GELU writes the down GEMM's bf16 input straight away (no f32 activation to round).
  const bool gelu_bf16 = cfg.family == ModelFamily::gpt2 && precision_ == DType::bf16;
  if (cfg.family == ModelFamily::gpt2) {
    linear_fwd(l.mlp_pre, in32, inlp, bp.fc_w, bp.fc_b, n, c, f);
    if (gelu_bf16)
      backend_.gelu_forward_bf16(l.mlp_act_lp, l.mlp_pre, n * f);
    else
      backend_.gelu_forward(l.mlp_act, l.mlp_pre, n * f);
  } else {
    linear_fwd(l.mlp_pre, in32, inlp, bp.gate_w, -1, n, c, 2 * f);
    backend_.swiglu_forward(l.mlp_act, l.mlp_pre, n, f);
  }
  if (lowp() && !gelu_bf16) backend_.to_lowp(precision_, l.mlp_act_lp, l.mlp_act, n * f);
  const int down = cfg.family == ModelFamily::gpt2 ? bp.proj_w : bp.down_w;
  row_parallel(l.resid_out, l.mlp_act, l.mlp_act_lp, down, bp.proj_b, l.resid_mid, n, f);
}

void Decoder::head_forward(ActivationStore& a) {
  const ModelConfig& cfg = config_;
  const int64_t n = a.b * a.t, c = cfg.d_model;
  hooks_->acquire_params(final_group());
  float* norm = a.final_norm ? a.final_norm : scratch_.final_norm;
  norm_forward(backend_, cfg, norm, a.final_mean, a.final_rstd, a.layers.back().resid_out,
               params_.param(index_.final_norm_w),
               index_.final_norm_b >= 0 ? params_.param(index_.final_norm_b) : nullptr,
               shard_.local_rows(n));
  if (tied_in_place()) hooks_->acquire_params(0);
  // Column-parallel over the vocabulary: this rank's logits only.
  const auto [in32, inlp] = column_input(norm, a.final_norm_lp, scratch_.full_a, n, true);
  linear_fwd(a.logits, in32, inlp, index_.head >= 0 ? index_.head : index_.embed, -1, n, c,
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
    hooks_->acquire_params(layer + 1);
    if (offload_) offload_->before_forward(local);
    LayerActivations l = layer_view(a, local, /*rebuilding=*/false);
    block_forward(layer, a, l, layer_input(a, local));
    if (offload_) offload_->after_forward(local, saving);
    hooks_->release_params(layer + 1);
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
  double sum = 0;
  // bf16: the head's backward GEMMs read bf16 dlogits, which the loss writes directly.
  a.dlogits_bf16 = backward && precision_ == DType::bf16 && !tp_.active();
  if (a.dlogits_bf16) {
    sum = backend_.cross_entropy_forward_backward_bf16(a.losses, a.logits, a.targets, n, v,
                                                       grad_scale);
  } else if (!tp_.active()) {
    sum = backward ? backend_.cross_entropy_forward_backward(a.losses, a.logits, a.targets, n, v,
                                                             grad_scale)
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

double Decoder::forward(const int32_t* inputs, const int32_t* targets, int64_t b, int64_t t,
                        int slot) {
  STRATA_CHECK(shard_.num_chunks() == 1 && shard_.has_embedding && shard_.has_head,
               "Decoder::forward runs the whole depth; a pipeline stage uses the chunk API");
  STRATA_CHECK(b >= 1 && b <= batch_ && t >= 1 && t <= seq_len_, "Decoder::forward: shape (", b,
               ", ", t, ") exceeds the planned (", batch_, ", ", seq_len_, ")");
  ActivationStore& a = *acts_[0][slot];
  a.b = b;
  a.t = t;
  a.has_targets = false;
  run_forward(0, a, inputs, /*saving=*/false);
  return targets ? loss(a, targets, /*backward=*/false, 0.0f) : 0.0;
}

// ---- backward ----------------------------------------------------------------------------------

void Decoder::block_backward(int layer, ActivationStore& a, LayerActivations& l, const float* x) {
  const ModelConfig& cfg = config_;
  const BlockParams& bp = index_.blocks[layer];
  GradScratch& s = scratch_;
  const int64_t b = a.b, t = a.t, n = b * t, ns = shard_.local_rows(n), c = cfg.d_model;
  const int64_t nh = shard_.heads(cfg), nkv = shard_.kv_heads(cfg), hd = cfg.head_dim();
  const int64_t f = shard_.ffn(cfg);
  auto P = [&](int idx) { return idx < 0 ? nullptr : params_.param(idx); };
  auto G = [&](int idx) { return idx < 0 ? nullptr : params_.grad(idx); };
  // (Group pointers are looked up at each use: a hook may have bound the group to a buffer.)
  // Under sp, full_a holds the gathered output gradient, then the full-row input gradient;
  // full_b the re-gathered norm output (forward kept only this rank's rows of it).
  float* dnorm_rows = tp_.sp() ? s.full_a : s.dnorm;

  // s.dresid holds dL/d(block output); the residual path passes it through unchanged.
  const float* dy = tp_.gather_rows(s.dresid, s.full_a, n, c);
  const int down = cfg.family == ModelFamily::gpt2 ? bp.proj_w : bp.down_w;
  linear_bwd(s.dmlp_act, G(down), G(bp.proj_b), dy, l.mlp_act, l.mlp_act_lp, down, n, f, c);
  if (cfg.family == ModelFamily::gpt2)
    backend_.gelu_backward(s.dmlp_pre, l.mlp_pre, s.dmlp_act, n * f);
  else
    backend_.swiglu_backward(s.dmlp_pre, l.mlp_pre, s.dmlp_act, n, f);
  auto [in32, inlp] = column_input(l.mlp_norm, l.mlp_norm_lp, s.full_b, n, false);
  const int up = cfg.family == ModelFamily::gpt2 ? bp.fc_w : bp.gate_w;
  const int64_t up_width = cfg.family == ModelFamily::gpt2 ? f : 2 * f;
  linear_bwd(dnorm_rows, G(up), G(bp.fc_b), s.dmlp_pre, in32, inlp, up, n, c, up_width);
  tp_.reduce_rows(dnorm_rows, s.dnorm, n, c);
  norm_backward(backend_, cfg, s.dresid, G(bp.mlp_norm_w), G(bp.mlp_norm_b), s.dnorm, l.resid_mid,
                P(bp.mlp_norm_w), l.mlp_mean, l.mlp_rstd, ns);

  // s.dresid now holds dL/d(residual after attention).
  dy = tp_.gather_rows(s.dresid, s.full_a, n, c);
  // Flash attention keeps attn_out in f32 (its backward reads it): round it again for the GEMM.
  if (lowp() && cfg.flash_attention())
    backend_.to_lowp(precision_, l.attn_out_lp, l.attn_out, n * nh * hd);
  linear_bwd(s.dattn, G(bp.o_w), G(bp.o_b), dy, l.attn_out, l.attn_out_lp, bp.o_w, n, nh * hd, c);
  if (bf16_flash())
    backend_.flash_attention_backward_bf16(s.dqkv, s.attn_scratch, s.dattn, l.qkv_lp, l.attn_out,
                                           l.lse, b, t, nh, nkv, hd);
  else if (cfg.flash_attention())
    backend_.flash_attention_backward(s.dqkv, s.attn_scratch, s.dattn, l.qkv, l.attn_out, l.lse, b,
                                      t, nh, nkv, hd);
  else
    backend_.attention_backward(s.dqkv, s.attn_scratch, s.dattn, l.qkv, l.probs, b, t, nh, nkv, hd);
  if (cfg.family == ModelFamily::llama)
    backend_.rope_backward(s.dqkv, b, t, nh, nkv, hd, cfg.rope_theta);
  std::tie(in32, inlp) = column_input(l.attn_norm, l.attn_norm_lp, s.full_b, n, false);
  linear_bwd(dnorm_rows, G(bp.q_w), G(bp.q_b), s.dqkv, in32, inlp, bp.q_w, n, c,
             shard_.qkv_width(cfg));
  tp_.reduce_rows(dnorm_rows, s.dnorm, n, c);
  norm_backward(backend_, cfg, s.dresid, G(bp.attn_norm_w), G(bp.attn_norm_b), s.dnorm, x,
                P(bp.attn_norm_w), l.attn_mean, l.attn_rstd, ns);
}

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
  const auto [in32, inlp] = column_input(a.final_norm, a.final_norm_lp, s.full_b, n, false);
  if (a.dlogits_bf16) {
    const uint16_t* dl = reinterpret_cast<const uint16_t*>(a.logits);
    backend_.gemm_bf16(false, false, n, c, v, 1.0f, dl, v, lowp_weight(head), c, 0.0f, dx, c);
    if (!tied_in_place())
      backend_.gemm_bf16(true, false, v, c, n, 1.0f, dl, v, inlp, c, 1.0f, head_grad(), c);
  } else {
    linear_bwd(dx, tied_in_place() ? nullptr : head_grad(), nullptr, a.logits, in32, inlp, head, n,
               c, v);
  }
  if (tied_in_place()) hooks_->release_params(0);
  tp_.reduce_rows(dx, s.dnorm, n, c);
  backend_.zero(s.dresid, static_cast<size_t>(ns * c) * sizeof(float));
  norm_backward(backend_, cfg, s.dresid, params_.grad(index_.final_norm_w),
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
  if (!tp_.active()) {
    backend_.embedding_backward(params_.grad(index_.embed), dpos, s.dresid, a.inputs, a.b, a.t, c);
  } else {
    if (dpos)
      backend_.positions_add_backward(dpos, s.dresid, shard_.first_row(n), shard_.local_rows(n),
                                      a.t, c);
    const float* d = tp_.gather_rows(s.dresid, s.full_a, n, c);
    backend_.embedding_range_backward(params_.grad(index_.embed), d, a.inputs,
                                      shard_.vocab_begin(config_), shard_.vocab(config_), n, c);
  }
  if (tied_in_place()) {
    // dW_head[v, c] += dlogits^T[v, n] * final_norm[n, c]
    const int64_t v = shard_.vocab(config_);
    const auto [in32, inlp] = column_input(a.final_norm, a.final_norm_lp, s.full_b, n, false);
    if (!lowp())
      backend_.gemm(true, false, v, c, n, 1.0f, a.logits, v, in32, c, 1.0f,
                    params_.grad(index_.embed), c);
    else if (a.dlogits_bf16)
      backend_.gemm_bf16(true, false, v, c, n, 1.0f, reinterpret_cast<const uint16_t*>(a.logits), v,
                         inlp, c, 1.0f, params_.grad(index_.embed), c);
    else
      linear_bwd(nullptr, params_.grad(index_.embed), nullptr, a.logits, in32, inlp, index_.embed,
                 n, c, v);
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
    hooks_->acquire_params(layer + 1);
    hooks_->begin_grads(layer + 1);
    if (offload_) offload_->before_backward(local);
    LayerActivations l = layer_view(a, local, /*rebuilding=*/true);
    const float* x = layer_input(a, local);
    // Recomputation reruns exactly the forward kernels on the same inputs: the rebuilt
    // activations, and so the gradients, are bitwise those of a run that kept them.
    const Recompute mode = recompute_.for_layer(local);
    if (lowp() && mode != Recompute::full && !bf16_flash())  // widen the kept q, k, v
      backend_.from_lowp(precision_, l.qkv, l.qkv_lp, a.b * a.t * shard_.qkv_width(config_));
    if (mode == Recompute::full) {
      block_forward(layer, a, l, x);
    } else if (mode == Recompute::selective && !config_.flash_attention()) {
      const ModelConfig& cfg = config_;
      backend_.attention_forward(recompute_buffers_.attn_out, l.probs, l.qkv, a.b, a.t,
                                 shard_.heads(cfg), shard_.kv_heads(cfg), cfg.head_dim());
    }
    block_backward(layer, a, l, x);
    hooks_->end_grads(layer + 1);
    hooks_->release_params(layer + 1);
  }
  if (shard_.chunk_has_embedding(chunk)) embedding_backward(a);
}

double Decoder::forward_backward(const int32_t* inputs, const int32_t* targets, float grad_scale,
                                 int slot) {
  STRATA_CHECK(targets != nullptr, "Decoder::forward_backward needs targets");
  STRATA_CHECK(shard_.num_chunks() == 1 && shard_.has_embedding && shard_.has_head,
               "Decoder::forward_backward runs the whole depth; a pipeline stage uses the chunk "
               "API");
  ActivationStore& a = *acts_[0][slot];
  a.b = batch_;
  a.t = seq_len_;
  run_forward(0, a, inputs, /*saving=*/true);
  const double mean = loss(a, targets, /*backward=*/true, grad_scale);
  run_backward(0, a);
  return mean;
}

// ---- chunk API ---------------------------------------------------------------------------------

void Decoder::chunk_forward(int chunk, int slot, const int32_t* tokens) {
  ActivationStore& a = *acts_[chunk][slot];
  a.b = batch_;
  a.t = seq_len_;
  a.has_targets = false;
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
  const double n = static_cast<double>(config_.num_params(false));
  return 6.0 * n + 12.0 * static_cast<double>(config_.n_layer * config_.d_model * seq_len_);
}

}  // namespace strata
