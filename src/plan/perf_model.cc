// The step time of a config on a cluster (perf_model.h). What is counted follows strata's
// Decoder and Trainer (model/decoder.cc, parallel/*.cc, train/trainer.cc): the GEMMs of the fused
// projections, causal attention as the kernels compute it (the triangle only), the memory-bound
// kernels with the bytes of plan/perf_terms.h, the tensor-parallel collectives inside each layer
// (on the critical path), pipeline transfers and the bubble, the bucketed data-parallel reduction
// overlapped with the last micro-batch's backward, ZeRO's gathers, recomputation and AdamW. One
// layer's work, and context parallelism's exchanges, are in perf_layer.cc.
#include "plan/perf_model.h"

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>

#include "core/error.h"
#include "model/shard.h"
#include "plan/collectives.h"
#include "plan/perf_layer.h"
#include "plan/perf_terms.h"
#include "run/run_plan.h"

namespace strata {

double model_flops_per_token(const ModelConfig& model, int64_t seq_len) {
  const double n = static_cast<double>(model.num_active_params(false));
  return 6.0 * n + 12.0 * static_cast<double>(model.n_layer) * static_cast<double>(model.d_model) *
                       static_cast<double>(seq_len);
}

double pipeline_time(const std::vector<double>& stage_s, int64_t micro_batches, int64_t vpp) {
  double sum = 0, mx = 0;
  for (double t : stage_s) {
    sum += t;
    mx = std::max(mx, t);
  }
  return static_cast<double>(micro_batches) * mx +
         (sum - mx) / static_cast<double>(std::max<int64_t>(1, vpp));
}

namespace {

__attribute__((format(printf, 1, 2))) std::string fmt(const char* f, ...) {
  char buf[512];
  va_list args;
  va_start(args, f);
  std::vsnprintf(buf, sizeof buf, f, args);
  va_end(args);
  return buf;
}

double ms(double s) {
  return s * 1e3;
}

using perf::LayerWork;
using perf::Rates;
using perf::Shapes;

struct StageWork {
  int64_t layers = 0;
  bool embedding = false, head = false;
  double compute_s = 0, recompute_s = 0, tp_s = 0, ep_s = 0, p2p_s = 0;  // per micro-batch
  double cp_s = 0;   // context parallelism's exchanges not hidden behind attention, per micro-batch
  double bwd_s = 0;  // per micro-batch (overlap window)
  double fwd_s = 0;
  double params = 0;         // this rank's parameters (elements)
  double expert_params = 0;  // of which the experts of its MoE layers
  double tp_summed = 0;      // of which replicated over tp, their gradients summed under sp
  double first_group = 0;    // elements of the group its backward finishes last
  double flops = 0;          // executed per micro-batch
  double total() const { return compute_s + tp_s + ep_s + cp_s + p2p_s; }
};

}  // namespace

StepEstimate estimate_step(const RunConfig& config, int64_t world, const ClusterProfile& profile,
                           bool explain) {
  StepEstimate e;
  // A CPU profile of one machine (max_nodes 1, --calibrate's) runs every rank there, more ranks
  // than cores sharing them (mpirun --oversubscribe): one node of `world` ranks. Otherwise extra
  // ranks fill more nodes.
  const bool one_machine =
      profile.device.is_cpu() && profile.max_nodes == 1 && world > profile.gpus_per_node;
  ClusterProfile oversubscribed;
  if (one_machine) {
    oversubscribed = profile;
    oversubscribed.gpus_per_node = world;
  }
  const ClusterProfile& cluster = one_machine ? oversubscribed : profile;
  // The plan the ranks of this job would resolve: its layout (dp derived), micro-batches and
  // model. A layout that does not fit the ranks asked for is refused, saying what would.
  RunPlan plan;
  try {
    plan = resolve_run_plan(config, world, /*under_launcher=*/true);
  } catch (const Error& err) {
    fail(err.what(), " (", world, " ranks asked for; change --gpus or the parallel.* keys)");
  }
  const ModelConfig& model = plan.model;
  const ParallelConfig& p = config.parallel;
  const TrainConfig& tr = config.train;
  const DeviceProfile& dev = cluster.device;
  const int64_t tp = plan.layout.tp, pp = plan.layout.pp, dp = plan.layout.dp;
  const int64_t ep = plan.layout.ep, edp = plan.layout.edp(), cp = plan.layout.cp;
  const int64_t v = std::max<int64_t>(1, p.vpp);
  const int64_t m = plan.micro_batches;
  const Precision prec = tr.precision;
  const bool lowp = prec != Precision::f32;
  const double act_bytes = lowp ? 2 : 4;

  Shapes s;
  s.cpu = dev.is_cpu();
  s.tp = tp;
  s.sp = p.sp && tp > 1;
  s.b = static_cast<double>(tr.batch_size);
  s.t = static_cast<double>(plan.seq_len);  // this rank's rows: train.seq_len / cp
  s.T = static_cast<double>(tr.seq_len);
  s.cp = cp;
  s.context = cp > 1 || config.data.document_mask;
  s.ulysses = p.cp_impl == CpImpl::ulysses;
  s.n = s.b * s.t;
  s.ns = s.sp ? s.n / static_cast<double>(tp) : s.n;
  s.c = static_cast<double>(model.d_model);
  s.hd = static_cast<double>(model.head_dim());
  s.nh = static_cast<double>(model.n_head / tp);
  s.nkv = static_cast<double>(model.kv_heads() % tp == 0 ? model.kv_heads() / tp : 1);
  s.q = (s.nh + 2 * s.nkv) * s.hd;
  s.a = s.nh * s.hd;
  s.f = static_cast<double>(model.d_ff / tp);
  s.ep = ep;
  if (model.moe.enabled()) {
    // Replicated over tp (model/block.cc's ParamSlices::experts): every tp rank runs the whole
    // expert width, on all rows without sp and on its own rows with it.
    const double fe = static_cast<double>(model.expert_ffn());
    s.moe = true;
    s.k = static_cast<double>(model.moe.top_k);
    s.shared = static_cast<double>(model.shared_ffn());
    s.f = s.k * fe + s.shared;
    s.router = static_cast<double>(model.moe.experts);
    s.moe_rows = s.ns;
    s.in_mats = static_cast<double>(model.moe.input_factor());
    s.expert_params = s.router / static_cast<double>(ep) * (s.in_mats + 1) * s.c * fe;
  }
  s.gpt2 = model.family == ModelFamily::gpt2;
  s.gelu = s.gpt2 || (s.moe && model.moe.activation == MoeActivation::gelu);
  if (!s.moe) s.in_mats = s.gpt2 ? 1 : 2;
  s.F = s.in_mats * s.f;
  s.V = static_cast<double>(model.vocab_size / tp);
  s.max_seq = static_cast<double>(model.max_seq_len);
  s.flash = model.flash_attention();
  s.lowp = lowp;
  s.bf16 = prec == Precision::bf16;
  s.tied = model.tie_embeddings;

  // ---- rates of one rank ----
  const int64_t ranks_on_node = std::min(world, cluster.gpus_per_node);
  const double scale = dev.rank_scale(config.system.threads, ranks_on_node);
  Rates r;
  r.gemm = dev.matrix_flops(prec) * dev.gemm_efficiency * scale;
  // The CPU engine runs attention in f32 except bf16 flash attention (fp16, naive bf16 and
  // context attention widen q, k, v first).
  const Precision attn_prec = s.cpu && (s.context || !(s.bf16 && s.flash)) ? Precision::f32 : prec;
  double attn_eff = dev.attention_efficiency;
  if (!s.flash && dev.naive_attention_efficiency > 0)
    attn_eff = dev.naive_attention_efficiency;
  else if (attn_prec == Precision::bf16 && dev.attention_bf16_efficiency > 0)
    attn_eff = dev.attention_bf16_efficiency;
  r.attn = dev.matrix_flops(attn_prec) * attn_eff * scale;
  double bw = dev.mem_bandwidth * scale;
  if (s.cpu && dev.mem_bandwidth_node > 0)
    bw = std::min(bw, dev.mem_bandwidth_node / static_cast<double>(ranks_on_node));
  r.mem = bw * dev.memory_efficiency;
  const double ce_eff = tp > 1 && dev.vocab_parallel_ce_efficiency > 0
                            ? dev.vocab_parallel_ce_efficiency
                        : dev.cross_entropy_efficiency > 0 ? dev.cross_entropy_efficiency
                                                           : dev.memory_efficiency;
  r.ce = bw * ce_eff;
  const double peak = dev.matrix_flops(prec) * scale;  // MFU's denominator per rank

  if (explain) {
    const int64_t nodes = (world + cluster.gpus_per_node - 1) / cluster.gpus_per_node;
    e.explain.push_back(
        fmt("layout: tp %lld pp %lld dp %lld%s%s = %lld ranks on %lld node(s) of %lld; micro-batch "
            "%lld x %lld per step, seq %lld, vpp %lld, schedule %s, zero %lld%s, precision %s, "
            "recompute %s",
            (long long)tp, (long long)pp, (long long)dp,
            ep > 1 ? fmt(" (ep %lld x edp %lld)", (long long)ep, (long long)edp).c_str() : "",
            cp > 1 ? fmt(" (cp %lld %s x %lld replicas; %lld of %lld rows per sequence)",
                         (long long)cp, enum_name(p.cp_impl).data(), (long long)(dp / cp),
                         (long long)plan.seq_len, (long long)tr.seq_len)
                         .c_str()
                   : "",
            (long long)world, (long long)nodes, (long long)cluster.gpus_per_node,
            (long long)tr.batch_size, (long long)m, (long long)tr.seq_len, (long long)v,
            enum_name(p.schedule).data(), (long long)p.zero, s.sp ? ", sp" : "",
            enum_name(prec).data(), enum_name(tr.recompute).data()));
    if (s.cpu)
      e.explain.push_back(fmt(
          "rank compute: %.2f cores (threads %lld, %lld rank(s) on %lld cores, thread "
          "efficiency %.2f, %.2f cores available) -> %.2f x the per-core rates",
          dev.rank_cores(config.system.threads, ranks_on_node), (long long)config.system.threads,
          (long long)ranks_on_node, (long long)dev.cores, dev.thread_efficiency,
          dev.available_cores > 0 ? dev.available_cores : static_cast<double>(dev.cores), scale));
    e.explain.push_back(fmt(
        "rates per rank: GEMM %.4g TFLOP/s x %.2f = %.4g TFLOP/s; attention (%s) %.4g TFLOP/s; "
        "memory-bound %.4g GB/s x %.2f = %.4g GB/s",
        dev.matrix_flops(prec) * scale / 1e12, dev.gemm_efficiency, r.gemm / 1e12,
        s.flash ? "flash" : "naive", r.attn / 1e12, bw / 1e9, dev.memory_efficiency, r.mem / 1e9));
  }

  // ---- one layer ----
  const LayerWork lw = perf::layer_work(s, r);
  const double X = s.n * s.c;                            // elements of a full [rows, C] activation
  const double tp_reduce_bytes = s.cpu ? 4 : act_bytes;  // the CPU engine reduces f32 partials
  const double tp_gather_lp = s.cpu ? (lowp ? 2 : 4) : act_bytes;
  const double tp_gather_grad = s.cpu ? 4 : act_bytes;
  auto tp_coll = [&](CollectiveOp op, double bytes) {
    return collective_cost(op, bytes, tp, 1, cluster);
  };
  CollectiveCost tp_ar, tp_rs, tp_ag_lp, tp_ag_grad;
  double tp_layer_fwd = 0, tp_layer_bwd = 0;
  if (tp > 1) {
    if (!s.sp) {
      tp_ar = tp_coll(CollectiveOp::all_reduce, X * tp_reduce_bytes);
      tp_layer_fwd = 2 * tp_ar.seconds;
      tp_layer_bwd = 2 * tp_ar.seconds;
    } else {
      tp_rs = tp_coll(CollectiveOp::reduce_scatter, X * tp_reduce_bytes);
      tp_ag_lp = tp_coll(CollectiveOp::all_gather, X * tp_gather_lp);
      tp_ag_grad = tp_coll(CollectiveOp::all_gather, X * tp_gather_grad);
      tp_layer_fwd = 2 * (tp_ag_lp.seconds + tp_rs.seconds);
      tp_layer_bwd = 2 * (tp_ag_grad.seconds + tp_ag_lp.seconds + tp_rs.seconds);
    }
    // An MoE layer's FFN is replicated over tp (its rows stay where they are): only the attention
    // half's collectives run.
    if (s.moe) {
      tp_layer_fwd /= 2;
      tp_layer_bwd /= 2;
    }
  }
  // Expert parallelism (model/expert_parallel.h), per MoE layer and micro-batch: forward
  // all-gathers the rows per expert (ep x experts int32), then two all-to-alls of this rank's
  // routed rows in f32 (to the experts' ranks and back), backward two more. The ep group is ep
  // adjacent dp ranks (world-rank stride tp). The shared experts run while the rows travel
  // (forward: their gate|up, backward: all of it), hiding up to that much of the first exchange
  // of each direction where the link moves data without the cores (overlap); nothing else hides.
  CollectiveCost ep_a2a, ep_counts;
  double ep_layer_fwd = 0, ep_layer_bwd = 0, ep_hidden_fwd = 0, ep_hidden_bwd = 0;
  if (s.moe && ep > 1) {
    const double a2a_bytes = s.moe_rows * s.k * s.c * 4;
    ep_a2a = collective_cost(CollectiveOp::all_to_all, a2a_bytes, ep, tp, cluster);
    ep_counts = collective_cost(CollectiveOp::all_gather, static_cast<double>(ep) * s.router * 4,
                                ep, tp, cluster);
    const double link_overlap = ep_a2a.inter_node ? cluster.inter.overlap : cluster.intra.overlap;
    if (s.shared > 0) {
      const double up =
          2 * s.moe_rows * s.c * s.in_mats * s.shared / r.gemm +
          (s.gelu ? perf::kGeluForward : perf::kSwigluForward) * s.moe_rows * s.shared / r.mem;
      const double back =
          2 * 2 * s.moe_rows * s.c * (s.in_mats + 1) * s.shared / r.gemm +
          (s.gelu ? perf::kGeluBackward : perf::kSwigluBackward) * s.moe_rows * s.shared / r.mem;
      ep_hidden_fwd = std::min(ep_a2a.seconds, link_overlap * up);
      ep_hidden_bwd = std::min(ep_a2a.seconds, link_overlap * back);
    }
    ep_layer_fwd = ep_counts.seconds + 2 * ep_a2a.seconds - ep_hidden_fwd;
    ep_layer_bwd = 2 * ep_a2a.seconds - ep_hidden_bwd;
  }
  // Context parallelism (perf_layer.h): the ring's transfers beside each step's attention, or
  // Ulysses' all-to-alls, per layer and micro-batch.
  const perf::ContextExchange cpx = perf::context_exchange(s, lw, r, cluster);
  // Recomputation per recomputed layer: full reruns the block forward (its collectives too);
  // selective reruns naive attention's forward (flash attention recomputes anyway: nothing).
  double rc_layer = 0;
  if (tr.recompute == Recompute::full)
    rc_layer = lw.fwd_s + tp_layer_fwd + ep_layer_fwd + cpx.fwd_exposed_s;
  else if (tr.recompute == Recompute::selective && !s.flash)
    rc_layer = lw.attn_fwd / r.attn + lw.probs_fwd / r.mem;
  if (explain) {
    e.explain.push_back(
        fmt("layer, one micro-batch: forward GEMM %.4g GFLOP (%.3f ms), attention %.4g GFLOP "
            "(%.3f ms), memory-bound %.4g MB (%.3f ms) = %.3f ms; backward 2x GEMM, attention "
            "x%.1f, %.4g MB = %.3f ms; recompute %.3f ms",
            lw.gemm_fwd / 1e9, ms(lw.gemm_fwd / r.gemm), lw.attn_fwd / 1e9,
            ms(lw.attn_fwd / r.attn), lw.mem_fwd / 1e6, ms(lw.mem_fwd / r.mem), ms(lw.fwd_s),
            s.flash ? 2.5 : 2.0, lw.mem_bwd / 1e6, ms(lw.bwd_s), ms(rc_layer)));
    if (tp > 1) {
      const CollectiveCost& shown = s.sp ? tp_rs : tp_ar;
      e.explain.push_back(fmt(
          "tp per layer: %s of %.4g MB over %lld ranks (%s, %s, %.4g GB/s, %.3g us/step) = %.3f "
          "ms each; forward %.3f ms, backward %.3f ms",
          s.sp ? "2 all-gather + 2 reduce-scatter forward, 4 all-gather + 2 reduce-scatter "
                 "backward; reduce-scatter"
               : "2 all-reduce forward + 2 backward",
          X * tp_reduce_bytes / 1e6, (long long)tp,
          shown.inter_node ? cluster.inter.kind.c_str() : cluster.intra.kind.c_str(),
          shown.algorithm, shown.bandwidth / 1e9, shown.latency_s * 1e6, ms(shown.seconds),
          ms(tp_layer_fwd), ms(tp_layer_bwd)));
    }
    if (cp > 1 && s.ulysses)
      e.explain.push_back(fmt(
          "cp per layer (ulysses): all-to-all of q|k|v %.4g MB and of the output %.4g MB (f32) "
          "over %lld ranks (%s, %.4g GB/s) = %.3f + %.3f ms; forward 1 each = %.3f ms, backward "
          "2 each = %.3f ms, all exposed",
          cpx.block_bytes / 1e6, s.n * s.a * 4 / 1e6, (long long)cp,
          cpx.block.inter_node ? cluster.inter.kind.c_str() : cluster.intra.kind.c_str(),
          cpx.block.bandwidth / 1e9, ms(cpx.block.seconds), ms(cpx.out.seconds), ms(cpx.fwd_s),
          ms(cpx.bwd_s)));
    else if (cp > 1)
      e.explain.push_back(fmt(
          "cp per layer (ring): key/value block %.4g MB (f32) to the next of %lld ranks (%s, "
          "%.4g GB/s, %.3g us) = %.3f ms per send; forward %lld sends beside %.3f ms of "
          "attention each = %.3f ms, exposed %.3f ms; backward %lld blocks + %lld gradient "
          "blocks beside %.3f ms each = %.3f ms, exposed %.3f ms (attention per rank: 1/%lld of "
          "the sequence's)",
          cpx.block_bytes / 1e6, (long long)cp,
          cpx.block.inter_node ? cluster.inter.kind.c_str() : cluster.intra.kind.c_str(),
          cpx.block.bandwidth / 1e9, cpx.block.latency_s * 1e6, ms(cpx.block.seconds),
          (long long)(cp - 1), ms(cpx.step_fwd_s), ms(cpx.fwd_s), ms(cpx.fwd_exposed_s),
          (long long)(cp - 1), (long long)cp, ms(cpx.step_bwd_s), ms(cpx.bwd_s),
          ms(cpx.bwd_exposed_s), (long long)cp));
    if (s.moe)
      e.explain.push_back(fmt(
          "MoE per layer: %.4g rows of %lld routed to %lld of %lld experts (+ shared width "
          "%.0f) on this rank%s; experts here %lld of %lld",
          s.moe_rows, (long long)model.d_model, (long long)model.moe.top_k,
          (long long)model.moe.experts, s.shared,
          tp > 1 ? (s.sp ? " (sp: this tp rank's rows)" : " (replicated on every tp rank)") : "",
          (long long)(model.moe.experts / ep), (long long)model.moe.experts));
    if (s.moe && ep > 1)
      e.explain.push_back(fmt(
          "ep per layer: 2 all-to-all forward + 2 backward of %.4g MB (rows x top_k x C x 4 B) "
          "over %lld ranks (%s, %s, %.4g GB/s, %.3g us/step) = %.3f ms each, + counts all-gather "
          "%.3f ms; shared experts hide %.3f ms forward, %.3f ms backward -> forward %.3f ms, "
          "backward %.3f ms",
          s.moe_rows * s.k * s.c * 4 / 1e6, (long long)ep,
          ep_a2a.inter_node ? cluster.inter.kind.c_str() : cluster.intra.kind.c_str(),
          ep_a2a.algorithm, ep_a2a.bandwidth / 1e9, ep_a2a.latency_s * 1e6, ms(ep_a2a.seconds),
          ms(ep_counts.seconds), ms(ep_hidden_fwd), ms(ep_hidden_bwd), ms(ep_layer_fwd),
          ms(ep_layer_bwd)));
  }

  // ---- embedding and head ----
  using namespace perf;
  const double head_gemm = 2 * s.n * s.c * s.V;
  const double ce_bytes = (tp > 1 ? kVocabParallelCe : kCrossEntropy) * s.n * s.V;
  const double head_fwd = head_gemm / r.gemm +
                          s.ns * s.c * (kNormForward + (lowp ? kToLowp : 0)) / r.mem +
                          ce_bytes / r.ce;
  const double head_bwd = 2 * head_gemm / r.gemm + s.ns * s.c * kNormBackward / r.mem;
  const double emb_fwd =
      (kEmbeddingForward * s.n * s.c + (s.gpt2 ? kResidualAdd * s.ns * s.c : 0)) / r.mem;
  const double emb_bwd = kEmbeddingBackward * s.n * s.c / r.mem;
  double head_tp = 0, emb_tp = 0;
  if (tp > 1) {
    const CollectiveCost red = tp_coll(
        s.sp ? CollectiveOp::reduce_scatter : CollectiveOp::all_reduce, X * tp_reduce_bytes);
    head_tp = red.seconds + tp_coll(CollectiveOp::all_reduce, s.n * 4).seconds +
              tp_coll(CollectiveOp::all_reduce, 2 * s.n * 4).seconds +
              (s.sp ? 2 * tp_ag_lp.seconds : 0);
    emb_tp = red.seconds + (s.sp ? tp_ag_grad.seconds : 0);
  }

  // ---- pipeline stages ----
  const int64_t G = pp * v;
  const std::vector<int64_t> counts =
      stage_layer_counts(model.n_layer, static_cast<int>(G), p.stage_layers);
  const double lp = perf::layer_params(s), lp_dense = lp - s.expert_params;
  const double emb_params = s.V * s.c + (s.gpt2 ? s.max_seq * s.c : 0);
  const double head_params = (s.gpt2 ? 2 : 1) * s.c + (!s.tied || pp > 1 ? s.V * s.c : 0);
  const double boundary_bytes = s.ns * s.c * (s.cpu ? 4 : act_bytes);
  const CollectiveCost p2p =
      collective_cost(CollectiveOp::send, boundary_bytes, 2, tp * dp, cluster);
  const double p2p_overlap = p2p.inter_node ? cluster.inter.overlap : cluster.intra.overlap;
  const int64_t rc_n = tr.recompute_layers;
  std::vector<StageWork> stages(static_cast<size_t>(pp));
  std::vector<double> stage_s(static_cast<size_t>(pp));
  const double layer_flops = 3 * lw.gemm_fwd + lw.attn_fwd + lw.attn_bwd;
  for (int64_t i = 0; i < pp; ++i) {
    StageWork& st = stages[static_cast<size_t>(i)];
    for (int64_t c = 0; c < v; ++c) {
      const int64_t g = i + c * pp;
      const int64_t L = counts[static_cast<size_t>(g)];
      st.layers += L;
      const int64_t recomputed =
          tr.recompute == Recompute::none ? 0 : (rc_n > 0 ? std::min(rc_n, L) : L);
      st.recompute_s += static_cast<double>(recomputed) * rc_layer;
      if (tr.recompute == Recompute::full)
        st.flops += static_cast<double>(recomputed) * (lw.gemm_fwd + lw.attn_fwd);
      if (g > 0) st.p2p_s += 2 * p2p.seconds;  // receive activation, send gradient
      if (g + 1 < G) st.p2p_s += 2 * p2p.seconds;
    }
    const double Ld = static_cast<double>(st.layers);
    st.fwd_s = Ld * lw.fwd_s;
    st.bwd_s = Ld * lw.bwd_s;
    st.tp_s = Ld * (tp_layer_fwd + tp_layer_bwd);
    st.ep_s = Ld * (ep_layer_fwd + ep_layer_bwd);
    st.cp_s = Ld * (cpx.fwd_exposed_s + cpx.bwd_exposed_s);
    st.flops += Ld * layer_flops;
    st.params = Ld * lp;
    st.expert_params = Ld * s.expert_params;
    st.tp_summed = Ld * perf::layer_tp_summed_params(s);
    st.first_group = lp_dense;
    st.embedding = i == 0;
    st.head = i == (G - 1) % pp;
    if (st.embedding) {
      st.fwd_s += emb_fwd;
      st.bwd_s += emb_bwd;
      st.tp_s += emb_tp;
      st.params += emb_params;
      st.first_group = emb_params;
      if (s.gpt2) st.tp_summed += s.max_seq * s.c;  // the position table
    }
    if (st.head) {
      st.fwd_s += head_fwd;
      st.bwd_s += head_bwd;
      st.tp_s += head_tp;
      st.params += head_params;
      st.tp_summed += (s.gpt2 ? 2 : 1) * s.c;  // the final norm
      st.flops += 3 * head_gemm;
    }
    st.compute_s = st.fwd_s + st.bwd_s + st.recompute_s;
    st.p2p_s *= 0.5 * (1 - p2p_overlap);  // one side's share of each transfer, if not hidden
    stage_s[static_cast<size_t>(i)] = st.total();
  }
  double pipe_s = pipeline_time(stage_s, m, v);
  size_t busiest = 0;
  for (size_t i = 0; i < stages.size(); ++i)
    if (stage_s[i] > stage_s[busiest]) busiest = i;
  const StageWork& hot = stages[busiest];
  if (pp > 1) pipe_s += 2 * static_cast<double>(pp - 1) * p2p.seconds;  // fill and drain hops
  if (explain) {
    for (size_t i = 0; i < stages.size(); ++i) {
      if (stages.size() > 4 && i > 1 && i + 2 < stages.size()) {
        if (i == 2) e.explain.push_back("  ...");
        continue;
      }
      const StageWork& st = stages[i];
      e.explain.push_back(
          fmt("stage %zu per micro-batch: %lld layers%s%s: forward %.3f ms + backward %.3f ms + "
              "recompute %.3f ms + tp %.3f ms%s%s + p2p %.3f ms = %.3f ms%s",
              i, (long long)st.layers, st.embedding ? " + embedding" : "", st.head ? " + head" : "",
              ms(st.fwd_s), ms(st.bwd_s), ms(st.recompute_s), ms(st.tp_s),
              ep > 1 ? fmt(" + ep %.3f ms", ms(st.ep_s)).c_str() : "",
              cp > 1 ? fmt(" + cp %.3f ms", ms(st.cp_s)).c_str() : "", ms(st.p2p_s), ms(st.total()),
              i == busiest ? " (busiest)" : ""));
    }
    e.explain.push_back(fmt(
        "pipeline: %lld micro-batches x %.3f ms (busiest stage) + (sum of stages - max) / vpp "
        "%lld%s = %.4g s (ideal %.4g s; bubble (p-1)/(v m) = %.3f for equal stages)",
        (long long)m, ms(stage_s[busiest]), (long long)v, pp > 1 ? " + 2(p-1) transfer hops" : "",
        pipe_s, static_cast<double>(m) * stage_s[busiest],
        static_cast<double>(pp - 1) / static_cast<double>(v * m)));
  }

  // ---- data parallelism, ZeRO, optimizer (per stage; the slowest finishes the step) ----
  const double grad_bytes = p.grad_reduce_dtype == GradReduceType::bf16 ? 2 : 4;
  const double bucket_elems = std::max(1.0, p.bucket_mb * 1048576.0 / 4);
  const CollectiveCost dp_probe =
      collective_cost(CollectiveOp::all_reduce, 1 << 20, dp, tp, cluster);
  const double dp_overlap_frac =
      p.overlap ? (dp_probe.inter_node ? cluster.inter.overlap : cluster.intra.overlap) : 0.0;
  double tail = -1, dp_total = 0, dp_exposed = 0, tp_grad_sum_s = 0, opt_s = 0;
  std::string dp_line, tp_sum_line, opt_line;
  // The experts (MoE) reduce and shard over the expert-data-parallel group: the edp ranks of equal
  // ep rank, at world-rank stride tp x ep.
  const int64_t edp_stride = tp * ep;
  for (size_t i = 0; i < stages.size(); ++i) {
    const StageWork& st = stages[i];
    const double P = st.params, Pe = st.expert_params, Pd = P - Pe;
    // Buckets hold whole parameter groups (a layer, the embedding; an MoE layer's experts, in
    // buckets of their own): a group larger than a bucket is a bucket of its own. Each part's
    // buckets: (all of them, the one that cannot overlap). The dense part's last bucket (the
    // embedding's, or the first layer's) finishes with backward and is exposed; the experts'
    // buckets all finish before it.
    auto bucketed = [&](CollectiveOp op, double bytes_per_elem) {
      std::pair<double, double> c{0, 0};
      if (dp > 1 && Pd > 0) {
        const double nb = std::max(1.0, std::ceil(Pd / std::max(bucket_elems, lp_dense)));
        const double last = std::min(Pd, std::max(bucket_elems, st.first_group));
        c.first = collective_cost(op, Pd * bytes_per_elem / nb, dp, tp, cluster).seconds * nb;
        c.second =
            std::min(c.first, collective_cost(op, last * bytes_per_elem, dp, tp, cluster).seconds);
      }
      if (edp > 1 && Pe > 0) {
        const double nb = std::max(1.0, std::ceil(Pe / std::max(bucket_elems, s.expert_params)));
        c.first +=
            collective_cost(op, Pe * bytes_per_elem / nb, edp, edp_stride, cluster).seconds * nb;
      }
      return c;
    };
    auto exposed = [&](std::pair<double, double> c, double window) {
      return std::max(0.0, c.first - c.second - dp_overlap_frac * window) + c.second;
    };
    double total = 0, exp = 0;
    const double bwd_window = st.bwd_s + st.recompute_s;
    if (dp > 1) {
      if (p.zero <= 1) {
        const auto ar = bucketed(CollectiveOp::all_reduce, grad_bytes);
        total += ar.first;
        exp += exposed(ar, bwd_window);
      } else {
        const auto rs = bucketed(CollectiveOp::reduce_scatter, grad_bytes);
        total += static_cast<double>(m) * rs.first;
        exp += static_cast<double>(m) * exposed(rs, bwd_window);
      }
      if (p.zero == 1 || p.zero == 2) {  // updated parameters gathered after the step (f32)
        const double ag =
            collective_cost(CollectiveOp::all_gather, Pd * 4, dp, tp, cluster).seconds +
            collective_cost(CollectiveOp::all_gather, Pe * 4, edp, edp_stride, cluster).seconds;
        total += ag;
        exp += ag;
      }
      if (p.zero == 3) {  // gathered per bucket on use, forward and backward, next one prefetched
        const auto ag = bucketed(CollectiveOp::all_gather, 4);
        total += 2 * static_cast<double>(m) * ag.first;
        exp += static_cast<double>(m) * (exposed(ag, st.fwd_s) + exposed(ag, bwd_window));
      }
    }
    // Tied embedding split over the first and last stage: its gradients are summed.
    if (pp > 1 && s.tied && (st.embedding || st.head)) {
      const double t =
          collective_cost(CollectiveOp::all_reduce, s.V * s.c * 4, 2, tp * dp * (pp - 1), cluster)
              .seconds;
      total += t;
      exp += t;
    }
    // Under sp the gradients of what every tp rank holds whole are partial sums over its rows:
    // one all-reduce over tp after backward (ModelParallel::finish_gradients). Small for a dense
    // model (norms); an MoE model's experts are among them.
    double tp_sum = 0;
    if (s.sp)
      tp_sum = collective_cost(CollectiveOp::all_reduce, st.tp_summed * 4, tp, 1, cluster).seconds;
    const double shard =
        p.zero >= 1 ? Pd / static_cast<double>(dp) + Pe / static_cast<double>(edp) : P;
    const double grads_held = p.zero >= 2 ? shard : P;
    const double opt_bytes = kAdamW * shard + kGradNorm * grads_held +
                             (p.zero >= 2 ? 0 : kZeroGrads * P) + (lowp ? kToLowp * P : 0);
    const double opt = opt_bytes / r.mem;
    if (exp + tp_sum + opt > tail) {
      tail = exp + tp_sum + opt;
      dp_total = total;
      dp_exposed = exp;
      tp_grad_sum_s = tp_sum;
      opt_s = opt;
      if (explain) {
        const CollectiveOp shown_op =
            p.zero <= 1 ? CollectiveOp::all_reduce : CollectiveOp::reduce_scatter;
        const double nb = std::max(1.0, std::ceil(Pd / std::max(bucket_elems, lp_dense)));
        const CollectiveCost b =
            collective_cost(shown_op, std::max(1.0, Pd * grad_bytes / nb), dp, tp, cluster);
        dp_line = fmt(
            "dp (stage %zu): %.4g M parameters%s, %s over %lld ranks (%s, %s, %.4g GB/s) in "
            "%.0f bucket(s)%s = %.4g ms; overlapped with backward (%.3g ms, overlap %.2f) -> "
            "exposed %.4g ms",
            i, P / 1e6, Pe > 0 ? fmt(" (%.4g M of them experts)", Pe / 1e6).c_str() : "",
            p.zero <= 1   ? "gradient all-reduce"
            : p.zero == 2 ? "reduce-scatter per micro-batch"
                          : "reduce-scatter + parameter all-gathers per micro-batch",
            (long long)dp, b.inter_node ? cluster.inter.kind.c_str() : cluster.intra.kind.c_str(),
            b.algorithm, b.bandwidth / 1e9, nb,
            Pe > 0 ? fmt(", the experts' over edp %lld", (long long)edp).c_str() : "", ms(total),
            ms(bwd_window), dp_overlap_frac, ms(exp));
        if (s.sp)
          tp_sum_line = fmt(
              "tp gradient sums under sp (stage %zu): all-reduce of %.4g M replicated parameters "
              "over %lld ranks after backward = %.3f ms",
              i, st.tp_summed / 1e6, (long long)tp, ms(tp_sum));
        opt_line =
            fmt("optimizer: AdamW over %.4g M parameters (%.0f B each) + grad norm %s = "
                "%.4g MB at %.4g GB/s = %.3f ms",
                shard / 1e6, kAdamW, lowp ? "+ 16-bit refresh" : "", opt_bytes / 1e6, r.mem / 1e9,
                ms(opt));
      }
    }
  }
  // Per-step scalars: loss mean over dp, global grad norm over dp/tp/pp.
  double scalars = 0;
  if (dp > 1) scalars += 2 * collective_cost(CollectiveOp::all_reduce, 4, dp, tp, cluster).seconds;
  if (tp > 1) scalars += collective_cost(CollectiveOp::all_reduce, 8, tp, 1, cluster).seconds;
  if (pp > 1)
    scalars += 3 * collective_cost(CollectiveOp::all_reduce, 8, pp, tp * dp, cluster).seconds;
  // The experts' part of the norm over the ep group (their gradients differ there; ZeRO-0/1).
  if (s.moe && ep > 1 && p.zero <= 1)
    scalars += collective_cost(CollectiveOp::all_gather, 8.0 * ep, ep, tp, cluster).seconds;

  // ---- totals ----
  const double md = static_cast<double>(m);
  e.step_s = pipe_s + tail + scalars;
  e.compute_s = md * hot.compute_s;
  e.recompute_s = md * hot.recompute_s;
  e.optimizer_s = opt_s;
  e.tp_comm_s = md * hot.tp_s + tp_grad_sum_s;
  e.ep_comm_s = md * hot.ep_s;
  const double layers_hot = static_cast<double>(hot.layers);
  e.cp_comm_s = md * layers_hot * (cpx.fwd_s + cpx.bwd_s);
  e.cp_hidden_s = e.cp_comm_s - md * hot.cp_s;
  e.pp_comm_s = pp > 1 ? md * 2 * static_cast<double>(v) * p2p.seconds : 0;
  e.dp_comm_s = dp_total;
  e.comm_exposed_s =
      md * (hot.tp_s + hot.ep_s + hot.cp_s + hot.p2p_s) + dp_exposed + tp_grad_sum_s + scalars;
  e.bubble_s = std::max(0.0, e.step_s - e.compute_s - e.comm_exposed_s - e.optimizer_s);
  const double tokens = s.n * md * static_cast<double>(dp);
  e.tokens_per_s = tokens / e.step_s;
  e.model_flops = model_flops_per_token(model, tr.seq_len) * tokens;
  double hw = 0;
  for (const StageWork& st : stages) hw += st.flops;
  e.hardware_flops = hw * md * static_cast<double>(tp * dp);
  e.mfu = e.model_flops / (e.step_s * static_cast<double>(world) * peak);
  e.flops_per_rank_s = e.hardware_flops / (e.step_s * static_cast<double>(world));
  if (explain) {
    if (!dp_line.empty() && dp > 1) e.explain.push_back(dp_line);
    if (!tp_sum_line.empty()) e.explain.push_back(tp_sum_line);
    e.explain.push_back(opt_line);
    e.explain.push_back(
        fmt("step = pipeline %.4g s + dp exposed %.4g s + tp gradient sums %.3g ms + optimizer "
            "%.4g s + "
            "scalar reductions %.3g ms = %.4g s; %.4g tokens -> %.4g tokens/s",
            pipe_s, dp_exposed, ms(tp_grad_sum_s), opt_s, ms(scalars), e.step_s, tokens,
            e.tokens_per_s));
    e.explain.push_back(
        fmt("MFU = (6N + 12 L C T) = %.4g GFLOP/token x %.4g tokens / (%.4g s x %lld ranks x %.4g "
            "TFLOP/s peak) = %.1f%%; executed %.4g TFLOP/s per rank (recompute included)",
            model_flops_per_token(model, tr.seq_len) / 1e9, tokens, e.step_s, (long long)world,
            peak / 1e12, 100 * e.mfu, e.flops_per_rank_s / 1e12));
  }
  return e;
}

}  // namespace strata
