// The memory model runs the engine's own sizing code, never its allocations: the parameter
// registration of model/decoder.cc on a one-layer probe of the rank's shard (every block of a
// shard has the same parameters), DataParallel's bucket plan and buffer plan, the activation
// store, gradient scratch and recomputation buffers counted by a MemCounter (model/activations.cc)
// at the rank's local rows (train.seq_len / cp), ContextAttention::bytes for context parallelism
// and document masking, the pipeline schedule the executor runs (make_schedules +
// pipeline_slots_needed, cached), and the trainer's own reading of the config (train/trainer.h).
// What is left written out here is the arithmetic of the few buffers whose code needs a live object
// (ModelParallel, the pipeline executor's gradient buffers, AdamW's moments); each names its
// source.
#include "plan/memory_model.h"

#include <omp.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <concepts>
#include <map>
#include <mutex>
#include <optional>
#include <string_view>
#include <tuple>

#include "comm/layout.h"
#include "core/error.h"
#include "model/context_attention.h"
#include "model/decoder.h"
#include "optim/offload.h"
#include "parallel/data_parallel.h"
#include "parallel/pipeline_executor.h"
#include "parallel/pipeline_schedule.h"
#include "run/run_plan.h"

namespace strata {

namespace {

constexpr int kParams = static_cast<int>(MemCategory::params);
constexpr int kGrads = static_cast<int>(MemCategory::grads);
constexpr int kMaster = static_cast<int>(MemCategory::master);
constexpr int kOptimizer = static_cast<int>(MemCategory::optimizer);
constexpr int kActivations = static_cast<int>(MemCategory::activations);
constexpr int kComm = static_cast<int>(MemCategory::comm);
constexpr int kWorkspace = static_cast<int>(MemCategory::workspace);

// The explanation is built on every estimate the layout search makes, so it is written without
// streams or printf: txt(...) appends strings and integers, B{bytes} in binary units as
// format_bytes writes them (plan/units.h), N{count} with three significant digits (format_count).
struct B {
  int64_t v;
};
struct N {
  int64_t v;
};

void put(std::string& s, std::string_view x) {
  s += x;
}
void put(std::string& s, const char* x) {
  s += x;
}
void put(std::string& s, const std::string& x) {
  s += x;
}
template <class E>
requires requires {
  EnumNames<E>::names;
}
void put(std::string& s, E v) {  // an option enum: its name
  s += enum_name(v);
}
template <std::integral T>
void put(std::string& s, T v) {
  char buf[24];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  s.append(buf, r.ptr);
}
// value / 10^decimals, written with that many decimals.
void put_fixed(std::string& s, int64_t scaled, int decimals) {
  int64_t unit = 1;
  for (int i = 0; i < decimals; ++i) unit *= 10;
  put(s, scaled / unit);
  if (decimals == 0) return;
  s += '.';
  std::string frac = std::to_string(scaled % unit);
  s.append(static_cast<size_t>(decimals) - frac.size(), '0');
  s += frac;
}
void put(std::string& s, B b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = 0;
  double v = static_cast<double>(b.v < 0 ? -b.v : b.v);
  while (v >= 1024 && u < 5) {
    v /= 1024;
    ++u;
  }
  if (b.v < 0) s += '-';
  const int decimals = v < 10 && u > 0 ? 2 : 1;
  put_fixed(s, std::llround(v * (decimals == 2 ? 100 : 10)), decimals);
  s += ' ';
  s += units[u];
}
void put(std::string& s, N n) {
  const char* units[] = {"", "K", "M", "B", "T"};
  int u = 0;
  double v = static_cast<double>(n.v);
  while (v >= 1000 && u < 4) {
    v /= 1000;
    ++u;
  }
  const int decimals = v >= 100 ? 0 : v >= 10 ? 1 : 2;
  int64_t scaled = std::llround(v * (decimals == 0 ? 1 : decimals == 1 ? 10 : 100));
  int d = decimals;
  while (d > 0 && scaled % 10 == 0) {  // %g drops trailing zeros
    scaled /= 10;
    --d;
  }
  put_fixed(s, scaled, d);
  s += units[u];
}
template <typename... Args>
std::string txt(const Args&... args) {
  std::string s;
  s.reserve(96);
  (put(s, args), ...);
  return s;
}

// Activation slots per chunk of every pp rank for one schedule, as the trainer computes them
// (make_schedule for the rank, then pipeline_slots_needed). A schedule is simulated once per
// (kind, pp, micro-batches, vpp) and kept: the layout search asks for the same ones many times.
std::vector<int> pipeline_slots(ScheduleKind kind, int pp, int m, int vpp, int pp_rank) {
  using Key = std::tuple<int, int, int, int>;
  static std::mutex mutex;
  static std::map<Key, std::vector<std::vector<int>>> cache;
  const Key key{static_cast<int>(kind), pp, m, vpp};
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (auto it = cache.find(key); it != cache.end()) return it->second[pp_rank];
  }
  const std::vector<std::vector<PipelineAction>> actions = make_schedules(kind, pp, m, vpp);
  std::vector<std::vector<int>> slots;
  for (const auto& rank_actions : actions)
    slots.push_back(pipeline_slots_needed(rank_actions, vpp));
  std::lock_guard<std::mutex> lock(mutex);
  if (cache.size() > 4096) cache.clear();
  return cache.emplace(key, std::move(slots)).first->second[pp_rank];
}

// What register_model_params gives a shard, read from a one-layer probe: the embedding group,
// one block (every block of a shard holds the same parameters), that block's experts (an MoE
// layer's group of its own, model/block.h) and the final group; and the elements ModelParallel
// packs (gradients summed over tp) and the tied embedding's copy.
struct ProbeGroup {
  int64_t elements = 0;
  int64_t tp_summed = 0;  // slice.sum_grads && replicated: summed over the whole tp group
  int64_t kv_summed = 0;  // slice.sum_grads && !replicated: a kv head shared by a subset
};
struct Probe {
  ProbeGroup embedding, block, experts, head;
  int64_t tied_numel = 0;  // numel of the tied embedding ModelParallel keeps a peer copy of
};

Probe probe_params(const ModelConfig& mc, const ModelShard& shard) {
  ModelConfig one = mc;
  one.n_layer = 1;
  ModelShard s = shard;
  s.pp = 1;
  s.pp_rank = 0;
  s.vpp = 1;
  s.chunks = {{0, 1}};
  ParamStore store;
  const ModelParamIndex index = register_model_params(one, s, store);
  Probe probe;
  const int block = layer_group(0), experts = expert_group(one, 0);
  for (const ParamInfo& p : store.all()) {
    ProbeGroup& g = p.group == 0         ? probe.embedding
                    : p.group == block   ? probe.block
                    : p.group == experts ? probe.experts
                                         : probe.head;
    g.elements += p.numel;
    if (p.slice.sum_grads) (p.slice.replicated ? g.tp_summed : g.kv_summed) += p.numel;
  }
  // ModelParallel: the first stage's embedding or the last stage's copy of it.
  const int tied = shard.has_embedding ? index.embed : index.head;
  if (tied >= 0) probe.tied_numel = store.info(tied).numel;
  return probe;
}

// Everything about a run that does not depend on the pipeline stage.
struct Run {
  RunPlan plan;  // resolve_run_plan: what the trainer of each rank builds from the config
  const RunConfig* config = nullptr;
  ModelConfig mc;
  Layout layout;
  int64_t tokens = 0, micro_batches = 1;
  int threads = 1;
  DType precision = DType::f32;
  Device device = Device::cpu;  // where the ranks run (MemoryModelOptions::device)
  RecomputePolicy recompute;
  DataParallelOptions dp_options;
  // Stage-independent parts, computed on first use: the parameter probe per (embedding, head),
  // and the backward scratch and recomputation buffers (they depend on tp and sp only).
  mutable std::optional<Probe> probes[2][2];
  mutable std::optional<MemBytes> scratch, rebuild;
  const Probe& probe(const ModelShard& shard) const {
    std::optional<Probe>& p = probes[shard.has_embedding][shard.has_head];
    if (!p) p = probe_params(mc, shard);
    return *p;
  }
};

Run resolve_run(const RunConfig& config, int64_t world, const MemoryModelOptions& options) {
  Run r;
  r.plan = resolve_run_plan(config, world, options.under_launcher);
  const RunPlan& plan = r.plan;
  r.config = &config;
  r.mc = plan.model;
  r.layout = plan.layout;
  r.tokens = plan.tokens;
  r.micro_batches = plan.micro_batches;
  r.threads = options.threads > 0         ? options.threads
              : config.system.threads > 0 ? static_cast<int>(config.system.threads)
                                          : omp_get_max_threads();
  r.precision = plan.precision;
  r.device = options.device.value_or(plan.device);
  r.recompute = plan.recompute;
  r.dp_options = plan.data_parallel;
  return r;
}

MemoryEstimate estimate_stage(const Run& r, int pp_rank, bool explain) {
  const RunConfig& config = *r.config;
  const ModelConfig& mc = r.mc;
  const ParallelConfig& p = config.parallel;
  const Layout& layout = r.layout;
  const int tp = layout.tp, pp = layout.pp, dp = layout.dp, zero = layout.zero;
  STRATA_CHECK(pp_rank >= 0 && pp_rank < pp, "memory model: pipeline rank ", pp_rank,
               " is outside parallel.pp = ", pp);
  // Rows per sequence on this rank: train.seq_len, or train.seq_len / cp under context
  // parallelism. The trainer builds the Decoder with it, so every activation, scratch and
  // recomputation buffer below is sized by the local rows.
  const int64_t batch = config.train.batch_size, seq_len = r.plan.seq_len;
  const bool lowp = r.precision != DType::f32;
  const bool sharded_model = r.plan.sharded_model();
  // Trainer::build_model: the shard of tp rank 0 at this pipeline stage.
  const ModelShard shard = r.plan.shard_for(0, pp_rank);
  const Probe& probe = r.probe(shard);

  MemoryEstimate e;
  e.pp_rank = pp_rank;
  auto add = [&](int c, int64_t bytes) { e.bytes[c] += bytes; };
  std::vector<std::string> parts[kNumMemCategories];
  // The explanation's pieces, built only when asked for (arguments are cheap to pass).
  auto note = [&](int c, const auto&... args) {
    if (explain) parts[c].push_back(txt(args...));
  };

  // ---- parameters and gradients (ParamStore, DataParallel::plan/setup) ------------------------
  // ParamStore's groups (model/block.h): the embedding 0, layer L's parameters L + 1, the final
  // group n_layer + 1, and an MoE layer's experts n_layer + 2 + L, which DataParallel buckets
  // apart and reduces and shards over the expert-data-parallel group (dp / ep ranks).
  const bool moe = probe.experts.elements > 0;
  const int edp = layout.edp();
  const size_t num_groups = static_cast<size_t>(mc.n_layer) + 2 + (moe ? mc.n_layer : 0);
  std::vector<int64_t> groups(num_groups, 0);
  std::vector<char> expert_groups(moe ? num_groups : 0, 0);
  int64_t held_layers = 0;
  if (shard.has_embedding) groups[0] = probe.embedding.elements;
  for (const LayerRange& range : shard.chunks) {
    for (int64_t l = range.begin; l < range.end; ++l) {
      groups[static_cast<size_t>(layer_group(l))] = probe.block.elements;
      if (!moe) continue;
      const size_t eg = static_cast<size_t>(expert_group(mc, l));
      groups[eg] = probe.experts.elements;
      expert_groups[eg] = 1;
    }
    held_layers += range.size();
  }
  if (shard.has_head) groups[static_cast<size_t>(mc.n_layer) + 1] = probe.head.elements;
  int64_t unpadded = 0;
  for (int64_t g : groups) unpadded += g;
  // Every run has a DataParallel (one rank: no padding, no staging, nothing sharded).
  const DataParallel::Sizes sizes =
      DataParallel::sizes(groups, r.dp_options.bucket_elements, dp, expert_groups, edp);
  const int64_t flat = sizes.flat;
  // How the shard divides, for the explanation: "/ dp 4", or with experts "/ dp 4 (experts / edp
  // 2)".
  const std::string over_dp = !explain ? std::string()
                              : moe    ? txt("/ dp ", dp, ", experts / edp ", edp)
                                       : txt("/ dp ", dp);
  const bool resident_params = zero < 3, resident_grads = zero < 2;
  const int param_category = lowp ? kMaster : kParams;
  const std::string pad = explain && flat > unpadded
                              ? txt(" (", N{unpadded}, " + ", N{flat - unpadded}, " padding)")
                              : "";
  if (resident_params) {
    add(param_category, 4 * flat);
    note(param_category, N{flat}, " params", pad, " x 4 B (f32", lowp ? " master" : "",
         ") = ", B{4 * flat});
  }
  if (resident_grads) {
    add(kGrads, 4 * flat);
    note(kGrads, N{flat}, " grads x 4 B = ", B{4 * flat});
  }
  if (lowp) {
    const int64_t copy = lowp_weight_elements(resident_params, flat, groups);
    add(kParams, 2 * copy);
    note(kParams, "16-bit working copy of ", resident_params ? "all " : "the largest group, ",
         N{copy}, " params x 2 B = ", B{2 * copy});
  }
  {
    const MemBytes dp_bytes = DataParallel::setup_bytes(r.dp_options, dp, sizes);
    for (int c = 0; c < kNumMemCategories; ++c) add(c, dp_bytes[c]);
    if (dp_bytes[kParams] > 0)
      note(kParams, "ZeRO-3 parameter shard ", N{sizes.shard}, " (", N{flat}, " ", over_dp,
           ") x 4 B = ", B{dp_bytes[kParams]});
    if (dp_bytes[kGrads] > 0)
      note(kGrads, "ZeRO-", zero, " gradient shard ", N{sizes.shard}, " (", N{flat}, " ", over_dp,
           ") x 4 B = ", B{dp_bytes[kGrads]});
    if (dp_bytes[kComm] > 0)
      note(kComm, "data-parallel staging (ZeRO-", zero, ", ", sizes.buckets, " buckets, largest ",
           N{sizes.max_padded}, ", reduce in ", p.grad_reduce_dtype, ") = ", B{dp_bytes[kComm]});
  }

  // ---- optimizer (Trainer::make_optimizer: AdamW, OffloadedAdamW or HostOffloadAdamW)
  // ---------------------------
  const int64_t state = zero >= 1 ? sizes.shard : flat;
  const std::string state_text =
      !explain    ? std::string()
      : zero >= 1 ? txt(N{state}, " params (", N{flat}, " ", over_dp, ", ZeRO-", zero, ")")
                  : txt(N{state}, " params");
  if (r.plan.optimizer_offload == OptimizerOffload::nvme) {
    OffloadOptions o;
    o.chunk_elements = r.plan.offload_chunk_elements;
    const OffloadedAdamW::Buffering buf = OffloadedAdamW::buffering(state, o);
    const int64_t chunk = buf.chunk_elements * buf.buffers;
    add(kMaster, 4 * chunk);
    add(kOptimizer, 8 * chunk);
    note(kMaster, "offload chunk buffers ", buf.buffers, " x ", N{buf.chunk_elements},
         " x 4 B = ", B{4 * chunk}, " (", state_text, " on disk)");
    note(kOptimizer, "2 moments x ", buf.buffers, " offload chunks x ", N{buf.chunk_elements},
         " x 4 B = ", B{8 * chunk});
  } else if (r.plan.optimizer_offload == OptimizerOffload::cpu) {
    // HostOffloadAdamW: master, moments and a gradient copy live in host memory, not the arena.
    note(kOptimizer, "0 B: master weights and 2 moments of ", state_text,
         " in host memory (optim.offload = \"cpu\", ", B{12 * state},
         " there, plus the downloaded gradients)");
  } else {
    add(kOptimizer, 8 * state);
    note(kOptimizer, "2 moments x ", state_text, " x 4 B = ", B{8 * state});
  }

  // ---- activations (Decoder: ActivationStore per chunk and slot) -------------------------------
  std::vector<int> slots(static_cast<size_t>(shard.num_chunks()), 1);
  if (pp > 1)
    slots = pipeline_slots(r.plan.schedule, pp, static_cast<int>(r.micro_batches),
                           static_cast<int>(p.vpp), pp_rank);
  int64_t stores = 0;
  const bool offload_acts = r.plan.offload_activations;
  for (int c = 0; c < shard.num_chunks(); ++c) {
    // Activation offload: the store without layers, and the offload's window and block outputs.
    const LayerRange layers = shard.chunks[c];
    MemBytes one = activation_store_bytes(
        mc, shard, offload_acts ? LayerRange{layers.begin, layers.begin} : layers,
        shard.chunk_has_embedding(c), shard.chunk_has_head(c), batch, seq_len, r.recompute,
        r.precision);
    if (offload_acts) {
      const MemBytes window = ActivationOffload::device_bytes(mc, shard, layers, r.recompute, batch,
                                                              seq_len, r.precision);
      for (int k = 0; k < kNumMemCategories; ++k) one[k] += window[k];
      note(kActivations,
           "activation offload: ", std::min(ActivationOffload::kWindow, layers.size()),
           " layers' activations on the device + every block output = ", B{window[kActivations]},
           " (the other layers' in host memory)");
    }
    for (int k = 0; k < kNumMemCategories; ++k) add(k, slots[c] * one[k]);
    stores += slots[c];
  }
  e.micro_batches_in_flight = *std::max_element(slots.begin(), slots.end());
  if (moe && layout.ep > 1) {
    // model/activations.h's moe_expert_rows: ExpertParallel preallocates for the most rows the
    // exchange can bring, not for the balanced average.
    const int64_t rows = shard.local_rows(r.tokens), k = mc.moe.top_k;
    const int64_t worst = moe_expert_rows(mc, shard, rows), capacity = mc.moe.capacity(rows);
    e.notes.push_back(txt("MoE with ep ", layout.ep,
                          ": each layer's expert buffers (activations and backward "
                          "scratch) are sized for ",
                          N{worst},
                          " rows per micro-batch, the worst-case routing (every "
                          "rank of the ep group sends all its tokens' choices to this rank's ",
                          shard.experts(mc), " experts",
                          capacity > 0 ? txt(", at most ", capacity,
                                             " rows per expert and source rank (capacity "
                                             "factor)")
                                       : std::string(),
                          "); balanced routing brings ", N{rows * k}));
  }
  e.activation_bytes_per_layer =
      layer_bytes(mc, shard, r.recompute.for_layer(0), MemCategory::activations, batch, seq_len,
                  r.precision)[kActivations];
  // Context parallelism and document masking: the Decoder's ContextAttention holds each activation
  // store's masks and positions (activations) and the ring's or Ulysses' buffers (workspace).
  const int cp = layout.cp;
  const bool document_mask = config.data.document_mask;
  if (cp > 1 || document_mask) {
    const MemBytes context =
        ContextAttention::bytes(mc, shard, batch, seq_len, cp, p.cp_impl, document_mask,
                                static_cast<int>(stores), r.threads);
    for (int k = 0; k < kNumMemCategories; ++k) add(k, context[k]);
    const bool ulysses = cp > 1 && p.cp_impl == CpImpl::ulysses;
    const char* what = ulysses ? "Ulysses exchange buffers, head-split q|k|v, output and their "
                                 "gradients"
                               : "ring key/value blocks, their gradient accumulators and a "
                                 "partial output";
    note(kActivations, "context-attention masks and positions (", stores,
         " micro-batch slot(s)) = ", B{context[kActivations]});
    note(kWorkspace, "context attention: ", what, " = ", B{context[kWorkspace]});
    e.notes.push_back(
        txt(cp > 1 ? txt("context parallelism cp ", cp, " (", p.cp_impl, "): each rank holds ",
                         seq_len, " of the ", config.train.seq_len,
                         " rows of every sequence (chunks r and 2cp-1-r of 2cp); ")
                   : std::string(),
            document_mask ? "document masking; " : "", "context-attention buffers: masks ",
            B{context[kActivations]}, " (activations, ", stores, " micro-batch slot(s)) + ", what,
            " ", B{context[kWorkspace]}, " (workspace)"));
  }
  if (explain && offload_acts) {
    note(kActivations, "+ tokens and chunk input, final norm, logits [n, v/tp], losses (b ", batch,
         " x s ", seq_len, "); without the offload the layers would take ", shard.chunks[0].size(),
         " x ", B{e.activation_bytes_per_layer});
  } else if (explain) {
    // Layer-slots per recomputation mode: each chunk's layers times its micro-batches in flight.
    std::array<int64_t, 3> slots_in_mode{};
    std::string in_flight;
    for (int c = 0; c < shard.num_chunks(); ++c) {
      for (int64_t local = 0; local < shard.chunks[c].size(); ++local)
        slots_in_mode[static_cast<int>(r.recompute.for_layer(local))] += slots[c];
      in_flight += txt(c ? "/" : "", slots[c]);
    }
    std::string layers;
    int64_t layers_total = 0;
    for (Recompute mode : {Recompute::none, Recompute::selective, Recompute::full}) {
      const int64_t count = slots_in_mode[static_cast<int>(mode)];
      if (count == 0) continue;
      const int64_t one = layer_bytes(mc, shard, mode, MemCategory::activations, batch, seq_len,
                                      r.precision)[kActivations];
      layers +=
          txt(layers.empty() ? "" : " + ", count, " x ", B{one}, " (", recompute_name(mode), ")");
      layers_total += count * one;
    }
    note(kActivations, "layers x micro-batches in flight (", in_flight,
         shard.num_chunks() > 1 ? " per chunk" : "", ", b ", batch, " x s ", seq_len, "): ", layers,
         " = ", B{layers_total}, "; + tokens and chunk input",
         shard.has_head ? ", final norm, logits [n, v/tp], losses" : "", " per micro-batch");
  }

  // ---- workspace: backward scratch, recomputation buffers, input batches -----------------------
  if (!r.scratch) {
    r.scratch =
        grad_scratch_bytes(mc, shard, batch, seq_len, r.precision, r.threads, nullptr, r.device);
    r.rebuild = recompute_buffer_bytes(mc, shard, r.recompute.mode, batch, seq_len, r.precision);
  }
  const MemBytes& scratch = *r.scratch;
  const MemBytes& rebuild = *r.rebuild;
  for (int k = 0; k < kNumMemCategories; ++k) add(k, scratch[k] + rebuild[k]);
  note(kWorkspace, "backward scratch ", B{scratch[kWorkspace]}, " (attention scratch for ",
       r.threads, r.threads == 1 ? " thread)" : " threads)");
  if (rebuild[kWorkspace] > 0)
    note(kWorkspace, "recompute buffers (", config.train.recompute, ") ", B{rebuild[kWorkspace]});
  // (The trainer's token batches live in host memory, Trainer::host_arena_, not on the device:
  // the Decoder copies them into its activation store, counted with the activations.)

  // ---- model parallelism (ModelParallel) and the pipeline executor ----------------------------
  if (sharded_model) {
    // (An MoE layer's experts are replicated over tp: under sp their gradients are partial sums
    // over this rank's rows, summed over the tp group.)
    const int64_t tp_summed = (shard.has_embedding ? probe.embedding.tp_summed : 0) +
                              held_layers * (probe.block.tp_summed + probe.experts.tp_summed) +
                              (shard.has_head ? probe.head.tp_summed : 0);
    const int64_t kv_summed = (shard.has_embedding ? probe.embedding.kv_summed : 0) +
                              held_layers * (probe.block.kv_summed + probe.experts.kv_summed) +
                              (shard.has_head ? probe.head.kv_summed : 0);
    const int64_t pack = std::max(tp_summed, kv_summed);
    if (pack > 0) {
      add(kComm, 4 * pack);
      note(kComm, "tp gradient pack ", N{pack}, " x 4 B = ", B{4 * pack});
    }
    if (kv_summed > 0) {
      add(kComm, 4 * kv_summed * tp);
      note(kComm, "shared kv gradients ", N{kv_summed}, " x tp ", tp,
           " x 4 B = ", B{4 * kv_summed * tp});
    }
    if (mc.tie_embeddings && pp > 1 && (shard.has_embedding || shard.has_head)) {
      add(kComm, 4 * probe.tied_numel);
      note(kComm, "tied embedding peer gradient ", N{probe.tied_numel},
           " x 4 B = ", B{4 * probe.tied_numel});
    }
  }
  if (pp > 1) {
    // PipelineExecutor: a gradient receive and send buffer per activation slot of each chunk.
    const int64_t boundary = shard.local_rows(r.tokens) * mc.d_model;
    const int64_t buffers = 2 * stores;
    add(kComm, 4 * buffers * boundary);
    note(kComm, "pipeline gradient buffers 2 x ", stores, " slots x ", N{boundary},
         " x 4 B = ", B{4 * buffers * boundary});
  }

  for (int c = 0; c < kNumMemCategories; ++c) e.total += e.bytes[c];
  if (explain) {
    for (int c = 0; c < kNumMemCategories; ++c) {
      std::string line = txt(mem_category_name(static_cast<MemCategory>(c)), ": ");
      if (parts[c].empty()) {
        line += e.bytes[c] == 0 ? std::string("none") : txt(B{e.bytes[c]});
      } else {
        for (size_t i = 0; i < parts[c].size(); ++i) line += (i ? "; " : "") + parts[c][i];
        if (parts[c].size() > 1) line += txt(" -> ", B{e.bytes[c]});
      }
      e.explain.push_back(line);
    }
    e.explain.push_back(txt("total: ", B{e.total}, " (pipeline stage ", pp_rank, " of ", pp,
                            ", tp ", tp, " dp ", dp, layout.ep > 1 ? txt(" ep ", layout.ep) : "",
                            layout.cp > 1 ? txt(" cp ", layout.cp) : "", ")"));
  }
  return e;
}

}  // namespace

MemoryEstimate estimate_rank_memory(const RunConfig& config, int64_t world, int pp_rank,
                                    const MemoryModelOptions& options) {
  return estimate_stage(resolve_run(config, world, options), pp_rank, options.explain);
}

MemoryEstimate estimate_rank_memory(const RunConfig& config, int64_t world, int pp_rank) {
  return estimate_rank_memory(config, world, pp_rank, MemoryModelOptions{});
}

MemoryEstimate estimate_memory(const RunConfig& config, int64_t world,
                               const MemoryModelOptions& options) {
  const Run run = resolve_run(config, world, options);
  // The first stage with the largest total (the explanation is written for that one only).
  MemoryEstimate best;
  best.total = -1;
  for (int s = 0; s < run.layout.pp; ++s) {
    MemoryEstimate e = estimate_stage(run, s, /*explain=*/false);
    if (e.total > best.total) best = std::move(e);
  }
  return options.explain ? estimate_stage(run, best.pp_rank, true) : best;
}

MemoryEstimate estimate_memory(const RunConfig& config, int64_t world) {
  return estimate_memory(config, world, MemoryModelOptions{});
}

}  // namespace strata
