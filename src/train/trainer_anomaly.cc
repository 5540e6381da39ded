// The trainer's fault injection ([fault]) and detectors ([anomaly]): non-finite steps, loss
// spikes, stragglers and diverging replicas, each logged, counted in the metrics and appended to
// RUN_DIR/events.jsonl for `strata diagnose`.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <map>
#include <set>
#include <thread>

#include "comm/link_probe.h"
#include "comm/process_groups.h"
#include "core/clock.h"
#include "core/log.h"
#include "io/checksum.h"
#include "launch/heartbeat.h"
#include "model/decoder.h"
#include "optim/loss_scaler.h"
#include "optim/optimizer.h"
#include "parallel/data_parallel.h"
#include "parallel/model_parallel.h"
#include "parallel/pipeline_executor.h"
#include "track/console.h"
#include "track/events.h"
#include "track/metrics.h"
#include "train/token_source.h"
#include "train/train_device.h"
#include "train/trainer.h"

namespace strata {

namespace {
// Splits a 64-bit checksum into four 16-bit pieces, each exact in a float (for an f32 gather).
void split16(uint64_t h, float* out) {
  for (int i = 0; i < 4; ++i) out[i] = static_cast<float>((h >> (16 * i)) & 0xffff);
}
uint64_t join16(const float* in) {
  uint64_t h = 0;
  for (int i = 0; i < 4; ++i) h |= static_cast<uint64_t>(in[i]) << (16 * i);
  return h;
}
// Every rank of a group timed out (their heartbeats say "comm timeout: OPERATION"). In the same
// operation at the same step, each one waits for data the others have sent: on several hosts,
// the network between them (a link down or dropping packets). In different operations, either
// their collectives were issued in different orders (a mismatched schedule) or, on several
// hosts, a network fault stalled them at different points (a rank waits inside its host on a
// peer that waits across the link), which their heartbeats cannot tell apart.
std::string network_or_schedule(
    const std::vector<std::pair<int, std::optional<launch::Heartbeat>>>& stuck,
    const std::string& mine) {
  std::map<std::string, std::vector<int>> by_host;
  std::set<std::pair<int64_t, std::string>> where;
  for (const auto& [r, hb] : stuck) {
    by_host[hb->host].push_back(r);
    where.emplace(hb->step, hb->phase);
  }
  std::string hosts;
  for (const auto& [host, rs] : by_host)
    hosts += cat(hosts.empty() ? "" : "; ", host, ": ", nlohmann::json(rs).dump());
  const std::string network =
      cat("the network between their hosts (", hosts,
          "): a link down or dropping packets (ip -s link, ethtool, the switch port)");
  if (where.size() == 1)
    return cat(
        "every rank of the group timed out in the same operation at the same step, so the "
        "data between them is not arriving: suspect ",
        by_host.size() > 1 ? network : std::string("the transport between them"));
  std::string phases;
  for (const auto& [step, phase] : where)
    phases +=
        cat(phases.empty() ? "" : "; ", "step ", step, " ", phase.substr(phase.find(':') + 2));
  const std::string stuck_in =
      cat("every rank of the group is stuck, not all in the same "
          "operation (",
          phases, "; this rank: ", mine.substr(mine.find(':') + 2), "): ");
  if (by_host.size() > 1)
    return cat(stuck_in, "suspect ", network,
               ", which stalls ranks at different points; else a mismatched schedule (ranks "
               "issuing their collectives in different orders)");
  return cat(stuck_in,
             "a mismatched schedule (ranks issuing their collectives in different orders), or a "
             "stall in another group they wait on");
}

}  // namespace

void Trainer::event(const std::string& kind, nlohmann::json details) {
  append_event(config_.run.dir, rank_, kind, step_ + 1, std::move(details));
}

void Trainer::install_timeout_hint() {
  set_timeout_hint([this](const std::vector<int>& ranks, const std::string& operation) {
    const std::string& dir = config_.run.dir;
    const std::string kPhase = "comm timeout";
    const std::string mine = cat(kPhase, ": ", operation);
    launch::write_heartbeat(dir, rank_, step_ + 1, mine);
    // The other ranks of the group time out in the same operation within moments of this one;
    // a rank that has not after a grace never reached it.
    std::vector<std::pair<int, std::optional<launch::Heartbeat>>> silent, stuck;
    for (int waited_ms = 0; waited_ms <= 2000; waited_ms += 100) {
      silent.clear();
      stuck.clear();
      for (int r : ranks) {
        std::optional<launch::Heartbeat> hb = launch::read_heartbeat(dir, r);
        const bool timed_out = hb && hb->phase.rfind(kPhase, 0) == 0;
        (timed_out ? stuck : silent).emplace_back(r, hb);
      }
      if (silent.empty()) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (silent.empty()) return network_or_schedule(stuck, mine);
    std::string text;
    for (const auto& [r, hb] : silent) {
      text += cat(text.empty() ? "" : "; ", "world rank ", r, " never reached it (the silent rank",
                  hb ? cat(": its last heartbeat says step ", hb->step, ", phase ", hb->phase)
                     : std::string(": no heartbeat"),
                  ")");
    }
    return text;
  });
}

void Trainer::inject_start_faults() {
  const FaultConfig& f = config_.fault;
  const int64_t step = step_ + 1;
  const bool this_attempt = f.attempt == 0 || f.attempt == launch_attempt_;
  if (f.crash_rank == rank_ && f.crash_step == step && this_attempt) {
    log::error("fault injection: rank ", rank_, " kills itself (SIGKILL) at the start of step ",
               step);
    event("fault", {{"fault", "crash"}});
    std::fflush(nullptr);
    std::raise(SIGKILL);
  }
  if (f.hang_rank == rank_ && f.hang_step == step && this_attempt) {
    log::error("fault injection: rank ", rank_, " hangs at the start of step ", step);
    event("fault", {{"fault", "hang"}});
    std::fflush(nullptr);
    for (;;) pause();
  }
}

void Trainer::inject_slowness() {
  const FaultConfig& f = config_.fault;
  if (f.slow_rank == rank_ && f.slow_ms > 0)
    std::this_thread::sleep_for(std::chrono::milliseconds(f.slow_ms));
}

void Trainer::inject_gradient_faults() {
  const FaultConfig& f = config_.fault;
  const int64_t step = step_ + 1;
  if (f.nan_step <= 0 || f.nan_rank != rank_ || step < f.nan_step ||
      step >= f.nan_step + std::max<int64_t>(1, f.nan_steps))
    return;
  // The first element of parameter 0's gradient this rank holds (none: a ZeRO-2/3 shard without
  // it).
  const std::vector<GradSpan> spans = dp_->grad_spans(0);
  if (spans.empty() || spans.front().count == 0) return;
  float* g = spans.front().grad;
  log::warn("fault injection: rank ", rank_, " writes NaN into a gradient at step ", step);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  device_->upload(g, &nan, 1);
}

bool Trainer::accept_update(double loss, double grad_norm, StepResult& r) {
  const AnomalyConfig& a = config_.anomaly;
  const int64_t step = step_ + 1;
  const bool finite = std::isfinite(grad_norm) && std::isfinite(loss);
  if (!finite) {
    if (scaler_) return false;  // an fp16 overflow: the loss scaler's business
    ++nonfinite_run_;
    r.nonfinite = true;
    const std::string where = train_data_->position();
    log::warn("step ", step, ": non-finite loss or gradient norm (loss ", loss, ", norm ",
              grad_norm, ") at data position ", where, "; update skipped (", nonfinite_run_,
              " in a row, the run stops at ", a.max_nonfinite, ")");
    if (is_rank0())
      event("nonfinite", {{"loss", loss},
                          {"grad_norm", grad_norm},
                          {"data_position", where},
                          {"in_a_row", nonfinite_run_}});
    if (nonfinite_run_ >= a.max_nonfinite) {
      if (is_rank0()) event("nonfinite_abort", {{"data_position", where}});
      fail("stopping: ", nonfinite_run_, " consecutive steps (", step - nonfinite_run_ + 1, " to ",
           step, ") had a non-finite loss or gradient norm; the data position is ", where,
           ". Lower optim.lr or raise optim.warmup_steps, check the data there, and resume from "
           "the last checkpoint (anomaly.max_nonfinite sets the limit)");
    }
    return false;
  }
  nonfinite_run_ = 0;
  const bool spike = spikes_->is_spike(loss);
  r.loss_zscore = spikes_->last_zscore();
  if (!spike) return true;
  r.loss_spike = true;
  const bool skip = a.spike_action != SpikeAction::log;
  if (a.spike_action == SpikeAction::rollback) {
    rollback_requested_ = true;  // done once the step is over (train_step)
    skip_batch_at_.push_back(step);
  }
  const std::string where = train_data_->position();
  log::warn("step ", step, ": loss spike ", loss, " (z-score ", r.loss_zscore, " over the last ",
            a.spike_window, " steps, mean ", spikes_->mean(), ") at data position ", where,
            a.spike_action == SpikeAction::rollback ? "; rolling back to the last checkpoint"
            : skip                                  ? "; update skipped"
                                                    : "");
  if (is_rank0())
    event("loss_spike", {{"loss", loss},
                         {"zscore", r.loss_zscore},
                         {"mean", spikes_->mean()},
                         {"data_position", where},
                         {"action", enum_name(a.spike_action)}});
  return !skip;
}

void Trainer::check_links(StepResult& r, bool slowdown) {
  const AnomalyConfig& a = config_.anomaly;
  const bool periodic = a.link_probe_every > 0 && r.step % a.link_probe_every == 0;
  if (a.link_probe_kib <= 0 || !(slowdown || periodic)) return;
  Comm& world = groups_->world();
  const Clock::time_point start = Clock::now();
  const std::vector<float> row = probe_links(world, a.link_probe_kib * 1024);
  std::vector<float> matrix(static_cast<size_t>(world_) * static_cast<size_t>(world_));
  world.all_gather(row.data(), matrix.data(), world_, DType::f32)->wait();
  const std::vector<float> scores = link_scores(matrix, world_);
  r.slow_links = slow_link_ranks(scores, a.straggler_factor);
  // Host names (64 bytes each, sent as 16 i32): the warning names hosts, which is what an
  // operator replaces.
  char host[64] = {};
  ::gethostname(host, sizeof host - 1);
  std::vector<char> hosts(64 * static_cast<size_t>(world_));
  world.all_gather(host, hosts.data(), 16, DType::i32)->wait();
  if (!is_rank0()) return;
  const double took = seconds_since(start);
  const double median = lower_median(scores);
  if (r.slow_links.empty()) {
    log::info("step ", r.step, ": link probe (",
              slowdown ? "the communication wait jumped" : "periodic",
              "): no slow link; exchanges of ", a.link_probe_kib, " KiB took a median of ", median,
              " s (probe ", took, " s)");
    return;
  }
  std::vector<std::string> names;
  std::vector<double> secs, compute;
  for (int s : r.slow_links) {
    const std::string name(hosts.data() + 64 * static_cast<size_t>(s));
    if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
    secs.push_back(scores[static_cast<size_t>(s)]);
    compute.push_back(step_times_[2 * static_cast<size_t>(s)]);
  }
  std::vector<float> all_compute;
  for (int i = 0; i < world_; ++i) all_compute.push_back(step_times_[2 * static_cast<size_t>(i)]);
  const double median_compute = lower_median(all_compute);
  log::warn("step ", r.step, ": slow link: rank(s) ", nlohmann::json(r.slow_links).dump(),
            " on host(s) ", nlohmann::json(names).dump(), " took ", nlohmann::json(secs).dump(),
            " s to exchange ", a.link_probe_kib, " KiB with their peers against a median of ",
            median, " s, while they computed for ", nlohmann::json(compute).dump(),
            " s against a median of ", median_compute, " s: the network, not compute");
  append_event(config_.run.dir, rank_, "slow_link", r.step,
               {{"ranks", r.slow_links},
                {"hosts", names},
                {"seconds", secs},
                {"median_s", median},
                {"kib", a.link_probe_kib},
                {"compute_s", compute},
                {"median_compute_s", median_compute},
                {"trigger", slowdown ? "slowdown" : "periodic"},
                {"wait_median_s", comm_slowdown_ ? comm_slowdown_->median() : 0.0}});
}

void Trainer::after_step_checks(StepResult& r) {
  const AnomalyConfig& a = config_.anomaly;
  const FaultConfig& f = config_.fault;
  if (world_ > 1 && a.straggler_factor > 0) {
    // Compute (with loading) and waiting, per rank: a slow rank stretches its own compute, a
    // slow link everyone's waits.
    const float mine[2] = {static_cast<float>(r.compute_s + r.data_s),
                           static_cast<float>(r.comm_exposed_s + r.tp_comm_s + r.ep_comm_s +
                                              r.cp_comm_s + r.bubble_s + r.optimizer_s)};
    step_times_.resize(2 * static_cast<size_t>(world_));
    groups_->world().all_gather(mine, step_times_.data(), 2, DType::f32)->wait();
    std::vector<float> compute(static_cast<size_t>(world_));
    float wait_max = 0;
    for (int i = 0; i < world_; ++i) {
      compute[static_cast<size_t>(i)] = step_times_[2 * static_cast<size_t>(i)];
      wait_max = std::max(wait_max, step_times_[2 * static_cast<size_t>(i) + 1]);
    }
    r.stragglers = stragglers(compute, a.straggler_factor);
    if (!r.stragglers.empty() && is_rank0()) {
      const double median = lower_median(compute);
      std::vector<double> secs;
      for (int s : r.stragglers) secs.push_back(compute[static_cast<size_t>(s)]);
      log::warn("step ", r.step, ": straggler rank(s) ", nlohmann::json(r.stragglers).dump(),
                " computed for ", nlohmann::json(secs).dump(), " s against a median of ", median,
                " s");
      append_event(config_.run.dir, rank_, "straggler", r.step,
                   {{"ranks", r.stragglers}, {"seconds", secs}, {"median_s", median}});
    }
    if (!comm_slowdown_)
      comm_slowdown_ = std::make_unique<CommSlowdownDetector>(a.straggler_factor, 20);
    check_links(r, comm_slowdown_->is_slowdown(wait_max));
  }
  // A collapsed router, from this rank's tokens (each rank routes its own share of the batch).
  for (const RouterCollapseDetector::Collapse& c :
       router_collapse_->check(r.moe_tokens_per_expert)) {
    r.router_collapsed.push_back(c.layer);
    if (!is_rank0()) continue;
    log::warn("step ", r.step, ": the router of layer ", c.layer, " sent ", 100.0 * c.fraction,
              "% of the tokens to expert ", c.expert, " for ", a.router_collapse_steps,
              " steps in a row (a collapsed router)");
    append_event(config_.run.dir, rank_, "router_collapse", r.step,
                 {{"layer", c.layer},
                  {"expert", c.expert},
                  {"fraction", c.fraction},
                  {"steps", a.router_collapse_steps}});
  }
  if (f.diverge_rank == rank_ && f.diverge_step == r.step && model_->params().data()) {
    log::warn("fault injection: rank ", rank_, " perturbs a parameter after step ", r.step);
    float first = 0;
    device_->download(&first, model_->params().data(), 1);
    first += 1e-3f;
    device_->upload(model_->params().data(), &first, 1);
    model_->params().bump_version();
  }
  // Replicas: the dp group, or with expert parallelism the expert-data-parallel group (ep ranks
  // hold different experts).
  Comm& replicas = groups_->layout().ep > 1 ? groups_->edp() : groups_->dp();
  const bool replicated = !dp_->params_sharded() && replicas.size() > 1;
  if (a.replica_check_every > 0 && r.step % a.replica_check_every == 0 && replicated) {
    const ParamStore& params = model_->params();
    io::Xxh3Hash h;  // compared between the ranks of this job only: the faster hash
    h.update(device_->host_view(params.data(), params.size(), device_snapshot_),
             static_cast<size_t>(params.size()) * sizeof(float));
    Comm& dp = replicas;
    float mine[5];
    split16(h.finish(), mine);
    mine[4] = static_cast<float>(rank_);
    std::vector<float> all(static_cast<size_t>(5 * dp.size()));
    dp.all_gather(mine, all.data(), 5, DType::f32)->wait();
    std::vector<uint64_t> hashes;
    for (int i = 0; i < dp.size(); ++i) hashes.push_back(join16(all.data() + 5 * i));
    for (int i : outliers(hashes)) r.diverged.push_back(static_cast<int>(all[5 * i + 4]));
    if (!r.diverged.empty() && dp.rank() == 0) {
      log::error("step ", r.step, ": data-parallel replicas disagree: world rank(s) ",
                 nlohmann::json(r.diverged).dump(),
                 " hold different parameters from the others (checksums compared every ",
                 a.replica_check_every, " steps)");
      append_event(config_.run.dir, rank_, "replica_divergence", r.step,
                   {{"ranks", r.diverged}, {"dp_size", dp.size()}});
    }
  }
}

}  // namespace strata
