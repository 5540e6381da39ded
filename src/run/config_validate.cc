// Consistency checks of a parsed RunConfig: every value in range and every combination of keys
// the engine supports, each failure one message naming the key(s) and what would work.
#include "run/config_validate.h"

#include "core/error.h"
#include "parallel/pipeline_schedule.h"
#include "run/run_plan.h"
#include "track/registry.h"

namespace strata {

namespace {
template <typename... Args>
void check(bool ok, const std::string& where, const Args&... args) {
  if (!ok) fail(where, ": ", args...);
}
}  // namespace

void validate_config(RunConfig& c, const std::string& where,
                     std::vector<std::string>* engine_limits) {
  // What the engine cannot run yet though the config is consistent: an error, or for the planner
  // a note.
  auto engine_limit = [&](bool ok, const auto&... args) {
    if (ok) return;
    if (!engine_limits) fail(where, ": ", args...);
    engine_limits->push_back(cat(args...));
  };
  try {
    c.model.finalize();
  } catch (const Error& e) {
    fail(where, ": ", e.what());  // finalize names the model.* key
  }
  const TrainConfig& t = c.train;
  check(t.steps >= 1, where, "train.steps: must be at least 1, got ", t.steps);
  check(t.batch_size >= 1, where, "train.batch_size: must be at least 1, got ", t.batch_size);
  check(t.seq_len >= 1, where, "train.seq_len: must be at least 1, got ", t.seq_len);
  check(t.seq_len <= c.model.max_seq_len, where, "train.seq_len: ", t.seq_len,
        " exceeds model.max_seq_len = ", c.model.max_seq_len,
        "; raise model.max_seq_len or lower train.seq_len");
  check(t.grad_accum >= 1, where, "train.grad_accum: must be at least 1, got ", t.grad_accum);
  check(t.eval_every >= 0, where, "train.eval_every: must be 0 (only at the end) or more, got ",
        t.eval_every);
  check(t.eval_batches >= 1, where, "train.eval_batches: must be at least 1, got ", t.eval_batches);
  check(t.log_every >= 1, where, "train.log_every: must be at least 1, got ", t.log_every);
  check(t.checkpoint_every >= 0, where,
        "train.checkpoint_every: must be 0 (only at the end) or more, got ", t.checkpoint_every);
  // At least one, or the final checkpoint would be deleted as soon as it was written.
  check(t.keep_last >= 1, where, "train.keep_last: must be at least 1, got ", t.keep_last);
  const AnomalyConfig& an = c.anomaly;
  check(an.max_nonfinite >= 1, where, "anomaly.max_nonfinite: must be at least 1, got ",
        an.max_nonfinite);
  check(an.spike_window >= 2 && an.spike_zscore > 0, where,
        "anomaly.spike_window must be at least 2 and anomaly.spike_zscore positive");
  check(an.router_collapse_fraction > 0 && an.router_collapse_fraction <= 1 &&
            an.router_collapse_steps >= 0,
        where,
        "anomaly.router_collapse_fraction must lie in (0, 1] and anomaly.router_collapse_steps "
        "must not be negative");
  check(an.replica_check_every >= 0 && an.straggler_factor >= 0, where,
        "anomaly.replica_check_every and anomaly.straggler_factor must not be negative");
  check(an.link_probe_kib >= 0 && an.link_probe_kib <= 65536 && an.link_probe_every >= 0, where,
        "anomaly.link_probe_kib must lie in [0, 65536] and anomaly.link_probe_every must not be "
        "negative, got ",
        an.link_probe_kib, " and ", an.link_probe_every);
  check(c.profile.start_step >= 1 && c.profile.steps >= 1 && c.profile.max_events >= 1000, where,
        "profile.start_step and profile.steps must be at least 1 and profile.max_events at least "
        "1000, got ",
        c.profile.start_step, ", ", c.profile.steps, " and ", c.profile.max_events);
  check(c.optim.offload_chunk_mb > 0, where, "optim.offload_chunk_mb: must be positive, got ",
        c.optim.offload_chunk_mb);
  const LossScalerConfig& ls = c.fp16;
  check(ls.loss_scale >= 0, where, "fp16.loss_scale: must be 0 (dynamic) or positive, got ",
        ls.loss_scale);
  check(ls.initial_scale_power >= 0 && ls.initial_scale_power <= 40, where,
        "fp16.initial_scale_power: must be in [0, 40], got ", ls.initial_scale_power);
  check(ls.loss_scale_window >= 1, where, "fp16.loss_scale_window: must be at least 1, got ",
        ls.loss_scale_window);
  check(ls.hysteresis >= 1, where, "fp16.hysteresis: must be at least 1, got ", ls.hysteresis);
  check(ls.min_loss_scale > 0, where, "fp16.min_loss_scale: must be positive, got ",
        ls.min_loss_scale);

  const OptimConfig& o = c.optim;
  check(o.lr > 0, where, "optim.lr: must be positive, got ", o.lr);
  check(o.min_lr >= 0 && o.min_lr <= o.lr, where, "optim.min_lr: must be in [0, optim.lr = ", o.lr,
        "], got ", o.min_lr);
  check(o.warmup_steps >= 0, where, "optim.warmup_steps: must be 0 or more, got ", o.warmup_steps);
  check(o.beta1 >= 0 && o.beta1 < 1, where, "optim.beta1: must be in [0, 1), got ", o.beta1);
  check(o.beta2 >= 0 && o.beta2 < 1, where, "optim.beta2: must be in [0, 1), got ", o.beta2);
  check(o.eps > 0, where, "optim.eps: must be positive, got ", o.eps);
  check(o.weight_decay >= 0, where, "optim.weight_decay: must be 0 or more, got ", o.weight_decay);
  check(o.grad_clip >= 0, where, "optim.grad_clip: must be 0 (off) or more, got ", o.grad_clip);

  const DataConfig& d = c.data;
  check(d.source != DataSource::text || !d.text.empty(), where,
        "data.text: data.source = \"text\" needs at least one text file, e.g. "
        "data.text = [\"corpus.txt\"]");
  for (const std::string& file : d.text)
    check(!file.empty(), where, "data.text: file names must not be empty");
  check(!d.dir.empty(), where, "data.dir: must not be empty");
  check(!d.document_separator.empty(), where, "data.document_separator: must not be empty");
  check(d.val_fraction > 0 && d.val_fraction <= 0.5, where,
        "data.val_fraction: must be in (0, 0.5], got ", d.val_fraction);
  const FilterConfig& f = d.filters;
  check(f.min_doc_chars >= 0, where, "data.filters.min_doc_chars: must be 0 or more, got ",
        f.min_doc_chars);
  check(f.max_doc_chars >= f.min_doc_chars, where, "data.filters.max_doc_chars: ", f.max_doc_chars,
        " is less than data.filters.min_doc_chars = ", f.min_doc_chars);
  check(f.max_repeat_fraction >= 0 && f.max_repeat_fraction <= 1, where,
        "data.filters.max_repeat_fraction: must be in [0, 1], got ", f.max_repeat_fraction);
  check(f.max_nonprint_fraction >= 0 && f.max_nonprint_fraction <= 1, where,
        "data.filters.max_nonprint_fraction: must be in [0, 1], got ", f.max_nonprint_fraction);

  check(!c.run.dir.empty(), where, "run.dir: must not be empty");
  check(!c.run.resume.empty(), where,
        "run.resume: must be \"auto\", \"none\" or a checkpoint path, got an empty string");
  check(c.system.threads >= 0, where, "system.threads: must be 0 (all cores) or more, got ",
        c.system.threads);
  check(c.system.memory_limit_mb >= 0, where,
        "system.memory_limit_mb: must be 0 (no limit) or more, got ", c.system.memory_limit_mb);
  if (c.system.device == Device::cuda) {
    check(c.optim.offload != OptimizerOffload::nvme, where,
          "optim.offload = \"nvme\" streams the optimizer state through host memory on the CPU "
          "device only; with system.device = \"cuda\" use optim.offload = \"none\"");
    check(c.model.attention == AttentionKernel::flash, where,
          "model.attention = \"naive\" has no CUDA kernel (it materialises T x T probabilities); "
          "with system.device = "
          "\"cuda\" set model.attention = \"flash\"");
  }
  const ParallelConfig& p = c.parallel;
  check(p.tp >= 1, where, "parallel.tp: must be at least 1, got ", p.tp);
  check(p.pp >= 1, where, "parallel.pp: must be at least 1, got ", p.pp);
  check(p.dp >= 0, where, "parallel.dp: must be 0 (derived from the world size) or more, got ",
        p.dp);
  check(p.zero >= 0 && p.zero <= 3, where, "parallel.zero: ZeRO stage must be 0, 1, 2 or 3, got ",
        p.zero);
  check(c.train.recompute_layers >= 0, where,
        "train.recompute_layers: must be 0 (every layer) or more, got ", c.train.recompute_layers);
  check(!c.train.activation_offload || c.train.recompute != Recompute::full, where,
        "train.activation_offload = true with train.recompute = \"full\": full recomputation keeps "
        "only each block's input, which is all the offload would leave on the device; use one of "
        "them (or recompute = \"selective\" with the offload)");
  check(!c.train.activation_offload || p.pp == 1, where,
        "train.activation_offload = true needs parallel.pp = 1: a pipeline stage holds several "
        "micro-batches' activations at once, which the offload's window does not");
  check(p.ep >= 1, where, "parallel.ep: must be at least 1, got ", p.ep);
  check(p.ep == 1 || c.model.moe.enabled(), where, "parallel.ep = ", p.ep,
        " splits the experts of a Mixture-of-Experts model, but model.moe.experts is 0 (family ",
        family_name(c.model.family), "); set parallel.ep = 1 or use an MoE family (mixtral, ",
        "qwen3_moe)");
  if (c.model.moe.enabled()) {
    // The MoE FFN (mixtral, qwen3_moe) runs in f32 on the CPU (GitHub issue 21); the Decoder
    // refuses the same combinations. Its experts split over parallel.ep (carved out of dp).
    const std::string moe = cat("model.moe.experts > 0 (family ", family_name(c.model.family), ")");
    check(c.model.moe.experts % p.ep == 0, where, "parallel.ep = ", p.ep,
          " does not divide model.moe.experts = ", c.model.moe.experts,
          ": each expert-parallel rank holds experts / ep whole experts");
    check(c.model.moe.bias_update_rate == 0 || c.optim.offload == OptimizerOffload::none, where,
          "model.moe.bias_update_rate = ", c.model.moe.bias_update_rate,
          " moves the router biases where the parameters live, which optim.offload = \"",
          enum_name(c.optim.offload), "\" moves off the model; set optim.offload = \"none\"");
    engine_limit(t.precision == Precision::f32, moe,
                 " trains in f32 only so far: set train.precision = \"f32\"");
    engine_limit(c.system.device == Device::cpu, moe,
                 " runs on the CPU only so far: set system.device = \"cpu\"");
  }
  // Context parallelism (parallel.cp, carved out of dp) and document masking.
  check(p.cp >= 1, where, "parallel.cp: must be at least 1, got ", p.cp);
  if (p.cp > 1) {
    check(t.seq_len % (2 * p.cp) == 0, where, "train.seq_len = ", t.seq_len,
          " does not divide into 2 x parallel.cp = ", 2 * p.cp,
          " chunks (context parallelism gives each rank two chunks, r and 2cp-1-r, for causal "
          "load balance); use a seq_len that is a multiple of ",
          2 * p.cp);
    check(c.model.attention == AttentionKernel::flash, where, "parallel.cp = ", p.cp,
          " needs model.attention = \"flash\": naive attention materialises the whole T x T "
          "scores, which context parallelism exists to avoid");
    if (p.cp_impl == CpImpl::ulysses) {
      const int64_t heads = c.model.n_head, kv = c.model.n_kv_head > 0 ? c.model.n_kv_head : heads;
      check(heads % (p.tp * p.cp) == 0 && kv % (p.tp * p.cp) == 0, where,
            "parallel.cp_impl = \"ulysses\" splits the heads over parallel.cp = ", p.cp,
            " (after parallel.tp = ", p.tp, "), but model.n_head = ", heads,
            " and model.n_kv_head = ", kv, " do not both divide by tp x cp = ", p.tp * p.cp,
            "; use parallel.cp_impl = \"ring\" or a cp that divides ", heads / p.tp, " and ",
            kv / std::max<int64_t>(1, p.tp));
    }
  }
  if (c.data.document_mask) {
    check(c.model.attention == AttentionKernel::flash, where,
          "data.document_mask = true needs model.attention = \"flash\"");
    check(c.data.source != DataSource::synthetic || c.data.eos_id >= 0, where,
          "data.document_mask = true over data.source = \"synthetic\": random tokens have no "
          "end-of-document token; set data.eos_id (a token id below model.vocab_size = ",
          c.model.vocab_size, ") or data.document_mask = false");
  }
  check(c.data.eos_id < c.model.vocab_size, where, "data.eos_id = ", c.data.eos_id,
        " is outside the vocabulary [0, ", c.model.vocab_size, ")");
  check(p.vpp >= 1, where, "parallel.vpp: must be at least 1, got ", p.vpp);
  check(p.vpp == 1 || p.pp > 1, where, "parallel.vpp = ", p.vpp,
        " needs parallel.pp > 1 (virtual stages interleave chunks across pipeline ranks)");
  check(p.micro_batches >= 0, where,
        "parallel.micro_batches: must be 0 (train.grad_accum) or more, got ", p.micro_batches);
  check(p.micro_batches == 0 || c.train.grad_accum == 1 || p.micro_batches == c.train.grad_accum,
        where, "parallel.micro_batches = ", p.micro_batches,
        " and train.grad_accum = ", c.train.grad_accum,
        " both set the micro-batches of a step; set one of them (they mean the same thing)");
  check(!p.sp || p.tp > 1, where,
        "parallel.sp = true needs parallel.tp > 1 (sequence parallelism shards what tensor "
        "parallelism replicates)");
  try {
    validate_pipeline_config(p.schedule, static_cast<int>(p.pp),
                             static_cast<int>(micro_batches_per_step(c)), static_cast<int>(p.vpp));
  } catch (const Error& e) {
    fail(where, ": ", e.what());
  }
  check(p.pp == 1 || p.zero <= 1, where, "parallel.zero = ", p.zero, " with parallel.pp = ", p.pp,
        ": ZeRO-2/3 shard gradients and parameters per micro-batch, which pipeline parallelism "
        "keeps across micro-batches in flight (DeepSpeed has the same rule); use parallel.zero = "
        "0 or 1 with pipelines");
  check(p.bucket_mb > 0, where, "parallel.bucket_mb: must be positive, got ", p.bucket_mb);
  check(p.comm_timeout_s > 0, where, "parallel.comm_timeout_s: must be positive, got ",
        p.comm_timeout_s);
  check(c.sample.max_new_tokens >= 0, where, "sample.max_new_tokens: must be 0 or more, got ",
        c.sample.max_new_tokens);
  check(c.sample.temperature >= 0, where, "sample.temperature: must be 0 (greedy) or more, got ",
        c.sample.temperature);
  check(c.sample.top_k >= 0, where, "sample.top_k: must be 0 (off) or more, got ", c.sample.top_k);
  try {
    if (c.post_train.register_model && !c.post_train.name.empty())
      registry::check_name(c.post_train.name);
  } catch (const Error& e) {
    fail(where, ": post_train.name: ", e.what());
  }
}

}  // namespace strata
