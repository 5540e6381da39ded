#include "plan/layout_search.h"

#include <algorithm>
#include <limits>

#include "core/clock.h"
#include "core/error.h"
#include "model/shard.h"
#include "parallel/pipeline_schedule.h"
#include "run/run_plan.h"

namespace strata {

namespace {

std::vector<int64_t> powers_of_two_up_to(int64_t limit) {
  std::vector<int64_t> out;
  for (int64_t v = 1; v <= limit; v *= 2) out.push_back(v);
  return out;
}

// Whether the engine can split the model this way (model/shard.cc's and the schedule's rules,
// checked without exceptions: the search builds thousands of candidates).
bool splits(const ModelConfig& m, int64_t tp, int64_t pp, int64_t vpp, bool sp, int64_t rows) {
  const int64_t kv = m.kv_heads();
  if (m.n_head % tp != 0 || (kv % tp != 0 && tp % kv != 0)) return false;
  if (m.d_ff % tp != 0 || m.vocab_size % tp != 0) return false;
  if (sp && rows % tp != 0) return false;
  return pp * vpp <= m.n_layer;
}

// Expert-parallel sizes for dp data-parallel ranks: the divisors of dp that divide the experts
// (comm/layout.h: ep is carved out of dp); 1 for a dense model.
std::vector<int64_t> expert_parallel_sizes(const ModelConfig& m, int64_t dp) {
  std::vector<int64_t> out = {1};
  if (!m.moe.enabled()) return out;
  for (int64_t ep = 2; ep <= dp; ++ep)
    if (dp % ep == 0 && m.moe.experts % ep == 0) out.push_back(ep);
  return out;
}

// Context-parallel sizes for dp data-parallel ranks (comm/layout.h: cp is carved out of dp like
// ep, keeping dp / cp data replicas): powers of two dividing dp whose 2 cp chunks divide the
// sequence, with flash attention (config_validate.cc: the naive kernel holds the whole T x T
// scores); Ulysses also splits each tp rank's query and kv heads over cp. A rank keeps at least
// kMinContextRows rows of a sequence: a ring step's attention grows as t^2 and its block as t, so
// below some t the block is no longer hidden (t >= 4 nkv / nh x attention rate / link bandwidth:
// about 1.2K rows for Llama 3's GQA on H100 NVLink, 5K without GQA, 10K over 400 Gb/s), and the
// search stays as quick as without cp for the usual 2K-token configs (the micro-batches per
// replica grow with cp, each count a pipeline schedule to simulate).
constexpr int64_t kMinContextRows = 2048;

std::vector<int64_t> context_parallel_sizes(const RunConfig& c, int64_t tp, int64_t dp) {
  std::vector<int64_t> out = {1};
  const ModelConfig& m = c.model;
  if (!m.flash_attention()) return out;
  for (int64_t cp = 2; cp <= dp && c.train.seq_len / cp >= kMinContextRows; cp *= 2) {
    if (dp % cp != 0 || c.train.seq_len % (2 * cp) != 0) continue;
    if (c.parallel.cp_impl == CpImpl::ulysses &&
        (m.n_head % (tp * cp) != 0 || m.kv_heads() % (tp * cp) != 0))
      continue;
    out.push_back(cp);
  }
  return out;
}

bool better(const PlannedLayout& a, const PlannedLayout& b) {
  if (a.step.tokens_per_s != b.step.tokens_per_s) return a.step.tokens_per_s > b.step.tokens_per_s;
  return a.memory.total < b.memory.total;
}

}  // namespace

std::string PlannedLayout::describe() const {
  const ParallelConfig& p = config.parallel;
  const int64_t dp = data_parallel_size(p, world);
  std::string s = cat("tp ", p.tp, " pp ", p.pp, " dp ", dp);
  if (p.ep > 1) s += cat(" ep ", p.ep);
  if (p.cp > 1) s += cat(" cp ", p.cp, p.cp_impl == CpImpl::ulysses ? " ulysses" : "");
  if (p.vpp > 1) s += cat(" vpp ", p.vpp);
  if (p.sp) s += " sp";
  s += cat(" zero ", p.zero, ", micro-batch ", config.train.batch_size, " x ",
           micro_batches_per_step(config), ", recompute ", config.train.recompute);
  if (config.optim.offload != OptimizerOffload::none) s += cat(", offload ", config.optim.offload);
  return s;
}

int64_t config_global_batch(const RunConfig& c, int64_t world) {
  // The cp ranks of a context-parallel group read the same sequences: dp / cp data replicas.
  const int64_t replicas =
      data_parallel_size(c.parallel, world) / std::max<int64_t>(1, c.parallel.cp);
  return c.train.batch_size * micro_batches_per_step(c) * replicas;
}

int64_t rank_capacity(const RunConfig& config, const ClusterProfile* cluster) {
  if (config.system.memory_limit_mb > 0) return config.system.memory_limit_mb << 20;
  if (cluster != nullptr && cluster->device.memory_bytes > 0) return cluster->device.memory_bytes;
  return std::numeric_limits<int64_t>::max();
}

MemoryModelOptions memory_options(const ClusterProfile* cluster) {
  MemoryModelOptions o;
  if (cluster != nullptr) o.device = cluster->device.kind;
  return o;
}

PlannedLayout evaluate_layout(const RunConfig& config, int64_t world, const ClusterProfile* cluster,
                              int64_t capacity) {
  PlannedLayout l;
  l.config = config;
  l.world = world;
  l.memory = estimate_memory(config, world, memory_options(cluster));
  if (cluster != nullptr) l.step = estimate_step(config, world, *cluster);
  l.capacity = capacity > 0 ? capacity : rank_capacity(config, cluster);
  return l;
}

SearchResult search_layouts(const RunConfig& base, const ClusterProfile& cluster,
                            const SearchOptions& options) {
  const Clock::time_point start = Clock::now();
  STRATA_CHECK(options.gpus >= 1, "strata plan: --gpus must be at least 1, got ", options.gpus);
  const int64_t gpus = options.gpus;
  SearchResult result;
  result.global_batch =
      options.global_batch > 0 ? options.global_batch : config_global_batch(base, gpus);
  const int64_t capacity = options.capacity > 0 ? options.capacity : rank_capacity(base, &cluster);
  const ModelConfig& m = base.model;
  const int64_t seq = base.train.seq_len;
  // Tensor parallelism stays inside a node (its collectives run every layer).
  const int64_t max_tp = std::max<int64_t>(1, std::min(cluster.gpus_per_node, m.n_head));
  // Selective recomputation drops only the T x T probabilities, which flash attention never keeps.
  std::vector<Recompute> recompute_modes = {Recompute::none, Recompute::full};
  if (!m.flash_attention())
    recompute_modes.insert(recompute_modes.begin() + 1, Recompute::selective);

  MemoryModelOptions quiet = memory_options(&cluster);
  quiet.explain = false;  // the arithmetic is written again for the layouts kept
  std::vector<PlannedLayout> fitting, closest;
  // Memory first; a candidate that fits gets a step time. Only the best `top` are kept (and, while
  // nothing fits, the smallest footprints for the report).
  auto consider = [&](RunConfig c) {
    ++result.enumerated;
    PlannedLayout l;
    l.world = gpus;
    l.capacity = capacity;
    l.memory = estimate_memory(c, gpus, quiet);
    if (l.memory.total > capacity) {
      if (fitting.empty()) {
        l.config = std::move(c);
        closest.push_back(std::move(l));
        if (closest.size() > 4 * static_cast<size_t>(options.top)) {
          std::sort(closest.begin(), closest.end(),
                    [](const auto& x, const auto& y) { return x.memory.total < y.memory.total; });
          closest.resize(options.top);
        }
      }
      return;
    }
    l.step = estimate_step(c, gpus, cluster, /*explain=*/false);
    l.config = std::move(c);
    ++result.fitting;
    fitting.push_back(std::move(l));
    if (fitting.size() > 4 * static_cast<size_t>(options.top)) {
      std::sort(fitting.begin(), fitting.end(), better);
      fitting.resize(options.top);
    }
  };
  for (int64_t tp : powers_of_two_up_to(max_tp)) {
    for (int64_t pp = 1; pp <= std::min(m.n_layer, gpus / tp); ++pp) {
      if (gpus % (tp * pp) != 0) continue;
      ParallelConfig candidate;
      candidate.tp = tp;
      candidate.pp = pp;
      const int64_t dp = data_parallel_size(candidate, gpus);
      // Context parallelism trades data replicas for shorter local sequences: the global batch
      // is kept, so each replica's share grows by cp.
      for (const int64_t cp : context_parallel_sizes(base, tp, dp)) {
        const int64_t replicas = dp / cp;
        if (result.global_batch % replicas != 0) continue;
        const int64_t per_replica = result.global_batch / replicas;  // sequences per pipeline
        const int64_t rows = seq / cp;                               // per sequence on a rank
        for (int64_t vpp : powers_of_two_up_to(pp > 1 ? m.n_layer / pp : 1)) {
          for (int sp = 0; sp <= (tp > 1 ? 1 : 0); ++sp) {
            // cp > 1 with micro-batches of mb sequences holds the rows of mb / 2 sequences at
            // cp / 2, with the same micro-batches in flight and less communication: only whole
            // single sequences are split.
            for (int64_t mb : powers_of_two_up_to(cp > 1 ? 1 : per_replica)) {
              if (per_replica % mb != 0) continue;
              const int64_t micro = per_replica / mb;
              if (pp > 1 && micro < pp) continue;        // a pipeline needs a micro-batch per stage
              if (vpp > 1 && micro % pp != 0) continue;  // interleaved runs groups of pp
              if (!splits(m, tp, pp, vpp, sp != 0, mb * rows)) continue;
              for (int64_t zero = 0; zero <= (pp > 1 ? 1 : 3); ++zero) {
                if (dp == 1 && zero > 0) continue;  // nothing to shard over
                for (const int64_t ep : expert_parallel_sizes(m, dp)) {
                  for (const Recompute recompute : recompute_modes) {
                    RunConfig c = base;
                    ParallelConfig& p = c.parallel;
                    p.tp = tp;
                    p.pp = pp;
                    p.dp = dp;
                    p.ep = ep;
                    p.cp = cp;
                    p.vpp = vpp;
                    p.sp = sp != 0;
                    p.zero = zero;
                    p.schedule = vpp > 1 ? ScheduleKind::interleaved : ScheduleKind::one_f_one_b;
                    p.micro_batches = 0;
                    p.stage_layers.clear();
                    c.train.batch_size = mb;
                    c.train.grad_accum = micro;
                    c.train.recompute = recompute;
                    c.train.recompute_layers = 0;
                    consider(std::move(c));
                  }
                }
              }
            }
          }
        }
      }
    }
  }
  std::sort(fitting.begin(), fitting.end(), better);
  if (fitting.size() > static_cast<size_t>(options.top)) fitting.resize(options.top);
  for (PlannedLayout& l : fitting) {
    l.memory = estimate_memory(l.config, gpus, memory_options(&cluster));
    l.step = estimate_step(l.config, gpus, cluster);
  }
  result.ranked = std::move(fitting);
  if (result.ranked.empty()) {
    std::sort(closest.begin(), closest.end(),
              [](const auto& a, const auto& b) { return a.memory.total < b.memory.total; });
    if (closest.size() > static_cast<size_t>(options.top)) closest.resize(options.top);
    for (PlannedLayout& l : closest)
      l.memory = estimate_memory(l.config, gpus, memory_options(&cluster));
    result.closest = std::move(closest);
  }
  result.seconds = seconds_since(start);
  return result;
}

}  // namespace strata
