#include "train/trainer.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>

#include "comm/process_groups.h"
#include "core/clock.h"
#include "core/log.h"
#include "core/trace.h"
#include "data/manifest.h"
#include "data/prepare.h"
#include "data/shard.h"
#include "data/tokenizer.h"
#include "data/unigram.h"
#include "io/atomic_file.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/kernels.h"
#include "launch/heartbeat.h"
#include "model/decoder.h"
#include "model/generate.h"
#include "optim/adamw.h"
#include "optim/host_offload.h"
#include "optim/loss_scaler.h"
#include "optim/offload.h"
#include "parallel/data_parallel.h"
#include "parallel/model_parallel.h"
#include "parallel/pipeline_executor.h"
#include "run/run_plan.h"
#include "track/console.h"
#include "track/events.h"
#include "track/metrics.h"
#include "train/checkpoint.h"
#include "train/mlflow_run.h"
#include "train/post_train.h"
#include "train/token_source.h"
#include "train/train_device.h"

namespace strata {

namespace fs = std::filesystem;

Trainer::Trainer(const RunConfig& config, ProcessGroups* groups, Backend* backend)
    : Trainer(resolve_run_plan(config, groups ? groups->world().size() : 1, groups != nullptr),
              groups, backend) {}

Trainer::Trainer(RunPlan plan, ProcessGroups* groups, Backend* backend)
    : plan_(std::move(plan)),
      own_groups_(groups ? nullptr : std::make_unique<ProcessGroups>(ProcessGroups::single())),
      groups_(groups ? groups : own_groups_.get()),
      rank_(groups_->world().rank()),
      world_(groups_->world().size()),
      device_(backend ? std::make_unique<TrainDevice>(*backend)
                      : std::make_unique<TrainDevice>(config_.system)),
      arena_(device_->backend().memory()) {
  STRATA_CHECK(groups_->layout().world() == world_ && groups_->layout().tp == plan_.layout.tp &&
                   groups_->layout().pp == plan_.layout.pp,
               "Trainer: the process groups' layout ", groups_->layout().describe(),
               " is not the run plan's ", plan_.layout.describe());
  groups_->set_timeout(config_.parallel.comm_timeout_s);
  if (config_.system.threads > 0) omp_set_num_threads(static_cast<int>(config_.system.threads));
  if (const char* a = std::getenv("STRATA_LAUNCH_ATTEMPT")) launch_attempt_ = std::atoll(a);
  const AnomalyConfig& an = config_.anomaly;
  spikes_ = std::make_unique<LossSpikeDetector>(an.spike_window, an.spike_warmup, an.spike_zscore);
  router_collapse_ = std::make_unique<RouterCollapseDetector>(
      an.router_collapse_fraction, an.router_collapse_steps, config_.model.moe.experts,
      config_.model.moe.top_k);
  if (world_ > 1) install_timeout_hint();
  io::make_dirs(config_.run.dir);
  if (world_ > 1) {
    // Every rank keeps its own log; only rank 0 talks to the console (warnings and errors of
    // every rank still do).
    log::set_rank(rank_);
    io::make_dirs((fs::path(config_.run.dir) / "logs").string());
    log::open_file((fs::path(config_.run.dir) / "logs" / cat("rank_", rank_, ".log")).string());
    if (!is_rank0()) log::set_level(log::Level::warn);
  } else {
    log::open_file((fs::path(config_.run.dir) / "train.log").string());
  }
  if (config_.system.memory_limit_mb > 0) arena_.set_limit(config_.system.memory_limit_mb << 20);
  heartbeat("init");
  if (is_rank0())
    io::write_file_atomic((fs::path(config_.run.dir) / "config.json").string(),
                          config_to_json(config_).dump(2));

  prepare_data();
  build_model();
  resume();
  // The snapshot buffer of asynchronous checkpoints, allocated and touched now rather than at
  // the first save (which would otherwise pay for the first touch of its pages).
  if (config_.train.async_checkpoint) {
    int64_t floats = 0;
    for (const SliceSource& s : checkpoint_sources(/*read_offloaded=*/false))
      floats += s.entry.count;
    ckpt_writer_.reserve(floats);
  }
  peak_flops_ = device_->measure_peak_flops(plan_.precision);
  metrics_ = std::make_unique<MetricsSink>();  // rank 0 writes the run's metrics, others none
  if (is_rank0()) {
    add_run_dir_outputs(*metrics_, config_.run.dir, config_.track.tensorboard);
    metrics_->add(mlflow_output(config_));  // [mlflow]
  }
  console_ = std::make_unique<ConsoleProgress>(config_.train.log_every);
  profiler_.setup(config_.profile, config_.run.dir, *groups_);  // [profile]: collective
  log::info(
      "model: ", family_name(config_.model.family), " ", config_.model.n_layer, " layers, d_model ",
      config_.model.d_model, ", ", model_->params().size(), " parameters; ", omp_get_max_threads(),
      " threads; device ", device_->description(), "; GEMM ",
      device_->backend().kind() == Device::cpu ? kernels::describe_gemm_backend() : "cuBLASLt",
      " at ", static_cast<int64_t>(peak_flops_ / 1e9), " GFLOP/s (",
      enum_name(config_.train.precision), "); CPU kernels ",
      kernels::isa::describe(kernels::isa::active()),
      kernels::isa::source() == std::string("cpu") ? "" : " (STRATA_CPU_ISA)");
}

void Trainer::build_model() {
  const TrainConfig& t = config_.train;
  const RunPlan& plan = plan_;
  micro_batches_ = plan.micro_batches;
  const int64_t tokens = plan.tokens;
  if (plan.loss_scaling) scaler_ = std::make_unique<LossScaler>(config_.fp16);
  const Layout& layout = groups_->layout();
  // Device buffers over NCCL from here on (a job's groups on a GPU; no-op on the CPU).
  if (groups_->has_mpi()) device_->route(*groups_);
  // The experts (MoE) reduce over the expert-data-parallel group: dp / ep ranks hold each.
  dp_ = std::make_unique<DataParallel>(groups_->dp(), plan.data_parallel, &groups_->edp());
  const Layout::Coord at = groups_->coord();
  DecoderOptions o = plan.decoder_options(at.tp, at.pp, at.dp % layout.ep);
  o.backend = &device_->backend();
  o.plan = [this](ParamStore& params) { dp_->plan(params); };
  std::vector<PipelineAction> actions;
  if (layout.tp > 1) o.tp = &groups_->tp();
  if (layout.ep > 1) o.ep = &groups_->ep();
  o.context = {layout.cp > 1 ? &groups_->cp() : nullptr, config_.parallel.cp_impl,
               config_.data.document_mask};
  // The ranks holding other rows of each micro-batch, for the MoE global-batch balancing loss.
  o.batch_groups = {&groups_->dp()};
  if (config_.parallel.sp && layout.tp > 1) o.batch_groups.push_back(&groups_->tp());
  if (layout.pp > 1) {
    actions = make_schedule(plan.schedule, layout.pp, static_cast<int>(micro_batches_),
                            plan.shard.vpp, at.pp);
    o.chunk_slots = pipeline_slots_needed(actions, plan.shard.vpp);
  }
  model_ = std::make_unique<Decoder>(config_.model, arena_, t.batch_size, plan.seq_len, o);
  dp_->setup(model_->params(), arena_);
  model_->set_hooks(dp_.get());
  dp_->init_params(model_->config(), t.seed);
  make_optimizer(dp_->optimizer_segments(), dp_->optimizer_state_size());
  if (plan.sharded_model())
    mp_ =
        std::make_unique<ModelParallel>(*groups_, config_.model, plan.shard, *model_, *dp_, arena_);
  if (layout.pp > 1)
    pipe_ = std::make_unique<PipelineExecutor>(*model_, groups_->pp(), std::move(actions),
                                               static_cast<int>(micro_batches_), arena_);
  // A pipeline holds every micro-batch of the step at once; otherwise one at a time.
  const int64_t held = pipe_ ? micro_batches_ : 1;
  inputs_ = host_arena_.alloc<int32_t>(MemCategory::workspace, held * tokens, "input batch");
  targets_ = host_arena_.alloc<int32_t>(MemCategory::workspace, held * tokens, "target batch");
  if (o.context.active()) {
    const int64_t whole = t.batch_size * t.seq_len;
    whole_inputs_ = host_arena_.alloc<int32_t>(MemCategory::workspace, whole, "whole sequences");
    whole_targets_ = host_arena_.alloc<int32_t>(MemCategory::workspace, whole, "whole targets");
    if (config_.data.document_mask)
      doc_starts_ =
          host_arena_.alloc<int32_t>(MemCategory::workspace, held * whole, "document starts");
  }
}

// bf16: AdamW rounds each updated master value into the model's bf16 working weights when its
// segments cover every parameter (one rank, or dp without a ZeRO shard), saving the model a
// second pass over them; otherwise the model converts each group on first use after the update.
bool Trainer::attach_bf16_copy(std::vector<OptimSegment>& segments) {
  int64_t covered = 0, total = 0;
  for (const OptimSegment& s : segments) {
    if (!model_->bf16_copy_of(s.param)) return false;
    covered += s.count;
  }
  for (const ParamInfo& p : model_->params().all()) total += p.numel;
  if (covered != total) return false;
  for (OptimSegment& s : segments) s.param_bf16 = model_->bf16_copy_of(s.param);
  return true;
}

void Trainer::make_optimizer(std::vector<OptimSegment> segments, int64_t state_size) {
  if (plan_.optimizer_offload == OptimizerOffload::cpu)
    return make_host_offload(std::move(segments), state_size);
  if (plan_.optimizer_offload == OptimizerOffload::none) {
    optimizer_writes_bf16_ = attach_bf16_copy(segments);
    optimizer_ = std::make_unique<AdamW>(std::move(segments), state_size, arena_, config_.optim,
                                         model_->backend());
    return;
  }
  OffloadOptions o;
  const fs::path root = config_.optim.offload_dir.empty() ? fs::path(config_.run.dir) / "offload"
                                                          : fs::path(config_.optim.offload_dir);
  o.dir = (root / cat("rank_", rank_)).string();
  o.chunk_elements = plan_.offload_chunk_elements;
  auto files =
      std::make_unique<OffloadedAdamW>(std::move(segments), state_size, arena_, config_.optim, o);
  files->init_from_params();  // the parameters are initialised by now
  optimizer_ = std::move(files);
  log::info("optimizer state offloaded to ", o.dir, " (", config_.optim.offload_chunk_mb,
            " MB chunks)");
}

int64_t Trainer::optimizer_steps() const {
  return optimizer_->steps_taken();
}

Trainer::~Trainer() {
  set_timeout_hint(nullptr);  // it refers to this trainer
  log::close_file();
}

// Tells the supervisor (strata launch) this rank is alive and where it is.
void Trainer::heartbeat(const char* phase) {
  launch::write_heartbeat(config_.run.dir, rank_, step_, phase);
}

double Trainer::mean_over_dp(double value) {
  if (groups_->dp().size() == 1) return value;  // kept in double (the reduction is in f32)
  double v = value;  // summed as two floats would lose digits; f32 is what Comm reduces
  float f = static_cast<float>(v);
  groups_->dp().all_reduce(&f, 1, DType::f32, ReduceOp::avg)->wait();
  return static_cast<double>(f);
}

void Trainer::prepare_data() {
  const DataConfig& d = config_.data;
  const TrainConfig& t = config_.train;
  TokenSourceOptions opt;
  opt.batch = t.batch_size;
  opt.seq_len = t.seq_len;
  opt.vocab_size = config_.model.vocab_size;
  opt.seed = t.seed;
  // The cp ranks of a data replica read the same sequences (each keeps its rows of them).
  const int cp = groups_->layout().cp;
  opt.rank = groups_->dp().rank() / cp;
  opt.world = groups_->dp().size() / cp;
  if (d.document_mask) eos_id_ = static_cast<int32_t>(d.eos_id);
  if (d.source == DataSource::synthetic) {
    train_data_ = make_synthetic_source(opt);
    TokenSourceOptions val = opt;
    val.seed = t.seed ^ 0x5eedull;  // distinct tokens for "validation"
    val_data_ = make_synthetic_source(val);
    return;
  }
  data_dir_ = d.dir;
  tokenizer_path_ = (fs::path(d.dir) / "tokenizer.json").string();
  // Rank 0 prepares; the others wait for it (a barrier with the comm timeout).
  // Prepared already: a manifest (complete), or shards of a folder prepared before manifests
  // (not those of a prepare that was interrupted: its work folder is still there, and preparing
  // again resumes it).
  const bool prepared =
      fs::exists(fs::path(d.dir) / data::kManifestFile) ||
      (!data::list_shards(d.dir, "train").empty() && !fs::exists(fs::path(d.dir) / ".prepare"));
  if (d.source == DataSource::text && is_rank0() && !prepared) {
    heartbeat("prepare");
    log::info("preparing data: training a ", config_.model.vocab_size, "-token BPE tokenizer on ",
              d.text.size(), " file(s) into ", d.dir);
    const data::PrepareReport report =
        data::prepare_text(d.text, d.dir, config_.model.vocab_size, d.val_fraction, t.seed,
                           d.document_separator, d.filters, d.dedup);
    log::info(report.summary());
  }
  groups_->world().barrier();
  // The manifest's shards, each checked (rank 0 also reads every byte against its checksum).
  data::VerifyOptions verify;
  verify.checksums = is_rank0() && d.verify_checksums;
  const data::PreparedShards shards = data::prepared_shards(d.dir, verify);
  if (is_rank0() && !shards.from_manifest && !shards.train.empty())
    log::warn("data.dir '", d.dir, "' has no ", data::kManifestFile,
              " (prepared by an older strata): its shards are read by name, unchecked");
  const std::vector<std::string>& train_shards = shards.train;
  const std::vector<std::string>& val_shards = shards.val;
  STRATA_CHECK(!train_shards.empty(), "data.dir '", d.dir,
               "' has no train_*.bin shards; run `strata "
               "prepare` first, or set data.source = \"text\" with data.text = [files]");
  if (fs::exists(tokenizer_path_)) {
    const data::Tokenizer tok = data::Tokenizer::load(tokenizer_path_);
    if (d.document_mask && eos_id_ < 0) eos_id_ = tok.eot_id();
    STRATA_CHECK(tok.vocab_size() <= config_.model.vocab_size, "the tokenizer in '",
                 tokenizer_path_, "' has ", tok.vocab_size(), " tokens but model.vocab_size is ",
                 config_.model.vocab_size, "; set model.vocab_size >= ", tok.vocab_size(),
                 " or prepare the data again with this vocabulary size");
  }
  STRATA_CHECK(!d.document_mask || eos_id_ >= 0, "data.document_mask = true: the data in '", d.dir,
               "' has no end-of-document token (no tokenizer.json with <|endoftext|>, "
               "<|end_of_text|> or </s>); set data.eos_id to the token that ends each document, "
               "or data.document_mask = false");
  train_data_ = make_shard_source(train_shards, opt, /*shuffle=*/true);
  if (!val_shards.empty()) {
    val_data_ = make_shard_source(val_shards, opt, /*shuffle=*/false);
    unigram_baseline_ = data::unigram_baseline(train_shards, val_shards, config_.model.vocab_size);
    log::info("validation: unigram baseline ", unigram_baseline_,
              " nats/token (a model that "
              "learned only token frequencies)");
  }
}

void Trainer::draw(TokenSource& source, int64_t mb) {
  const int64_t local = plan_.tokens;
  if (!whole_inputs_) return source.next(inputs_ + mb * local, targets_ + mb * local);
  source.next(whole_inputs_, whole_targets_);
  const TrainConfig& t = config_.train;
  if (doc_starts_)
    document_starts(doc_starts_ + mb * t.batch_size * t.seq_len, whole_inputs_, t.batch_size,
                    t.seq_len, eos_id_);
  const ContextSplit split{t.seq_len, groups_->layout().cp};
  const int rank = groups_->cp().rank();
  const int64_t rows = plan_.seq_len;
  for (int64_t b = 0; b < t.batch_size; ++b) {
    for (int64_t i = 0; i < rows; ++i) {
      const int64_t from = b * t.seq_len + split.global_row(i, rank);
      inputs_[mb * local + b * rows + i] = whole_inputs_[from];
      targets_[mb * local + b * rows + i] = whole_targets_[from];
    }
  }
}

const int32_t* Trainer::doc_starts(int64_t mb) const {
  const TrainConfig& t = config_.train;
  return doc_starts_ ? doc_starts_ + mb * t.batch_size * t.seq_len : nullptr;
}

StepResult Trainer::train_step() {
  const TrainConfig& t = config_.train;
  const auto t0 = Clock::now();
  inject_start_faults();
  ParamStore& params = model_->params();
  groups_->set_step(step_ + 1);
  groups_->reset_stats();  // metrics report each step's communication
  dp_->begin_step();
  const int64_t m = micro_batches_, tokens = plan_.tokens;  // this rank's, per micro-batch
  StepResult r;
  // After a rollback the batch that made the loss spike is consumed without training on it.
  if (const auto it = std::find(skip_batch_at_.begin(), skip_batch_at_.end(), step_ + 1);
      it != skip_batch_at_.end()) {
    for (int64_t mb = 0; mb < m; ++mb) draw(*train_data_, 0);
    skip_batch_at_.erase(it);
    r.skipped_batch = true;
    log::warn("step ", step_ + 1, ": skipping the batch that made the loss spike (now at ",
              train_data_->position(), ")");
  }
  // fp16 scales the loss (so the gradients) up to keep small gradients inside f16's range; the
  // scale is divided out again before clipping and the update.
  const float loss_scale = scaler_ ? scaler_->scale() : 1.0f;
  const float grad_scale = loss_scale / static_cast<float>(tokens * m);
  double loss = 0;
  model_->reset_moe_stats();
  r.loss_scale = loss_scale;
  if (pipe_) {
    auto tick = Clock::now();
    for (int64_t mb = 0; mb < m; ++mb) draw(*train_data_, mb);
    r.data_s += seconds_since(tick);
    const PipelineStepStats st = pipe_->run(
        inputs_, targets_, grad_scale,
        [this, m](int mb, int /*chunk*/) { dp_->begin_micro_batch(mb == m - 1); }, doc_starts_,
        config_.train.batch_size * config_.train.seq_len);
    r.compute_s = st.compute_s;
    r.bubble_s = st.wall_s - st.compute_s;
    // The last stage computed the losses; the bubble is averaged over the stages.
    float shared[2] = {static_cast<float>(st.loss_sum / static_cast<double>(m)),
                       static_cast<float>(st.bubble_fraction())};
    Comm& pp = groups_->pp();
    pp.broadcast(shared, 1, DType::f32, pp.size() - 1)->wait();
    pp.all_reduce(shared + 1, 1, DType::f32, ReduceOp::avg)->wait();
    loss = shared[0];
    r.bubble_fraction = shared[1];
    const ParallelConfig& p = config_.parallel;
    r.bubble_formula =
        bubble_formula(plan_.schedule, pp.size(), static_cast<int>(m), static_cast<int>(p.vpp));
  } else {
    for (int64_t micro = 0; micro < m; ++micro) {
      auto tick = Clock::now();
      draw(*train_data_, 0);
      r.data_s += seconds_since(tick);
      tick = Clock::now();
      if (micro == 0) inject_slowness();
      dp_->begin_micro_batch(micro == m - 1);
      if (offload_hooks_) offload_hooks_->begin_micro_batch(micro == m - 1);
      loss += model_->forward_backward(inputs_, targets_, grad_scale, 0, doc_starts(0));
      r.compute_s += seconds_since(tick);
    }
    loss /= static_cast<double>(m);
  }
  if (!model_->moe_stats().empty()) record_moe(r, m);
  if (groups_->tp().size() > 1) {
    r.tp_comm_s = groups_->tp().stats().total_wait_seconds();
    r.compute_s = std::max(0.0, r.compute_s - r.tp_comm_s);
  }
  if (groups_->layout().ep > 1) {  // the MoE token exchange, waited inside forward and backward
    r.ep_comm_s = groups_->ep().stats().total_wait_seconds();
    r.compute_s = std::max(0.0, r.compute_s - r.ep_comm_s);
  }
  if (groups_->layout().cp > 1) {  // the ring's or Ulysses' transfers, inside attention
    const CommStats cs = groups_->cp().stats();
    r.cp_comm_s = cs.total_wait_seconds();
    for (const CommOpStats& op : cs.ops) r.cp_flight_s += op.seconds;
    r.compute_s = std::max(0.0, r.compute_s - r.cp_comm_s);
  }
  auto tick = Clock::now();
  dp_->finish_gradients();
  if (mp_) mp_->finish_gradients();
  loss = mean_over_dp(loss);
  r.comm_exposed_s = seconds_since(tick);
  inject_gradient_faults();
  // A synthetic loss spike, once (it stands for a bad batch, which a rollback skips).
  if (config_.fault.spike_step == step_ + 1 && !spike_injected_) {
    loss *= 10;
    spike_injected_ = true;
  }
  tick = Clock::now();
  // The norm is global (every rank computes the same value), so every rank takes the same
  // decision below, including an fp16 overflow skip.
  r.grad_norm = (mp_ ? mp_->grad_norm() : dp_->grad_norm()) / static_cast<double>(loss_scale);
  r.lr = learning_rate(config_.optim, step_, t.steps);
  const bool finite = std::isfinite(r.grad_norm) && std::isfinite(loss);
  const bool apply = accept_update(loss, r.grad_norm, r);
  if (apply) {
    const float scale = clip_coefficient(r.grad_norm, config_.optim.grad_clip) / loss_scale;
    optimizer_->step(static_cast<float>(r.lr), scale);
    dp_->after_optimizer_step();
    update_router_bias(r);
    params.bump_version();  // the 16-bit working weights refresh from the new master values
    if (optimizer_writes_bf16_) model_->bf16_copy_written();
  } else if (!finite && scaler_) {
    log::info("step ", step_ + 1, ": fp16 gradients overflowed at loss scale ", loss_scale,
              "; update skipped");
  }
  if (!apply) optimizer_->discard_gradients();
  r.skipped = !apply;
  if (scaler_) scaler_->update(!finite);
  device_->backend().synchronize();  // a GPU's update has finished: the step's times are real
  r.optimizer_s = seconds_since(tick);
  trace::complete_since("optimizer", "optimizer", tick);
  ++step_;
  r.step = step_;
  r.loss = loss;
  after_step_checks(r);
  if (rollback_requested_) {
    rollback_requested_ = false;
    r.rolled_back = rollback();
    if (!r.rolled_back)
      log::warn("step ", r.step, ": no checkpoint to roll back to; the update was skipped instead");
    else if (is_rank0())
      append_event(config_.run.dir, rank_, "rollback", r.step, {{"to_step", step_}});
  }
  r.seconds = seconds_since(t0);
  return r;
}

double Trainer::evaluate() {
  const TraceSpan span("eval", "eval");
  if (!val_data_) return std::numeric_limits<double>::quiet_NaN();
  const TrainConfig& t = config_.train;
  val_data_->rewind();
  double total = 0;
  for (int64_t i = 0; i < t.eval_batches; ++i) {
    draw(*val_data_, 0);
    total +=
        pipe_ ? pipe_->evaluate(inputs_, targets_, doc_starts(0))
              : model_->forward(inputs_, targets_, t.batch_size, plan_.seq_len, 0, doc_starts(0));
  }
  return mean_over_dp(total / static_cast<double>(std::max<int64_t>(1, t.eval_batches)));
}

std::vector<float> Trainer::local_full(const float* local_or_shard, bool sharded) {
  const ParamStore& params = model_->params();
  if (!sharded) {
    std::vector<float> full(static_cast<size_t>(params.size()));
    device_->download(full.data(), local_or_shard, params.size());
    return full;
  }
  // The shard on the host first: the gather then runs over the host (MPI) group.
  std::vector<float> staging;
  const float* shard = device_->host_view(local_or_shard, dp_->shard_size(), staging);
  std::vector<float> full(static_cast<size_t>(params.size()));
  dp_->gather_to_full(shard, full.data());
  return full;
}

std::vector<float> Trainer::to_global(const std::vector<float>& local_full) {
  if (!mp_) return local_full;
  std::vector<float> whole(is_rank0() ? static_cast<size_t>(mp_->whole_layout().size()) : 0);
  mp_->gather(local_full.data(), whole.data());
  return whole;
}

std::vector<float> Trainer::global_params() {
  const bool sharded = dp_->params_sharded();
  return to_global(local_full(sharded ? dp_->shard_params() : model_->params().data(), sharded));
}

std::vector<float> Trainer::global_grads() {
  const bool sharded = dp_->grads_sharded();
  return to_global(local_full(sharded ? dp_->shard_grads() : model_->params().grads(), sharded));
}

namespace {
// Per MoE layer, keyed by its index (an object, so that TensorBoard charts every number as
// moe/layers/L/...): the step's tokens per expert (every micro-batch and rank) as min / mean / max,
// and the layer's dropped assignments and balancing losses.
nlohmann::json moe_layers_json(const StepResult& r) {
  nlohmann::json out = nlohmann::json::object();
  for (size_t l = 0; l < r.moe_layers.size(); ++l) {
    nlohmann::json j = {{"dropped", r.moe_layers[l].dropped},
                        {"aux_loss", r.moe_layers[l].aux_loss},
                        {"z_loss", r.moe_layers[l].z_loss}};
    if (l < r.moe_tokens_per_expert.size() && !r.moe_tokens_per_expert[l].empty()) {
      const std::vector<int64_t>& t = r.moe_tokens_per_expert[l];
      int64_t sum = 0;
      for (int64_t v : t) sum += v;
      j["tokens_min"] = *std::min_element(t.begin(), t.end());
      j["tokens_mean"] = static_cast<double>(sum) / static_cast<double>(t.size());
      j["tokens_max"] = *std::max_element(t.begin(), t.end());
    }
    out[std::to_string(l)] = j;
  }
  return out;
}
}  // namespace

void Trainer::write_metrics(const StepResult& r, double tokens_per_s, double mfu, double val_loss) {
  nlohmann::json j;
  j["step"] = r.step;
  j["loss"] = r.loss;
  j["lr"] = r.lr;
  j["grad_norm"] = r.grad_norm;
  if (r.nonfinite) j["nonfinite"] = true;
  if (r.loss_spike) j["loss_spike"] = {{"zscore", r.loss_zscore}};
  if (!r.stragglers.empty()) j["stragglers"] = r.stragglers;
  if (!r.slow_links.empty()) j["slow_links"] = r.slow_links;
  if (!r.diverged.empty()) j["diverged"] = r.diverged;
  if (r.skipped) j["skipped"] = true;
  if (r.rolled_back) j["rolled_back_to"] = step_;
  if (r.skipped_batch) j["skipped_batch"] = true;
  if (!last_checkpoint_.is_null()) {  // committed since the last line
    j["checkpoint"] = last_checkpoint_;
    last_checkpoint_ = nullptr;
  }
  if (scaler_) {
    j["loss_scale"] = r.loss_scale;
    j["skipped_steps"] = scaler_->skipped_steps();
  }
  if (r.skipped) j["skipped"] = true;
  if (r.rolled_back) j["rolled_back_to"] = step_;
  if (r.skipped_batch) j["skipped_batch"] = true;
  j["tokens_per_s"] = tokens_per_s;
  j["mfu"] = mfu;
  j["step_ms"] = 1e3 * r.seconds;
  j["time"] = {{"data_s", r.data_s},
               {"compute_s", r.compute_s},
               {"comm_exposed_s", r.comm_exposed_s},
               {"optimizer_s", r.optimizer_s},
               {"tp_comm_s", r.tp_comm_s},
               {"ep_comm_s", r.ep_comm_s},
               {"cp_comm_s", r.cp_comm_s},
               {"bubble_s", r.bubble_s},
               {"other_s", std::max(0.0, r.seconds - r.data_s - r.compute_s - r.comm_exposed_s -
                                             r.optimizer_s - r.bubble_s - r.tp_comm_s -
                                             r.ep_comm_s - r.cp_comm_s)}};
  j["comm_share"] = r.seconds > 0
                        ? (r.comm_exposed_s + r.tp_comm_s + r.ep_comm_s + r.cp_comm_s) / r.seconds
                        : 0.0;
  if (groups_->layout().cp > 1)
    j["context"] = {{"cp", groups_->layout().cp},
                    {"impl", enum_name(config_.parallel.cp_impl)},
                    {"flight_s", r.cp_flight_s},
                    {"exposed_s", r.cp_comm_s},
                    {"hidden_share",
                     r.cp_flight_s > 0 ? std::max(0.0, 1.0 - r.cp_comm_s / r.cp_flight_s) : 0.0}};
  if (pipe_)
    j["pipeline"] = {{"bubble_fraction", r.bubble_fraction},
                     {"bubble_formula", r.bubble_formula},
                     {"schedule", to_string(plan_.schedule)},
                     {"micro_batches", micro_batches_},
                     {"vpp", config_.parallel.vpp}};
  nlohmann::json mem;
  const MemStats stats = arena_.stats();
  for (int c = 0; c < kNumMemCategories; ++c)
    mem[std::string(mem_category_name(static_cast<MemCategory>(c)))] = stats.current[c];
  mem["total"] = stats.total_current;
  j["mem"] = mem;
  if (!std::isnan(val_loss)) j["val_loss"] = val_loss;
  if (!model_->moe_stats().empty())
    j["moe"] = {{"aux_loss", r.moe_aux_loss},   {"z_loss", r.moe_z_loss},
                {"dropped", r.moe_dropped},     {"tokens_per_expert", r.moe_tokens_per_expert},
                {"layers", moe_layers_json(r)}, {"collapsed", r.router_collapsed}};
  const CommStats cs = groups_->stats();  // zero for a process that runs alone
  j["comm_bytes"] = cs.total_bytes();
  j["comm_wait_s"] = cs.total_wait_seconds();
  nlohmann::json per_group;
  for (Comm* c : {&groups_->tp(), &groups_->dp(), &groups_->pp()}) {
    if (c->size() == 1) continue;
    const CommStats st = c->stats();
    per_group[c->name()] = {{"bytes", st.total_bytes()}, {"wait_s", st.total_wait_seconds()}};
  }
  if (!per_group.empty()) j["comm"] = per_group;
  metrics_->write(j);
}

double Trainer::run() {
  const TrainConfig& t = config_.train;
  // Tokens of the global batch (every data replica's micro-batches: the cp ranks of a replica share
  // its sequences); MFU against every rank's peak.
  const int64_t dp_size = groups_->layout().replicas();
  const double tokens_per_step =
      static_cast<double>(t.batch_size * t.seq_len * micro_batches_ * dp_size);
  const double flops_per_token = model_->train_flops_per_token();
  double smoothed = 0;
  double val_loss = std::numeric_limits<double>::quiet_NaN();
  const int64_t first = step_;
  if (first >= t.steps) log::info("nothing to train: already at step ", first, " of ", t.steps);
  while (step_ < t.steps) {
    profiler_.begin_step(step_ + 1);
    const StepResult r = train_step();
    if (r.step == first + 1) arena_.freeze();  // from here on the loop must not allocate
    smoothed = smoothed == 0 ? r.seconds : 0.9 * smoothed + 0.1 * r.seconds;
    const double tps = tokens_per_step / r.seconds;
    const double mfu = tps * flops_per_token / (peak_flops_ * world_);
    double v = std::numeric_limits<double>::quiet_NaN();
    heartbeat("step");
    if ((t.eval_every > 0 && r.step % t.eval_every == 0) || r.step == t.steps) {
      heartbeat("eval");
      v = evaluate();
      val_loss = v;
      if (!std::isnan(v) && is_rank0())
        console_->message(
            cat("step ", r.step, ": val_loss ", v,
                unigram_baseline_ > 0 ? cat(" (unigram baseline ", unigram_baseline_, ")") : ""));
    }
    write_metrics(r, tps, mfu, v);
    if (is_rank0())
      // The line's tokens/s and MFU both from the smoothed step time (metrics.jsonl keeps each
      // step's own): one slow or fast step does not swing the MFU shown past the rate beside it.
      console_->update({r.step, t.steps, r.loss, r.lr, r.grad_norm, tokens_per_step / smoothed,
                        mfu * r.seconds / smoothed, smoothed});
    // A save in flight is committed as soon as every rank's file is written.
    poll_checkpoint(false);
    const bool due =
        (t.checkpoint_every > 0 && r.step % t.checkpoint_every == 0) || r.step == t.steps;
    if (due && !r.rolled_back) {
      console_->finish();
      heartbeat("checkpoint");
      begin_save();
    }
    profiler_.end_step(r.step);  // writes the trace when the window closes (collective)
  }
  poll_checkpoint(true);  // the last checkpoint is committed before the job ends
  profiler_.finish();
  console_->finish();
  if (arena_.allocations_after_freeze() > 0)
    log::warn(arena_.allocations_after_freeze(),
              " arena allocations happened inside the step loop");
  log::info("training done: ", step_, " steps",
            std::isnan(val_loss) ? "" : cat(", val_loss ", val_loss));
  sample_at_end();
  heartbeat("done");
  if (is_rank0()) run_post_train(config_, step_);  // [post_train]: registry, evaluation
  metrics_->finish();                              // MLflow: artifacts, FINISHED
  return val_loss;
}

void Trainer::sample_at_end() {
  const SampleConfig& s = config_.sample;
  if (s.max_new_tokens <= 0 || tokenizer_path_.empty() || !fs::exists(tokenizer_path_)) return;
  const std::vector<float> data = global_params();  // collective: every rank takes part
  if (!is_rank0()) return;
  const ParamStore& params = mp_ ? mp_->whole_layout() : model_->params();
  const data::Tokenizer tok = data::Tokenizer::load(tokenizer_path_);
  Arena arena;
  Decoder sampler(config_.model, arena, 1, config_.model.max_seq_len);
  for (int i = 0; i < params.count(); ++i) {  // by name: the layouts may differ by padding
    const ParamInfo& p = params.info(i);
    std::copy(data.data() + p.offset, data.data() + p.offset + p.numel,
              sampler.params().param(sampler.params().index_of(p.name)));
  }
  std::vector<int32_t> prompt = tok.encode(s.prompt);
  if (prompt.empty()) prompt.push_back(tok.eot_id());
  SampleOptions opt;
  opt.max_new_tokens = s.max_new_tokens;
  opt.temperature = s.temperature;
  opt.top_k = s.top_k;
  opt.seed = config_.train.seed;
  const auto out = generate(sampler, prompt, opt);
  const std::string text = tok.decode(out);
  log::info("sample (", s.max_new_tokens, " tokens, temperature ", s.temperature, "):\n", text);
}

}  // namespace strata
