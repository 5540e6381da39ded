// The trainer's checkpoints: which slices this rank saves, the asynchronous save and its
// collective commit, and loading (on any layout, falling back past damaged checkpoints).
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>

#include "comm/process_groups.h"
#include "core/clock.h"
#include "core/log.h"
#include "core/trace.h"
#include "model/decoder.h"
#include "optim/adamw.h"  // learning_rate
#include "optim/loss_scaler.h"
#include "optim/optimizer.h"
#include "parallel/data_parallel.h"
#include "parallel/model_parallel.h"
#include "parallel/pipeline_executor.h"
#include "track/checkpoint_digest.h"
#include "track/console.h"
#include "track/events.h"
#include "track/metrics.h"
#include "train/token_source.h"
#include "train/train_device.h"
#include "train/trainer.h"

namespace strata {

namespace fs = std::filesystem;

namespace {
std::string ckpt_root_of(const RunConfig& c) {
  return (fs::path(c.run.dir) / "ckpt").string();
}
}  // namespace

CheckpointState Trainer::checkpoint_state() const {
  CheckpointState state;
  state.step = step_;
  state.config = config_to_json(config_);
  state.data = train_data_->state();
  // The schedule and every random stream are functions of (config, step): initialisation and
  // sampling draw from counter-based Philox streams keyed by the seed, and training itself
  // draws nothing, so these records are what a resume needs to continue exactly.
  state.extra["scheduler"] = {{"step", step_},
                              {"lr", learning_rate(config_.optim, step_, config_.train.steps)},
                              {"decay", config_.optim.decay}};
  state.extra["rng"] = {
      {"generator", "philox4x32-10"}, {"seed", config_.train.seed}, {"draws_per_step", 0}};
  state.extra["optimizer"] = {{"type", "adamw"}, {"steps_taken", optimizer_steps()}};
  if (scaler_) state.extra["loss_scaler"] = scaler_->state();
  if (!lineage_.is_null()) state.extra["lineage"] = lineage_;  // for the model registry
  return state;
}

// Each element is saved by exactly one rank: the first tp holder of replicated elements, the
// first stage's copy of a tied embedding, dp rank 0 for replicated buffers, and every dp rank
// for its ZeRO shard (f32 master weights under ZeRO-3, Adam moments from ZeRO-1 on).
Trainer::HostState Trainer::host_state(bool download) {
  HostState s;
  const bool sharded = dp_->params_sharded();
  s.np = sharded ? dp_->shard_size() : model_->params().size();
  const bool in_memory = optimizer_->state_in_model_memory();
  s.ns = in_memory ? optimizer_->state_size() : 0;
  s.device_params = sharded ? dp_->shard_params() : model_->params().data();
  s.device_m = optimizer_->first_moment();
  s.device_v = optimizer_->second_moment();
  if (device_->is_host()) {
    s.params = s.device_params;
    s.m = s.device_m;
    s.v = s.device_v;
    return s;
  }
  device_snapshot_.resize(static_cast<size_t>(s.np + 2 * s.ns));
  s.params = device_snapshot_.data();
  if (in_memory) {
    s.m = s.params + s.np;
    s.v = s.m + s.ns;
  }
  if (download) {
    device_->download(s.params, s.device_params, s.np);
    device_->download(s.m, s.device_m, s.ns);
    device_->download(s.v, s.device_v, s.ns);
  }
  return s;
}

void Trainer::upload_state(const HostState& s) {
  if (device_->is_host()) return;
  device_->upload(s.device_params, s.params, s.np);
  if (s.m) device_->upload(s.device_m, s.m, s.ns);
  if (s.v) device_->upload(s.device_v, s.v, s.ns);
}

std::vector<SliceSource> Trainer::checkpoint_sources(bool read_offloaded) {
  const ParamStore& params = model_->params();
  const HostState st = host_state(/*download=*/read_offloaded);  // sizes only: no copies
  const float* m = st.m;
  const float* v = st.v;
  if (!optimizer_->state_in_model_memory()) {
    const size_t n = static_cast<size_t>(optimizer_->state_size());
    if (offload_snapshot_.size() < 3 * n) offload_snapshot_.resize(3 * n);
    if (read_offloaded)
      optimizer_->read_state(offload_snapshot_.data(), offload_snapshot_.data() + n,
                             offload_snapshot_.data() + 2 * n);
    m = offload_snapshot_.data() + n;
    v = offload_snapshot_.data() + 2 * n;
  }
  // One replica saves what is not sharded: data-parallel rank 0, and for the experts the first
  // rank of each expert-data-parallel group (ep rank d's experts are on dp rank d).
  const bool dp_lead = groups_->dp().rank() == 0, edp_lead = groups_->edp().rank() == 0;
  const bool params_sharded = dp_->params_sharded();
  const bool state_sharded = dp_->optimizer_sharded();
  const float* pbase = st.params;
  std::vector<SliceSource> out;
  for (int i = 0; i < params.count(); ++i) {
    const ParamInfo& p = params.info(i);
    if (p.slice.holder_index != 0 || p.slice.stage_copy) continue;
    auto add = [&](const char* kind, const float* base, bool sharded) {
      if (sharded) {
        for (const DataParallel::ShardRun& r : dp_->shard_runs(i))
          out.push_back(SliceSource{block_of(p, kind, r.begin, r.count), base + r.shard_offset});
      } else if (p.slice.expert ? edp_lead : dp_lead) {
        out.push_back(SliceSource{block_of(p, kind, 0, p.numel), base + p.offset});
      }
    };
    add("", pbase, params_sharded);
    add("exp_avg.", m, state_sharded);
    add("exp_avg_sq.", v, state_sharded);
  }
  return out;
}

void Trainer::begin_save() {
  if (pending_save_) poll_checkpoint(true);  // one save in flight at a time
  const TraceSpan span("checkpoint save", "checkpoint");
  const std::string root = ckpt_root_of(config_);
  const CheckpointState state = checkpoint_state();
  // Rank 0 empties the directory every rank writes into before anyone does.
  if (is_rank0()) prepare_checkpoint_dir(root, state.step);
  groups_->world().barrier();
  const std::vector<SliceSource> sources = checkpoint_sources();
  ckpt_result_.reset();
  std::string path = rank_slice_path(checkpoint_tmp_dir(root, state.step), rank_);
  if (config_.fault.fail_save_step == state.step && is_rank0()) {
    log::warn("fault injection: the save of step ", state.step, " fails on rank 0");
    path = (fs::path(path).parent_path() / "missing" / fs::path(path).filename()).string();
  }
  if (!sources.empty())
    ckpt_writer_.start(path, sources, config_.train.async_checkpoint);
  else
    ckpt_result_ = CheckpointWriteResult{};  // nothing of its own to save
  pending_save_ = state;
}

std::string Trainer::poll_checkpoint(bool wait) {
  if (!pending_save_) return "";
  if (!ckpt_result_ && (wait || ckpt_writer_.done())) {
    ckpt_result_ = ckpt_writer_.wait();
    if (!ckpt_result_->ok)
      log::error("checkpoint at step ", pending_save_->step, ": rank ", rank_,
                 " could not write its slices: ", ckpt_result_->error);
  }
  // [still writing, failed, blocked s, write s] maxed over ranks; bytes summed.
  float flags[4] = {ckpt_result_ ? 0.0f : 1.0f, ckpt_result_ && !ckpt_result_->ok ? 1.0f : 0.0f, 0,
                    0};
  if (ckpt_result_) {
    flags[2] = static_cast<float>(ckpt_result_->blocked_s);
    flags[3] = static_cast<float>(ckpt_result_->write_s);
  }
  float mb = ckpt_result_ ? static_cast<float>(ckpt_result_->bytes / 1e6) : 0.0f;
  groups_->world().all_reduce(flags, 4, DType::f32, ReduceOp::max)->wait();
  if (flags[0] == 0) groups_->world().all_reduce(&mb, 1, DType::f32, ReduceOp::sum)->wait();
  if (flags[0] > 0) return "";  // a rank is still writing
  const CheckpointState state = *pending_save_;
  pending_save_.reset();
  ckpt_result_.reset();
  const std::string root = ckpt_root_of(config_);
  std::string dir;
  if (flags[1] > 0) {
    if (is_rank0()) {
      abandon_checkpoint(root, state.step);
      append_event(config_.run.dir, rank_, "checkpoint_failed", state.step);
      log::error("checkpoint at step ", state.step,
                 " failed (see the rank logs); the previous checkpoint is kept");
    }
  } else if (is_rank0()) {
    const TraceSpan span("checkpoint commit", "checkpoint");
    const auto t0 = Clock::now();
    try {
      dir = commit_checkpoint(root, state, tokenizer_path_, config_.train.keep_last);
    } catch (const std::exception& e) {
      // Nothing is renamed before state.json is complete: the previous checkpoint stands.
      abandon_checkpoint(root, state.step);
      log::error("checkpoint at step ", state.step, " could not be committed: ", e.what(),
                 "; the previous checkpoint is kept");
      if (wait) groups_->world().barrier();
      return "";
    }
    const double write_s = std::max(1e-9, static_cast<double>(flags[3]));
    last_checkpoint_ = {{"step", state.step},
                        {"blocked_s", flags[2]},
                        {"write_s", flags[3]},
                        {"commit_s", seconds_since(t0)},
                        {"mb", mb},
                        {"mb_per_s", mb / write_s},
                        {"async", config_.train.async_checkpoint}};
    log::info("checkpoint ", dir, " committed: ", mb, " MB in ", flags[3], " s (", mb / write_s,
              " MB/s); training blocked ", flags[2], " s");
    if (config_.fault.corrupt_step == state.step) corrupt_for_test(dir);
  }
  if (wait) groups_->world().barrier();
  return dir;
}

// fault.corrupt_step: one byte of the newest slice file flipped after the commit, as a disk
// would do it; the next resume must notice.
void Trainer::corrupt_for_test(const std::string& dir) {
  const std::string file = rank_slice_path(dir, 0);
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  const auto size = static_cast<std::streamoff>(fs::file_size(file));
  f.seekg(size - 64);
  char byte = 0;
  f.read(&byte, 1);
  byte = static_cast<char>(byte ^ 0x5a);
  f.seekp(size - 64);
  f.write(&byte, 1);
  log::warn("fault injection: flipped a byte of ", file);
  append_event(config_.run.dir, rank_, "fault", step_, {{"fault", "corrupt"}, {"file", file}});
}

std::string Trainer::save() {
  begin_save();
  return poll_checkpoint(true);
}

void Trainer::load_checkpoint(const std::string& dir) {
  ParamStore& params = model_->params();
  const std::vector<SliceEntry> entries = read_checkpoint_index(dir);
  const bool params_sharded = dp_->params_sharded();
  const bool state_sharded = dp_->optimizer_sharded();
  // On a GPU the slices are read into host copies, then uploaded (elements no slice covers keep
  // their values: the copies start as the device's).
  const HostState st = host_state();
  float* m = st.m;
  float* v = st.v;
  float* master = nullptr;  // the offloaded master weights (state layout)
  const bool offloaded = !optimizer_->state_in_model_memory();
  if (offloaded) {
    const size_t n = static_cast<size_t>(optimizer_->state_size());
    if (offload_snapshot_.size() < 3 * n) offload_snapshot_.resize(3 * n);
    master = offload_snapshot_.data();
    m = master + n;
    v = master + 2 * n;
  }
  // A weights-only checkpoint (strata import) has no Adam moments: they start from zero.
  const bool moments = std::any_of(entries.begin(), entries.end(), [](const SliceEntry& e) {
    return e.tensor.rfind("exp_avg.", 0) == 0;
  });
  if (!moments && m && v) {
    const int64_t n = offloaded ? optimizer_->state_size() : st.ns;
    std::fill(m, m + n, 0.0f);
    std::fill(v, v + n, 0.0f);
  }
  float* pbase = st.params;
  std::vector<SliceTarget> targets;
  for (int i = 0; i < params.count(); ++i) {
    const ParamInfo& p = params.info(i);
    auto add = [&](const char* kind, float* base, bool sharded) {
      if (!sharded) {
        targets.push_back(SliceTarget{block_of(p, kind, 0, p.numel), base + p.offset});
        return;
      }
      for (const DataParallel::ShardRun& r : dp_->shard_runs(i))
        targets.push_back(SliceTarget{block_of(p, kind, r.begin, r.count), base + r.shard_offset});
    };
    add("", pbase, params_sharded);
    if (master) add("", master, state_sharded);
    if (!moments) continue;
    add("exp_avg.", m, state_sharded);
    add("exp_avg_sq.", v, state_sharded);
  }
  load_slices(dir, entries, targets);
  if (offloaded) optimizer_->write_state(master, m, v);
  upload_state(st);
}

void Trainer::resume() {
  if (plan_.resume == ResumeMode::none) return;
  const std::string root = ckpt_root_of(config_);
  std::vector<std::string> candidates;
  if (plan_.resume == ResumeMode::latest) {
    auto latest = latest_checkpoint(root);
    if (!latest) return;
    candidates.push_back(*latest);
  } else {
    candidates.push_back(resolve_checkpoint(plan_.resume_path));
  }
  restore(candidates.front());
}

bool Trainer::rollback() {
  poll_checkpoint(true);  // a save in flight is the newest state to go back to
  const std::vector<std::string> committed = committed_checkpoints(ckpt_root_of(config_));
  if (committed.empty()) return false;
  restore(committed.front());
  return true;
}

void Trainer::restore(const std::string& newest) {
  // Older committed checkpoints are the fallbacks when one turns out to be damaged.
  std::vector<std::string> candidates = {newest};
  const std::string chosen_root = fs::path(newest).parent_path().string();
  for (const std::string& d : committed_checkpoints(chosen_root))
    if (d < newest) candidates.push_back(d);
  for (size_t c = 0; c < candidates.size(); ++c) {
    const std::string& dir = candidates[c];
    // Every rank checks what it reads; all agree before anyone moves on.
    float bad = 0;
    CheckpointState state;
    try {
      state = read_checkpoint_state(dir);
      load_checkpoint(dir);
    } catch (const CheckpointCorrupt& e) {
      log::error("checkpoint ", dir, " is damaged: ", e.file(), ": ", e.what());
      append_event(config_.run.dir, rank_, "checkpoint_damaged", step_,
                   {{"checkpoint", dir}, {"file", e.file()}, {"error", e.what()}});
      bad = static_cast<float>(rank_ + 1);
    }
    groups_->world().all_reduce(&bad, 1, DType::f32, ReduceOp::max)->wait();
    if (bad > 0) {
      const bool last = c + 1 == candidates.size();
      if (is_rank0())
        log::warn("checkpoint ", dir, " cannot be used (rank ", static_cast<int>(bad) - 1,
                  " found a damaged file, named above)",
                  last ? "" : cat("; falling back to ", candidates[c + 1]));
      if (last)
        fail("no usable checkpoint under ", chosen_root,
             ": every one is damaged (see the messages above); remove them or set "
             "run.resume = \"none\" to start over");
      continue;
    }
    ParamStore& params = model_->params();
    params.bump_version();
    step_ = state.step;
    optimizer_->set_steps_taken(state.step);
    if (scaler_ && state.extra.contains("loss_scaler"))
      scaler_->restore(state.extra["loss_scaler"]);
    if (!state.data.is_null() && !state.data.empty()) train_data_->restore(state.data);
    log::info("resumed from ", dir, " at step ", step_, " (data at ", train_data_->position(), ")");
    if (is_rank0()) lineage_ = registry::checkpoint_lineage(dir);
    return;
  }
}

}  // namespace strata
