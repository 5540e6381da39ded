#include "model/decoder.h"

#include <cmath>
#include <cstring>
#include <string>

#include "core/philox.h"
#include "kernels/cpu/flash_attention.h"
#include "kernels/cpu/kernels.h"

namespace strata {

namespace k = kernels;

Decoder::Decoder(const ModelConfig& config, Arena& arena, int64_t batch, int64_t seq_len, int slots,
                 const std::function<void(ParamStore&)>& plan)
    : config_(config), arena_(arena), batch_(batch), seq_len_(seq_len) {
  config_.finalize();
  STRATA_CHECK(seq_len <= config_.max_seq_len, "train.seq_len = ", seq_len,
               " exceeds model.max_seq_len = ", config_.max_seq_len);
  register_params();
  if (plan) plan(params_);
  params_.allocate(arena);
  for (int s = 0; s < slots; ++s)
    acts_.push_back(std::make_unique<ActivationStore>(config_, arena, batch, seq_len));
  scratch_ = GradScratch(config_, arena, batch, seq_len);
}

// Registration order inside a group is the storage order: q|k|v weights (and biases) and
// gate|up are adjacent, so one GEMM computes each fused projection.
void Decoder::register_params() {
  const int64_t c = config_.d_model, hd = config_.head_dim(), nh = config_.n_head;
  const int64_t nkv = config_.kv_heads(), f = config_.d_ff, v = config_.vocab_size;
  const bool gpt2 = config_.family == ModelFamily::gpt2;
  const int final_group = static_cast<int>(config_.n_layer) + 1;
  ParamStore& p = params_;
  embed_ = p.add("embed.weight", {v, c}, 0);
  if (config_.learned_positions())
    pos_embed_ = p.add("pos_embed.weight", {config_.max_seq_len, c}, 0);
  for (int64_t l = 0; l < config_.n_layer; ++l) {
    const std::string pre = "layers." + std::to_string(l) + ".";
    const int g = static_cast<int>(l) + 1;
    BlockParams b;
    b.attn_norm_w = p.add(pre + "attn_norm.weight", {c}, g);
    if (gpt2) b.attn_norm_b = p.add(pre + "attn_norm.bias", {c}, g);
    b.q_w = p.add(pre + "attn.q.weight", {nh * hd, c}, g);
    b.k_w = p.add(pre + "attn.k.weight", {nkv * hd, c}, g);
    b.v_w = p.add(pre + "attn.v.weight", {nkv * hd, c}, g);
    if (gpt2) {
      b.q_b = p.add(pre + "attn.q.bias", {nh * hd}, g);
      b.k_b = p.add(pre + "attn.k.bias", {nkv * hd}, g);
      b.v_b = p.add(pre + "attn.v.bias", {nkv * hd}, g);
    }
    b.o_w = p.add(pre + "attn.o.weight", {c, nh * hd}, g);
    if (gpt2) b.o_b = p.add(pre + "attn.o.bias", {c}, g);
    b.mlp_norm_w = p.add(pre + "mlp_norm.weight", {c}, g);
    if (gpt2) {
      b.mlp_norm_b = p.add(pre + "mlp_norm.bias", {c}, g);
      b.fc_w = p.add(pre + "mlp.fc.weight", {f, c}, g);
      b.fc_b = p.add(pre + "mlp.fc.bias", {f}, g);
      b.proj_w = p.add(pre + "mlp.proj.weight", {c, f}, g);
      b.proj_b = p.add(pre + "mlp.proj.bias", {c}, g);
    } else {
      b.gate_w = p.add(pre + "mlp.gate.weight", {f, c}, g);
      b.up_w = p.add(pre + "mlp.up.weight", {f, c}, g);
      b.down_w = p.add(pre + "mlp.down.weight", {c, f}, g);
    }
    blocks_.push_back(b);
  }
  final_norm_w_ = p.add("final_norm.weight", {c}, final_group);
  if (gpt2) final_norm_b_ = p.add("final_norm.bias", {c}, final_group);
  if (!config_.tie_embeddings) head_ = p.add("head.weight", {v, c}, final_group);
}

namespace {
bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
}  // namespace

void init_param_elements(const ModelConfig& config, const ParamInfo& info, uint64_t seed,
                         int64_t begin, int64_t count, float* out) {
  // GPT-2's scheme: N(0, std) for matrices, residual projections scaled by 1/sqrt(2L), zero
  // biases, unit norm weights. Each element comes from (seed, name, index) only.
  if (ends_with(info.name, "norm.weight")) {
    std::fill(out, out + count, 1.0f);
    return;
  }
  if (ends_with(info.name, ".bias")) {
    std::fill(out, out + count, 0.0f);
    return;
  }
  const bool residual = ends_with(info.name, "attn.o.weight") ||
                        ends_with(info.name, "mlp.proj.weight") ||
                        ends_with(info.name, "mlp.down.weight");
  const float std = residual
                        ? config.init_std / std::sqrt(2.0f * static_cast<float>(config.n_layer))
                        : config.init_std;
  const CounterRng rng(seed, hash_name(info.name));
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < count; ++i)
    out[i] = static_cast<float>(std * rng.normal(static_cast<uint64_t>(begin + i)));
}

