#include "run/config_fields.h"

#include <algorithm>
#include <iterator>

namespace strata {

namespace {

#define STRATA_FIELD(section, name)                                                          \
  Field {                                                                                    \
#section "." #name, [](RunConfig & c) -> FieldRef { return field_ref(&c.section.name); } \
  }

const Field kFields[] = {
    STRATA_FIELD(model, family),
    STRATA_FIELD(model, n_layer),
    STRATA_FIELD(model, n_head),
    STRATA_FIELD(model, n_kv_head),
    STRATA_FIELD(model, d_model),
    STRATA_FIELD(model, d_ff),
    STRATA_FIELD(model, vocab_size),
    STRATA_FIELD(model, max_seq_len),
    STRATA_FIELD(model, norm_eps),
    STRATA_FIELD(model, rope_theta),
    STRATA_FIELD(model, rope_scaling),
    STRATA_FIELD(model, rope_factor),
    STRATA_FIELD(model, rope_low_freq_factor),
    STRATA_FIELD(model, rope_high_freq_factor),
    STRATA_FIELD(model, rope_original_max_seq_len),
    // model.head_dim: the member is attn_head_dim (ModelConfig::head_dim() is the derived width).
    Field{"model.head_dim", [](RunConfig& c) -> FieldRef { return &c.model.attn_head_dim; }},
    STRATA_FIELD(model, tie_embeddings),
    STRATA_FIELD(model, init_std),
    STRATA_FIELD(model, attention),
    STRATA_FIELD(model.moe, experts),
    STRATA_FIELD(model.moe, top_k),
    STRATA_FIELD(model.moe, expert_ffn),
    STRATA_FIELD(model.moe, gating),
    STRATA_FIELD(model.moe, normalize_topk),
    STRATA_FIELD(model.moe, routed_scale),
    STRATA_FIELD(model.moe, aux_loss_coeff),
    STRATA_FIELD(model.moe, aux_loss_scope),
    STRATA_FIELD(model.moe, z_loss_coeff),
    STRATA_FIELD(model.moe, capacity_factor),
    STRATA_FIELD(model.moe, shared_experts),
    STRATA_FIELD(model.moe, shared_ffn),
    STRATA_FIELD(model.moe, activation),
    STRATA_FIELD(model.moe, bias_update_rate),
    STRATA_FIELD(train, steps),
    STRATA_FIELD(train, seed),
    STRATA_FIELD(train, batch_size),
    STRATA_FIELD(train, seq_len),
    STRATA_FIELD(train, grad_accum),
    STRATA_FIELD(train, eval_every),
    STRATA_FIELD(train, eval_batches),
    STRATA_FIELD(train, log_every),
    STRATA_FIELD(train, checkpoint_every),
    STRATA_FIELD(train, keep_last),
    STRATA_FIELD(train, async_checkpoint),
    STRATA_FIELD(train, precision),
    STRATA_FIELD(train, recompute),
    STRATA_FIELD(train, recompute_layers),
    STRATA_FIELD(train, activation_offload),
    STRATA_FIELD(optim, lr),
    STRATA_FIELD(optim, min_lr),
    STRATA_FIELD(optim, warmup_steps),
    STRATA_FIELD(optim, decay),
    STRATA_FIELD(optim, beta1),
    STRATA_FIELD(optim, beta2),
    STRATA_FIELD(optim, eps),
    STRATA_FIELD(optim, weight_decay),
    STRATA_FIELD(optim, grad_clip),
    STRATA_FIELD(optim, offload),
    STRATA_FIELD(optim, offload_dir),
    STRATA_FIELD(optim, offload_chunk_mb),
    STRATA_FIELD(data, source),
    STRATA_FIELD(data, text),
    STRATA_FIELD(data, dir),
    STRATA_FIELD(data, document_separator),
    STRATA_FIELD(data, val_fraction),
    STRATA_FIELD(data, verify_checksums),
    STRATA_FIELD(data, dedup),
    STRATA_FIELD(data, document_mask),
    STRATA_FIELD(data, eos_id),
    STRATA_FIELD(data.filters, min_doc_chars),
    STRATA_FIELD(data.filters, max_doc_chars),
    STRATA_FIELD(data.filters, max_repeat_fraction),
    STRATA_FIELD(data.filters, max_nonprint_fraction),
    STRATA_FIELD(run, dir),
    STRATA_FIELD(run, resume),
    STRATA_FIELD(system, threads),
    STRATA_FIELD(parallel, tp),
    STRATA_FIELD(parallel, pp),
    STRATA_FIELD(parallel, dp),
    STRATA_FIELD(parallel, zero),
    STRATA_FIELD(parallel, ep),
    STRATA_FIELD(parallel, cp),
    STRATA_FIELD(parallel, cp_impl),
    STRATA_FIELD(parallel, sp),
    STRATA_FIELD(parallel, vpp),
    STRATA_FIELD(parallel, schedule),
    STRATA_FIELD(parallel, micro_batches),
    STRATA_FIELD(parallel, stage_layers),
    STRATA_FIELD(parallel, bucket_mb),
    STRATA_FIELD(parallel, overlap),
    STRATA_FIELD(parallel, comm_timeout_s),
    STRATA_FIELD(parallel, grad_reduce_dtype),
    STRATA_FIELD(system, memory_limit_mb),
    STRATA_FIELD(system, device),
    STRATA_FIELD(fp16, loss_scale),
    STRATA_FIELD(fp16, initial_scale_power),
    STRATA_FIELD(fp16, loss_scale_window),
    STRATA_FIELD(fp16, hysteresis),
    STRATA_FIELD(fp16, min_loss_scale),
    STRATA_FIELD(fp16, consecutive_hysteresis),
    STRATA_FIELD(sample, prompt),
    STRATA_FIELD(sample, max_new_tokens),
    STRATA_FIELD(sample, temperature),
    STRATA_FIELD(sample, top_k),
    STRATA_FIELD(fault, crash_rank),
    STRATA_FIELD(fault, crash_step),
    STRATA_FIELD(fault, attempt),
    STRATA_FIELD(fault, hang_rank),
    STRATA_FIELD(fault, hang_step),
    STRATA_FIELD(fault, slow_rank),
    STRATA_FIELD(fault, slow_ms),
    STRATA_FIELD(fault, nan_rank),
    STRATA_FIELD(fault, nan_step),
    STRATA_FIELD(fault, nan_steps),
    STRATA_FIELD(fault, spike_step),
    STRATA_FIELD(fault, diverge_rank),
    STRATA_FIELD(fault, diverge_step),
    STRATA_FIELD(fault, corrupt_step),
    STRATA_FIELD(fault, fail_save_step),
    STRATA_FIELD(anomaly, max_nonfinite),
    STRATA_FIELD(anomaly, spike_window),
    STRATA_FIELD(anomaly, spike_warmup),
    STRATA_FIELD(anomaly, spike_zscore),
    STRATA_FIELD(anomaly, spike_action),
    STRATA_FIELD(anomaly, replica_check_every),
    STRATA_FIELD(anomaly, straggler_factor),
    STRATA_FIELD(anomaly, link_probe_kib),
    STRATA_FIELD(anomaly, link_probe_every),
    STRATA_FIELD(anomaly, router_collapse_fraction),
    STRATA_FIELD(anomaly, router_collapse_steps),
    STRATA_FIELD(track, tensorboard),
    Field{"post_train.register",
          [](RunConfig& c) -> FieldRef { return &c.post_train.register_model; }},
    STRATA_FIELD(post_train, name),
    STRATA_FIELD(post_train, registry),
    STRATA_FIELD(post_train, eval_command),
    STRATA_FIELD(mlflow, tracking_uri),
    STRATA_FIELD(mlflow, experiment),
    STRATA_FIELD(mlflow, run_name),
    STRATA_FIELD(mlflow, log_checkpoint),
    STRATA_FIELD(profile, enabled),
    STRATA_FIELD(profile, start_step),
    STRATA_FIELD(profile, steps),
    STRATA_FIELD(profile, max_events),
};

#undef STRATA_FIELD

const char* const kSections[] = {"model",        "model.moe", "train",   "optim",    "data",
                                 "data.filters", "run",       "system",  "parallel", "sample",
                                 "fp16",         "fault",     "anomaly", "track",    "profile",
                                 "post_train",   "mlflow"};

}  // namespace

std::span<const Field> config_fields() {
  return kFields;
}

const Field* find_field(const std::string& key) {
  for (const Field& f : kFields)
    if (key == f.key) return &f;
  return nullptr;
}

bool is_section(const std::string& key) {
  return std::find(std::begin(kSections), std::end(kSections), key) != std::end(kSections);
}

}  // namespace strata
