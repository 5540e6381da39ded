#include "train/trainer.h"

#include <omp.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>

#include "core/log.h"
#include "data/prepare.h"
#include "data/tokenizer.h"
#include "data/unigram.h"
#include "io/atomic_file.h"
#include "kernels/cpu/kernels.h"
#include "model/generate.h"
#include "train/checkpoint.h"

namespace strata {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {
double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::vector<std::string> shards_with_prefix(const std::string& dir, const std::string& prefix) {
  std::vector<std::string> out;
  if (!fs::is_directory(dir)) return out;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string n = e.path().filename().string();
    if (n.rfind(prefix, 0) == 0 && e.path().extension() == ".bin") out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}
}  // namespace

double measure_gemm_flops() {
  const int64_t n = 512;
  std::vector<float> a(n * n, 0.5f), b(n * n, 0.25f), c(n * n);
  kernels::gemm(false, true, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = Clock::now();
    kernels::gemm(false, true, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    best = std::max(best, 2.0 * n * n * n / seconds_since(t0));
  }
  return best;
}

Trainer::Trainer(RunConfig config) : config_(std::move(config)) {
  if (config_.system.threads > 0) omp_set_num_threads(static_cast<int>(config_.system.threads));
  io::make_dirs(config_.run.dir);
  log::open_file((fs::path(config_.run.dir) / "train.log").string());
  if (config_.system.memory_limit_mb > 0) arena_.set_limit(config_.system.memory_limit_mb << 20);
  io::write_file_atomic((fs::path(config_.run.dir) / "config.json").string(),
                        config_to_json(config_).dump(2));

  prepare_data();
  const TrainConfig& t = config_.train;
  model_ = std::make_unique<Decoder>(config_.model, arena_, t.batch_size, t.seq_len);
  model_->init(t.seed);
  optimizer_ = std::make_unique<AdamW>(model_->params(), arena_, config_.optim);
  inputs_ = arena_.alloc<int32_t>(MemCategory::workspace, t.batch_size * t.seq_len, "input batch");
  targets_ = arena_.alloc<int32_t>(MemCategory::workspace, t.batch_size * t.seq_len, "target batch");
  resume();
  peak_flops_ = measure_gemm_flops();
  metrics_ = std::make_unique<JsonlWriter>((fs::path(config_.run.dir) / "metrics.jsonl").string(),
                                           /*append=*/true);
  console_ = std::make_unique<ConsoleProgress>(t.log_every);
  log::info("model: ", family_name(config_.model.family), " ", config_.model.n_layer, " layers, d_model ",
            config_.model.d_model, ", ", model_->params().size(), " parameters; ",
            omp_get_max_threads(), " threads; GEMM ", kernels::gemm_backend(), " at ",
            static_cast<int64_t>(peak_flops_ / 1e9), " GFLOP/s");
}

Trainer::~Trainer() { log::close_file(); }

void Trainer::prepare_data() {
  const DataConfig& d = config_.data;
  const TrainConfig& t = config_.train;
  TokenSourceOptions opt;
  opt.batch = t.batch_size;
  opt.seq_len = t.seq_len;
  opt.vocab_size = config_.model.vocab_size;
  opt.seed = t.seed;
  if (d.source == "synthetic") {
    train_data_ = make_synthetic_source(opt);
    TokenSourceOptions val = opt;
    val.seed = t.seed ^ 0x5eedull;  // distinct tokens for "validation"
    val_data_ = make_synthetic_source(val);
    return;
  }
  data_dir_ = d.dir;
  tokenizer_path_ = (fs::path(d.dir) / "tokenizer.json").string();
  if (d.source == "text" && shards_with_prefix(d.dir, "train_").empty()) {
    log::info("preparing data: training a ", config_.model.vocab_size, "-token BPE tokenizer on ",
              d.text.size(), " file(s) into ", d.dir);
    const data::PrepareReport report =
        data::prepare_text(d.text, d.dir, config_.model.vocab_size, d.val_fraction, t.seed,
                           d.document_separator, d.filters);
    log::info(report.summary());
  }
  const auto train_shards = shards_with_prefix(d.dir, "train_");
  const auto val_shards = shards_with_prefix(d.dir, "val_");
  STRATA_CHECK(!train_shards.empty(), "data.dir '", d.dir, "' has no train_*.bin shards; run `strata "
               "prepare` first, or set data.source = \"text\" with data.text = [files]");
  if (fs::exists(tokenizer_path_)) {
    const data::Tokenizer tok = data::Tokenizer::load(tokenizer_path_);
    STRATA_CHECK(tok.vocab_size() <= config_.model.vocab_size, "the tokenizer in '", tokenizer_path_,
                 "' has ", tok.vocab_size(), " tokens but model.vocab_size is ",
                 config_.model.vocab_size, "; set model.vocab_size >= ", tok.vocab_size(),
                 " or prepare the data again with this vocabulary size");
  }
  train_data_ = make_shard_source(train_shards, opt, /*shuffle=*/true);
  if (!val_shards.empty()) {
    val_data_ = make_shard_source(val_shards, opt, /*shuffle=*/false);
    unigram_baseline_ = data::unigram_baseline(train_shards, val_shards, config_.model.vocab_size);
    log::info("validation: unigram baseline ", unigram_baseline_, " nats/token (a model that "
              "learned only token frequencies)");
  }
}

void Trainer::resume() {
  const std::string& mode = config_.run.resume;
  if (mode == "none") return;
  std::string dir;
  if (mode == "auto") {
    auto latest = latest_checkpoint((fs::path(config_.run.dir) / "ckpt").string());
    if (!latest) return;
    dir = *latest;
  } else {
    dir = resolve_checkpoint(mode);
  }
  const CheckpointState state = read_checkpoint_state(dir);
  load_checkpoint_tensors(dir, model_->params(), optimizer_->first_moment(),
                          optimizer_->second_moment());
  step_ = state.step;
  optimizer_->set_steps_taken(state.step);
  if (!state.data.is_null() && !state.data.empty()) train_data_->restore(state.data);
  log::info("resumed from ", dir, " at step ", step_, " (data at ", train_data_->position(), ")");
}

StepResult Trainer::train_step() {
  const TrainConfig& t = config_.train;
  const auto t0 = Clock::now();
  ParamStore& params = model_->params();
  params.zero_grads();
  const float grad_scale = 1.0f / static_cast<float>(t.batch_size * t.seq_len * t.grad_accum);
  double loss = 0;
  for (int64_t micro = 0; micro < t.grad_accum; ++micro) {
    train_data_->next(inputs_, targets_);
    loss += model_->forward_backward(inputs_, targets_, grad_scale);
  }
  loss /= static_cast<double>(t.grad_accum);
  StepResult r;
  r.grad_norm = global_grad_norm(params);
  r.lr = learning_rate(config_.optim, step_, t.steps);
  if (std::isfinite(r.grad_norm) && std::isfinite(loss)) {
    optimizer_->step(static_cast<float>(r.lr), clip_coefficient(r.grad_norm, config_.optim.grad_clip));
  } else {
    log::warn("step ", step_ + 1, ": non-finite loss or gradient norm (loss ", loss, ", norm ",
              r.grad_norm, ") at data position ", train_data_->position(), "; update skipped");
  }
  ++step_;
  r.step = step_;
  r.loss = loss;
  r.seconds = seconds_since(t0);
  return r;
}

double Trainer::evaluate() {
  if (!val_data_) return std::numeric_limits<double>::quiet_NaN();
  const TrainConfig& t = config_.train;
  val_data_->rewind();
  double total = 0;
  for (int64_t i = 0; i < t.eval_batches; ++i) {
    val_data_->next(inputs_, targets_);
    total += model_->forward(inputs_, targets_, t.batch_size, t.seq_len);
  }
  return total / static_cast<double>(std::max<int64_t>(1, t.eval_batches));
}

std::string Trainer::save() {
  CheckpointState state;
  state.step = step_;
  state.config = config_to_json(config_);
  state.data = train_data_->state();
  const auto t0 = Clock::now();
  const std::string dir =
      save_checkpoint((fs::path(config_.run.dir) / "ckpt").string(), model_->params(),
                      optimizer_->first_moment(), optimizer_->second_moment(), state,
                      tokenizer_path_, config_.train.keep_last);
  log::info("saved checkpoint ", dir, " in ", seconds_since(t0), " s");
  return dir;
}

void Trainer::write_metrics(const StepResult& r, double tokens_per_s, double mfu, double val_loss) {
  nlohmann::json j;
  j["step"] = r.step;
  j["loss"] = r.loss;
  j["lr"] = r.lr;
  j["grad_norm"] = r.grad_norm;
  j["tokens_per_s"] = tokens_per_s;
  j["mfu"] = mfu;
  j["step_ms"] = 1e3 * r.seconds;
  nlohmann::json mem;
  const MemStats stats = arena_.stats();
  for (int c = 0; c < kNumMemCategories; ++c)
    mem[std::string(mem_category_name(static_cast<MemCategory>(c)))] = stats.current[c];
  mem["total"] = stats.total_current;
  j["mem"] = mem;
  if (!std::isnan(val_loss)) j["val_loss"] = val_loss;
  metrics_->write(j);
}

double Trainer::run() {
  const TrainConfig& t = config_.train;
  const double tokens_per_step = static_cast<double>(t.batch_size * t.seq_len * t.grad_accum);
  const double flops_per_token = model_->train_flops_per_token();
  double smoothed = 0;
  double val_loss = std::numeric_limits<double>::quiet_NaN();
  const int64_t first = step_;
  if (first >= t.steps) log::info("nothing to train: already at step ", first, " of ", t.steps);
  while (step_ < t.steps) {
    const StepResult r = train_step();
    if (r.step == first + 1) arena_.freeze();  // from here on the loop must not allocate
    smoothed = smoothed == 0 ? r.seconds : 0.9 * smoothed + 0.1 * r.seconds;
    const double tps = tokens_per_step / r.seconds;
    const double mfu = tps * flops_per_token / peak_flops_;
    double v = std::numeric_limits<double>::quiet_NaN();
    if ((t.eval_every > 0 && r.step % t.eval_every == 0) || r.step == t.steps) {
      v = evaluate();
      val_loss = v;
      if (!std::isnan(v))
        console_->message(cat("step ", r.step, ": val_loss ", v,
                              unigram_baseline_ > 0 ? cat(" (unigram baseline ", unigram_baseline_, ")") : ""));
    }
    write_metrics(r, tps, mfu, v);
    console_->update({r.step, t.steps, r.loss, r.lr, r.grad_norm, tokens_per_step / smoothed, mfu,
                      smoothed});
    if ((t.checkpoint_every > 0 && r.step % t.checkpoint_every == 0) || r.step == t.steps) {
      console_->finish();
      save();
    }
  }
  console_->finish();
  if (arena_.allocations_after_freeze() > 0)
    log::warn(arena_.allocations_after_freeze(), " arena allocations happened inside the step loop");
  log::info("training done: ", step_, " steps", std::isnan(val_loss) ? "" : cat(", val_loss ", val_loss));
  sample_at_end();
  return val_loss;
}

void Trainer::sample_at_end() {
  const SampleConfig& s = config_.sample;
  if (s.max_new_tokens <= 0 || tokenizer_path_.empty() || !fs::exists(tokenizer_path_)) return;
  const data::Tokenizer tok = data::Tokenizer::load(tokenizer_path_);
  Arena arena;
  Decoder sampler(config_.model, arena, 1, config_.model.max_seq_len);
  std::copy(model_->params().data(), model_->params().data() + model_->params().size(),
            sampler.params().data());
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