void Decoder::init(uint64_t seed) {
  for (int i = 0; i < params_.count(); ++i)
    init_param_elements(config_, params_.info(i), seed, 0, params_.info(i).numel, params_.param(i));
}

const float* Decoder::head_weight() const {
  return params_.param(config_.tie_embeddings ? embed_ : head_);
}
float* Decoder::head_grad() const {
  return params_.grad(config_.tie_embeddings ? embed_ : head_);
}

// ---- forward -----------------------------------------------------------------------------------

namespace {
void norm_forward(const ModelConfig& cfg, float* y, float* mean, float* rstd, const float* x,
                  const float* w, const float* bias, int64_t n) {
  if (cfg.family == ModelFamily::gpt2)
    k::layernorm_forward(y, mean, rstd, x, w, bias, n, cfg.d_model, cfg.norm_eps);
  else
    k::rmsnorm_forward(y, rstd, x, w, n, cfg.d_model, cfg.norm_eps);
}

void norm_backward(const ModelConfig& cfg, float* dx, float* dw, float* db, const float* dy,
                   const float* x, const float* w, const float* mean, const float* rstd,
                   int64_t n) {
  if (cfg.family == ModelFamily::gpt2)
    k::layernorm_backward(dx, dw, db, dy, x, w, mean, rstd, n, cfg.d_model);
  else
    k::rmsnorm_backward(dx, dw, dy, x, w, rstd, n, cfg.d_model);
}
}  // namespace

void Decoder::block_forward(int layer, ActivationStore& a, int64_t b, int64_t t) {
  const ModelConfig& cfg = config_;
  const BlockParams& bp = blocks_[layer];
  LayerActivations& l = a.layers[layer];
  const int64_t n = b * t, c = cfg.d_model, f = cfg.d_ff, nh = cfg.n_head, hd = cfg.head_dim();
  const float* x = layer == 0 ? a.embed_out : a.layers[layer - 1].resid_out;
  auto P = [&](int idx) { return idx < 0 ? nullptr : params_.param(idx); };

  norm_forward(cfg, l.attn_norm, l.attn_mean, l.attn_rstd, x, P(bp.attn_norm_w), P(bp.attn_norm_b),
               n);
  k::linear_forward(l.qkv, l.attn_norm, P(bp.q_w), P(bp.q_b), n, c, cfg.qkv_width());
  if (cfg.family == ModelFamily::llama)
    k::rope_forward(l.qkv, b, t, nh, cfg.kv_heads(), hd, cfg.rope_theta);
  if (cfg.flash_attention())
    k::flash_attention_forward(l.attn_out, l.lse, l.qkv, b, t, nh, cfg.kv_heads(), hd);
  else
    k::attention_forward(l.attn_out, l.probs, l.qkv, b, t, nh, cfg.kv_heads(), hd);
  k::linear_forward(l.resid_mid, l.attn_out, P(bp.o_w), P(bp.o_b), n, nh * hd, c);
  k::add_inplace(l.resid_mid, x, n * c);

  norm_forward(cfg, l.mlp_norm, l.mlp_mean, l.mlp_rstd, l.resid_mid, P(bp.mlp_norm_w),
               P(bp.mlp_norm_b), n);
  if (cfg.family == ModelFamily::gpt2) {
    k::linear_forward(l.mlp_pre, l.mlp_norm, P(bp.fc_w), P(bp.fc_b), n, c, f);
    k::gelu_forward(l.mlp_act, l.mlp_pre, n * f);
    k::linear_forward(l.resid_out, l.mlp_act, P(bp.proj_w), P(bp.proj_b), n, f, c);
  } else {
    k::linear_forward(l.mlp_pre, l.mlp_norm, P(bp.gate_w), nullptr, n, c, 2 * f);
    k::swiglu_forward(l.mlp_act, l.mlp_pre, n, f);
    k::linear_forward(l.resid_out, l.mlp_act, P(bp.down_w), nullptr, n, f, c);
  }
  k::add_inplace(l.resid_out, l.resid_mid, n * c);
}

double Decoder::forward(const int32_t* inputs, const int32_t* targets, int64_t b, int64_t t,
                        int slot) {
  STRATA_CHECK(b >= 1 && b <= batch_ && t >= 1 && t <= seq_len_, "Decoder::forward: shape (", b,
               ", ", t, ") exceeds the planned (", batch_, ", ", seq_len_, ")");
  ActivationStore& a = *acts_[slot];
  const ModelConfig& cfg = config_;
  const int64_t n = b * t, c = cfg.d_model, v = cfg.vocab_size;
  for (int64_t i = 0; i < n; ++i) {
    STRATA_CHECK(inputs[i] >= 0 && inputs[i] < v, "token id ", inputs[i], " at position ", i,
                 " is outside the vocabulary [0, ", v, ")");
  }
  std::memcpy(a.inputs, inputs, static_cast<size_t>(n) * sizeof(int32_t));
  a.has_targets = targets != nullptr;
  if (targets) std::memcpy(a.targets, targets, static_cast<size_t>(n) * sizeof(int32_t));
  last_b_ = b;
  last_t_ = t;

  hooks_->begin_forward();
  hooks_->acquire_params(0);
  k::embedding_forward(a.embed_out, a.inputs, params_.param(embed_),
                       pos_embed_ >= 0 ? params_.param(pos_embed_) : nullptr, b, t, c);
  hooks_->release_params(0);
  for (int layer = 0; layer < cfg.n_layer; ++layer) {
    hooks_->acquire_params(layer + 1);
    block_forward(layer, a, b, t);
    hooks_->release_params(layer + 1);
  }
  const float* x = a.layers.back().resid_out;
  hooks_->acquire_params(final_group());
  norm_forward(cfg, a.final_norm, a.final_mean, a.final_rstd, x, params_.param(final_norm_w_),
               final_norm_b_ >= 0 ? params_.param(final_norm_b_) : nullptr, n);
  if (cfg.tie_embeddings) hooks_->acquire_params(0);
  k::linear_forward(a.logits, a.final_norm, head_weight(), nullptr, n, c, v);
  if (cfg.tie_embeddings) hooks_->release_params(0);
  hooks_->release_params(final_group());
  if (!targets) return 0.0;
  int64_t valid = 0;
  for (int64_t i = 0; i < n; ++i) valid += targets[i] >= 0;
  const double sum = k::cross_entropy_forward(a.losses, a.logits, a.targets, n, v);
  return valid > 0 ? sum / static_cast<double>(valid) : 0.0;
}

// ---- backward ----------------------------------------------------------------------------------

void Decoder::block_backward(int layer, ActivationStore& a, int64_t b, int64_t t) {
  const ModelConfig& cfg = config_;
  const BlockParams& bp = blocks_[layer];
  LayerActivations& l = a.layers[layer];
  GradScratch& s = scratch_;
  const int64_t n = b * t, c = cfg.d_model, f = cfg.d_ff, nh = cfg.n_head, hd = cfg.head_dim();
  const float* x = layer == 0 ? a.embed_out : a.layers[layer - 1].resid_out;
  auto P = [&](int idx) { return idx < 0 ? nullptr : params_.param(idx); };
  auto G = [&](int idx) { return idx < 0 ? nullptr : params_.grad(idx); };
  // (Group pointers are looked up at each use: a hook may have bound the group to a buffer.)

  // s.dresid holds dL/d(block output); the residual path passes it through unchanged.
  if (cfg.family == ModelFamily::gpt2) {
    k::linear_backward(s.dmlp_act, G(bp.proj_w), G(bp.proj_b), s.dresid, l.mlp_act, P(bp.proj_w), n,
                       f, c);
    k::gelu_backward(s.dmlp_pre, l.mlp_pre, s.dmlp_act, n * f);
    k::linear_backward(s.dnorm, G(bp.fc_w), G(bp.fc_b), s.dmlp_pre, l.mlp_norm, P(bp.fc_w), n, c,
                       f);
  } else {
    k::linear_backward(s.dmlp_act, G(bp.down_w), nullptr, s.dresid, l.mlp_act, P(bp.down_w), n, f,
                       c);
    k::swiglu_backward(s.dmlp_pre, l.mlp_pre, s.dmlp_act, n, f);
    k::linear_backward(s.dnorm, G(bp.gate_w), nullptr, s.dmlp_pre, l.mlp_norm, P(bp.gate_w), n, c,
                       2 * f);
  }
  norm_backward(cfg, s.dresid, G(bp.mlp_norm_w), G(bp.mlp_norm_b), s.dnorm, l.resid_mid,
                P(bp.mlp_norm_w), l.mlp_mean, l.mlp_rstd, n);

  // s.dresid now holds dL/d(residual after attention).
  k::linear_backward(s.dattn, G(bp.o_w), G(bp.o_b), s.dresid, l.attn_out, P(bp.o_w), n, nh * hd, c);
  if (cfg.flash_attention())
    k::flash_attention_backward(s.dqkv, s.attn_scratch, s.dattn, l.qkv, l.attn_out, l.lse, b, t, nh,
                                cfg.kv_heads(), hd);
  else
    k::attention_backward(s.dqkv, s.attn_scratch, s.dattn, l.qkv, l.probs, b, t, nh, cfg.kv_heads(),
                          hd);
  if (cfg.family == ModelFamily::llama)
    k::rope_backward(s.dqkv, b, t, nh, cfg.kv_heads(), hd, cfg.rope_theta);
  k::linear_backward(s.dnorm, G(bp.q_w), G(bp.q_b), s.dqkv, l.attn_norm, P(bp.q_w), n, c,
                     cfg.qkv_width());
  norm_backward(cfg, s.dresid, G(bp.attn_norm_w), G(bp.attn_norm_b), s.dnorm, x, P(bp.attn_norm_w),
                l.attn_mean, l.attn_rstd, n);
}

void Decoder::backward(ActivationStore& a, float grad_scale) {
  (void)grad_scale;  // already applied to dlogits by the fused loss
  const ModelConfig& cfg = config_;
  const int64_t b = last_b_, t = last_t_, n = b * t, c = cfg.d_model, v = cfg.vocab_size;
  const bool tied = cfg.tie_embeddings;
  GradScratch& s = scratch_;
  const int last = final_group();

  // Final group: the head (its weight gradient too when untied) and the final norm.
  hooks_->begin_backward();
  hooks_->acquire_params(last);
  hooks_->begin_grads(last);
  if (tied) hooks_->acquire_params(0);
  // A tied head's weight gradient belongs to the embedding group: it is computed at the end of
  // backward (dlogits stay in a.logits), so that every group's gradients complete at one time.
  if (tied)  // dx only: dnorm[n, c] = dlogits[n, v] * W[v, c]
    k::gemm(false, false, n, c, v, 1.0f, a.logits, v, head_weight(), c, 0.0f, s.dnorm, c);
  else
    k::linear_backward(s.dnorm, head_grad(), nullptr, a.logits, a.final_norm, head_weight(), n, c,
                       v);
  if (tied) hooks_->release_params(0);
  std::memset(s.dresid, 0, static_cast<size_t>(n * c) * sizeof(float));
  norm_backward(cfg, s.dresid, params_.grad(final_norm_w_),
                final_norm_b_ >= 0 ? params_.grad(final_norm_b_) : nullptr, s.dnorm,
                a.layers.back().resid_out, params_.param(final_norm_w_), a.final_mean, a.final_rstd,
                n);
  hooks_->end_grads(last);
  hooks_->release_params(last);

  for (int layer = static_cast<int>(cfg.n_layer) - 1; layer >= 0; --layer) {
    hooks_->acquire_params(layer + 1);
    hooks_->begin_grads(layer + 1);
    block_backward(layer, a, b, t);
    hooks_->end_grads(layer + 1);
    hooks_->release_params(layer + 1);
  }

  hooks_->acquire_params(0);
  hooks_->begin_grads(0);
  k::embedding_backward(params_.grad(embed_), pos_embed_ >= 0 ? params_.grad(pos_embed_) : nullptr,
                        s.dresid, a.inputs, b, t, c);
  if (tied) {
    // dW_head[v, c] += dlogits^T[v, n] * final_norm[n, c]
    k::gemm(true, false, v, c, n, 1.0f, a.logits, v, a.final_norm, c, 1.0f, params_.grad(embed_),
            c);
  }
  hooks_->end_grads(0);
  hooks_->release_params(0);
}

double Decoder::forward_backward(const int32_t* inputs, const int32_t* targets, float grad_scale,
                                 int slot) {
  STRATA_CHECK(targets != nullptr, "Decoder::forward_backward needs targets");
  ActivationStore& a = *acts_[slot];
  forward(inputs, nullptr, batch_, seq_len_, slot);
  const int64_t n = batch_ * seq_len_;
  std::memcpy(a.targets, targets, static_cast<size_t>(n) * sizeof(int32_t));
  a.has_targets = true;
  int64_t valid = 0;
  for (int64_t i = 0; i < n; ++i) valid += targets[i] >= 0;
  const double sum = k::cross_entropy_forward_backward(a.losses, a.logits, a.targets, n,
                                                       config_.vocab_size, grad_scale);
  backward(a, grad_scale);
  return valid > 0 ? sum / static_cast<double>(valid) : 0.0;
}

double Decoder::train_flops_per_token() const {
  const double n = static_cast<double>(config_.num_params(false));
  return 6.0 * n + 12.0 * static_cast<double>(config_.n_layer * config_.d_model * seq_len_);
}

}  // namespace strata
