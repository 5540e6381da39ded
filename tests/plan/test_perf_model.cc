// The performance model (plan/perf_model.h): pipeline bubble formulas against the schedule
// simulator, FLOP counts, MFU, speed, and published large-scale runs.
//
// STRATA_PLAN_PUBLISHED_MD=FILE writes the published-run comparison as a markdown table.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "parallel/pipeline_schedule.h"
#include "parallel/pipeline_sim.h"
#include "plan/cluster_profile.h"
#include "plan/collectives.h"
#include "plan/perf_model.h"
#include "run/config.h"

namespace strata {
namespace {

RunConfig config(const std::string& toml, const std::vector<std::string>& overrides = {}) {
  return parse_config(toml + "\n[data]\nsource = \"synthetic\"\n", "test", overrides);
}

// A GPT-3-style model of Narayanan et al. 2021 (vocabulary 51200, sequence 2048, fp16, full
// recomputation, micro-batch 1, interleaved schedule).
RunConfig megatron_gpt(int64_t layers, int64_t hidden, int64_t heads, int64_t tp, int64_t pp,
                       int64_t dp, int64_t global_batch, int64_t vpp) {
  char buf[1024];
  std::snprintf(buf, sizeof buf,
                "[model]\nfamily = \"gpt2\"\nn_layer = %lld\nd_model = %lld\nn_head = %lld\n"
                "vocab_size = 51200\nmax_seq_len = 2048\n"
                "[train]\nbatch_size = 1\nseq_len = 2048\nprecision = \"fp16\"\n"
                "recompute = \"full\"\n"
                "[parallel]\ntp = %lld\npp = %lld\ndp = %lld\nvpp = %lld\nschedule = \"%s\"\n"
                "micro_batches = %lld\n",
                (long long)layers, (long long)hidden, (long long)heads, (long long)tp,
                (long long)pp, (long long)dp, (long long)vpp, vpp > 1 ? "interleaved" : "1f1b",
                (long long)(global_batch / dp));
  return config(buf);
}

// Megatron-LM's FLOPs per iteration (Narayanan et al. 2021, appendix; recomputation included):
// 96 B s l h^2 (1 + s / 6h + V / 16 l h).
double megatron_flops(double B, double s, double l, double h, double V) {
  return 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
}

// Megatron-Core's count for its MoE runs (megatron/training/training.py,
// num_floating_point_operations, MCore 0.9): forward and backward without recomputation, query
// groups g of a heads, a token through k experts of width F (SwiGLU: x 3/2), full (not causal)
// attention:
//   12 B s l h^2 ((1 + g/a + s/h) + F/h k 3/2 + V / (2 l h)).
double megatron_moe_flops(const ModelConfig& m, double B, double s) {
  const double h = static_cast<double>(m.d_model), l = static_cast<double>(m.n_layer);
  const double g = static_cast<double>(m.kv_heads()), a = static_cast<double>(m.n_head);
  const double F = static_cast<double>(m.expert_ffn()), k = static_cast<double>(m.moe.top_k);
  const double V = static_cast<double>(m.vocab_size);
  return 12 * B * s * l * h * h * ((1 + g / a + s / h) + F / h * k * 1.5 + V / (2 * l * h));
}

// A Mixtral-style model small enough to test quickly (f32: what strata's engine trains).
RunConfig small_moe(const std::vector<std::string>& overrides = {}) {
  return config(
      "[model]\nfamily = \"mixtral\"\nn_layer = 8\nn_head = 16\nn_kv_head = 8\nd_model = 2048\n"
      "vocab_size = 32000\nmax_seq_len = 2048\nattention = \"flash\"\n[model.moe]\nexperts = 8\n"
      "top_k = 2\nexpert_ffn = 4096\n[train]\nbatch_size = 2\nseq_len = 2048\ngrad_accum = 4\n",
      overrides);
}

// Expert parallelism: per MoE layer and micro-batch, a counts all-gather and two all-to-alls of
// the rank's routed rows (n x top_k x C f32) forward, two backward, all exposed unless shared
// experts run beside the first of each direction on a link that overlaps.
TEST(PerfModel, ExpertParallelExchange) {
  const ClusterProfile h100 = load_cluster_profile("h100");
  const StepEstimate ep1 = estimate_step(small_moe(), 8, h100);
  EXPECT_EQ(ep1.ep_comm_s, 0.0);
  const StepEstimate ep8 = estimate_step(small_moe({"parallel.ep=8"}), 8, h100);
  const double rows = 2 * 2048, bytes = rows * 2 * 2048 * 4;
  const double a2a = collective_cost(CollectiveOp::all_to_all, bytes, 8, 1, h100).seconds;
  const double counts = collective_cost(CollectiveOp::all_gather, 8 * 8 * 4, 8, 1, h100).seconds;
  EXPECT_GT(a2a, 0);
  EXPECT_NEAR(ep8.ep_comm_s / (4 * 8 * (counts + 4 * a2a)), 1.0, 1e-12);  // m 4 x 8 layers
  EXPECT_GT(ep8.comm_exposed_s, ep1.comm_exposed_s - ep1.dp_comm_s);
  // The experts' gradients are not reduced at all with ep = dp (edp 1), and their optimizer state
  // is 1/8 per rank: less data-parallel traffic and a faster optimizer step.
  EXPECT_LT(ep8.dp_comm_s, 0.5 * ep1.dp_comm_s);
  const StepEstimate ep8z1 =
      estimate_step(small_moe({"parallel.ep=8", "parallel.zero=1"}), 8, h100);
  const StepEstimate ep1z1 = estimate_step(small_moe({"parallel.zero=1"}), 8, h100);
  EXPECT_LT(ep8z1.dp_comm_s, ep1z1.dp_comm_s);
  EXPECT_LT(ep8.optimizer_s, ep1.optimizer_s);
  // Executed FLOPs do not depend on ep (balanced routing: each rank's experts run n x top_k rows).
  EXPECT_NEAR(ep8.hardware_flops / ep1.hardware_flops, 1.0, 1e-12);
  // ep 8 over two nodes (tp 2 puts 4 ep ranks on a node): the network carries half the exchange.
  const StepEstimate spread =
      estimate_step(small_moe({"parallel.ep=8", "parallel.tp=2", "parallel.sp=true"}), 16, h100);
  EXPECT_GT(spread.ep_comm_s, 3 * ep8.ep_comm_s / 2);

  // Shared experts hide part of the exchange on NVLink (overlap 1), none on this machine's shared
  // memory (overlap 0: the copies take the cores that compute).
  const std::vector<std::string> shared = {"parallel.ep=8", "model.moe.shared_experts=1",
                                           "model.moe.shared_ffn=4096"};
  const StepEstimate hidden = estimate_step(small_moe(shared), 8, h100);
  EXPECT_LT(hidden.ep_comm_s, ep8.ep_comm_s);
  EXPECT_GE(hidden.ep_comm_s, ep8.ep_comm_s / 2);  // the returning exchanges stay exposed
  const ClusterProfile cpu = load_cluster_profile("cpu-local");
  const StepEstimate cpu_plain = estimate_step(small_moe({"parallel.ep=8"}), 8, cpu);
  const StepEstimate cpu_shared = estimate_step(small_moe(shared), 8, cpu);
  EXPECT_DOUBLE_EQ(cpu_shared.ep_comm_s, cpu_plain.ep_comm_s);
  bool explained = false;
  for (const std::string& line : hidden.explain) explained |= line.rfind("ep per layer", 0) == 0;
  EXPECT_TRUE(explained);
}

// A Llama-3-8B-shaped model (4 of its 32 layers, to keep the test quick) at a 32K sequence.
RunConfig long_llama(const std::vector<std::string>& overrides = {}) {
  return config(
      "[model]\nfamily = \"llama\"\nn_layer = 4\nn_head = 32\nn_kv_head = 8\nd_model = 4096\n"
      "d_ff = 14336\nvocab_size = 128256\nmax_seq_len = 32768\nattention = \"flash\"\n"
      "[train]\nbatch_size = 1\nseq_len = 32768\nprecision = \"bf16\"\ngrad_accum = 2\n",
      overrides);
}

// Context parallelism: each of the cp ranks holds 1/cp of every sequence and computes 1/cp of its
// causal attention; the ring's key/value blocks travel beside each step's attention (hidden on
// NVLink at a long sequence, except each layer's last gradient block, which goes home after the
// loop), Ulysses' all-to-alls are all exposed, and a ring across nodes at a short sequence is not
// hidden.
TEST(PerfModel, ContextParallelism) {
  const ClusterProfile h100 = load_cluster_profile("h100");
  const StepEstimate cp1 = estimate_step(long_llama(), 8, h100);                   // 8 replicas
  const StepEstimate cp2 = estimate_step(long_llama({"parallel.cp=2"}), 8, h100);  // 4 x cp 2
  EXPECT_EQ(cp1.cp_comm_s, 0.0);
  // Half the rows and half the attention per rank at the same micro-batches: half the compute
  // (attention is more than half of a layer's FLOPs here: with the local rows' own triangle the
  // ratio would be about 0.4, without dividing it by cp about 0.75).
  EXPECT_GT(cp2.compute_s / cp1.compute_s, 0.5);
  EXPECT_LT(cp2.compute_s / cp1.compute_s, 0.51);
  // So the executed FLOPs per token do not change, and MFU counts the whole sequence's attention
  // (the trainer's Decoder::train_flops_per_token).
  auto per_token = [](const StepEstimate& e) {
    return e.hardware_flops / (e.tokens_per_s * e.step_s);
  };
  EXPECT_NEAR(per_token(cp2) / per_token(cp1), 1.0, 1e-9);
  const ModelConfig& m = long_llama().model;
  EXPECT_NEAR(cp2.model_flops / (cp2.tokens_per_s * cp2.step_s), model_flops_per_token(m, 32768),
              1e-3 * model_flops_per_token(m, 32768));
  // Ring on NVLink: per layer and micro-batch 1 block forward, 1 + 2 backward, all hidden but the
  // last gradient block (m 2 x 4 layers).
  const double block = 16384.0 * 2 * 8 * 128 * 4;  // local rows x k|v of 8 kv heads, f32
  const double send = ring_exchange_cost(block, 2, 1, h100).seconds;
  EXPECT_NEAR(cp2.cp_comm_s / (2 * 4 * 4 * send), 1.0, 1e-12);
  EXPECT_NEAR((cp2.cp_comm_s - cp2.cp_hidden_s) / (2 * 4 * send), 1.0, 1e-9);
  EXPECT_NEAR(cp2.compute_s + cp2.comm_exposed_s + cp2.bubble_s + cp2.optimizer_s, cp2.step_s,
              1e-9);
  bool explained = false;
  for (const std::string& line : cp2.explain)
    explained |= line.rfind("cp per layer (ring)", 0) == 0;
  EXPECT_TRUE(explained);
  // cp 4 and 8 inside the node: a quarter, an eighth of the attention; still hidden.
  const StepEstimate cp8 = estimate_step(long_llama({"parallel.cp=8"}), 8, h100);
  EXPECT_LT(cp8.compute_s, 0.13 * cp1.compute_s);
  EXPECT_NEAR(per_token(cp8) / per_token(cp1), 1.0, 1e-9);

  // This machine's shared memory moves data with the cores that compute (overlap 0): nothing hides.
  const StepEstimate cpu =
      estimate_step(long_llama({"parallel.cp=2"}), 2, load_cluster_profile("cpu-local"));
  EXPECT_GT(cpu.cp_comm_s, 0.0);
  EXPECT_EQ(cpu.cp_hidden_s, 0.0);

  // Ulysses: q|k|v and the output all-to-all'd once forward, twice backward, none hidden.
  const StepEstimate u =
      estimate_step(long_llama({"parallel.cp=2", "parallel.cp_impl=ulysses"}), 8, h100);
  const double a2a =
      collective_cost(CollectiveOp::all_to_all, 16384.0 * (32 + 16) * 128 * 4, 2, 1, h100).seconds +
      collective_cost(CollectiveOp::all_to_all, 16384.0 * 32 * 128 * 4, 2, 1, h100).seconds;
  EXPECT_NEAR(u.cp_comm_s / (2 * 4 * 3 * a2a), 1.0, 1e-12);
  EXPECT_EQ(u.cp_hidden_s, 0.0);
  EXPECT_NEAR(per_token(u) / per_token(cp1), 1.0, 1e-9);

  // tp 8 x cp 2 on 16 GPUs: each cp rank on its own node, and at 4K rows a step's attention is
  // shorter than a block's trip over InfiniBand: exposed beyond the last gradient blocks.
  const std::vector<std::string> far = {"parallel.cp=2", "parallel.tp=8", "parallel.sp=true",
                                        "train.seq_len=4096"};
  const StepEstimate spread = estimate_step(long_llama(far), 16, h100);
  const double ib = ring_exchange_cost(2048.0 * 2 * 1 * 128 * 4, 2, 8, h100).seconds;
  EXPECT_TRUE(ring_exchange_cost(1, 2, 8, h100).inter_node);
  EXPECT_NEAR(spread.cp_comm_s / (2 * 4 * 4 * ib), 1.0, 1e-12);
  EXPECT_GT(spread.cp_comm_s - spread.cp_hidden_s, 2 * 4 * 2 * ib);
}

// More ranks than cores on one machine (mpirun --oversubscribe, a calibrated profile of max_nodes
// 1): they share its cores on one node, not a second node of the same machine.
TEST(PerfModel, OversubscribedRanksShareTheMachinesCores) {
  ClusterProfile box = load_cluster_profile("cpu-local");
  box.device.cores = 2;
  box.gpus_per_node = 2;
  box.max_nodes = 1;
  box.device.available_cores = 0;
  const StepEstimate two = estimate_step(small_moe({"system.threads=1", "parallel.ep=2"}), 2, box);
  const StepEstimate four =
      estimate_step(small_moe({"system.threads=1", "parallel.ep=2", "train.batch_size=1"}), 4, box);
  bool placed = false, shared = false;
  for (const std::string& line : four.explain) {
    placed |= line.find("= 4 ranks on 1 node(s) of 4") != std::string::npos;
    shared |= line.find("0.50 cores (threads 1, 4 rank(s) on 2 cores") != std::string::npos;
  }
  EXPECT_TRUE(placed && shared);
  // Half the rows per rank at half a core each: about the time of two ranks with a core each.
  EXPECT_NEAR(four.compute_s / two.compute_s, 1.0, 0.1);
}

// The MoE FFN is replicated over tp: without sp every tp rank runs it on all rows (redundant
// work), with sp on its own 1/tp of them; only the attention half of an MoE layer has tp
// collectives; under sp the experts' gradients are summed over tp after backward.
TEST(PerfModel, MixtureOfExpertsWithTensorAndPipelineParallelism) {
  const ClusterProfile h100 = load_cluster_profile("h100");
  const StepEstimate tp1 = estimate_step(small_moe(), 8, h100);
  const StepEstimate tp2 = estimate_step(small_moe({"parallel.tp=2"}), 8, h100);
  const StepEstimate sp2 = estimate_step(small_moe({"parallel.tp=2", "parallel.sp=true"}), 8, h100);
  EXPECT_GT(tp2.compute_s, 0.6 * tp1.compute_s);  // attention halves, the experts do not
  EXPECT_LT(sp2.compute_s, 0.6 * tp1.compute_s);  // everything halves, about
  // Executed FLOPs per token (tp 2 has dp 4: half the tokens of tp 1's dp 8): the redundant
  // experts counted without sp.
  auto per_token = [](const StepEstimate& e) {
    return e.hardware_flops / (e.tokens_per_s * e.step_s);
  };
  EXPECT_GT(per_token(tp2), 1.2 * per_token(tp1));
  EXPECT_NEAR(per_token(sp2) / per_token(tp1), 1.0, 0.01);
  // Half the collectives of a dense layer of the same attention: compare with llama.
  RunConfig dense = small_moe({"parallel.tp=2"});
  dense.model.family = ModelFamily::llama;
  dense.model.moe = MoeConfig{};
  dense.model.d_ff = 8192;
  const StepEstimate llama = estimate_step(dense, 8, h100);
  EXPECT_LT(tp2.tp_comm_s, 0.6 * llama.tp_comm_s);
  EXPECT_GT(tp2.tp_comm_s, 0.4 * llama.tp_comm_s);
  // Under sp, the experts' gradients (replicated over tp, partial sums) cost an all-reduce.
  EXPECT_GT(sp2.tp_comm_s, 0.0);
  bool summed = false;
  for (const std::string& line : sp2.explain) summed |= line.find("tp gradient sums") == 0;
  EXPECT_TRUE(summed);
  // A pipeline with expert parallelism: the stages' exchanges, and a bubble.
  const StepEstimate pp2 =
      estimate_step(small_moe({"parallel.pp=2", "parallel.ep=4", "train.grad_accum=8"}), 8, h100);
  EXPECT_GT(pp2.ep_comm_s, 0.0);
  EXPECT_GT(pp2.bubble_s, 0.0);
  EXPECT_NEAR(pp2.compute_s + pp2.comm_exposed_s + pp2.bubble_s + pp2.optimizer_s, pp2.step_s,
              1e-9);
}

TEST(PerfModel, PipelineTimeReproducesTheBubbleFormulas) {
  for (int p : {1, 2, 4, 8}) {
    for (int m : {1, 4, 8, 16}) {
      for (int v : {1, 2, 4}) {
        if (v > 1 && (p == 1 || m % p != 0)) continue;
        const double t = 3.0;
        const double T = pipeline_time(std::vector<double>(static_cast<size_t>(p), t), m, v);
        // Ideal m t plus the bubble (p-1)/(v m) of it ...
        EXPECT_NEAR(T, m * t * (1.0 + double(p - 1) / double(v * m)), 1e-12);
        // ... whose share of the whole is the schedule's idle fraction.
        const ScheduleKind kind = v > 1 ? ScheduleKind::interleaved : ScheduleKind::one_f_one_b;
        EXPECT_NEAR((T - m * t) / T, bubble_formula(kind, p, m, v), 1e-12);
        if (v == 1) {
          EXPECT_NEAR((T - m * t) / T, bubble_formula(ScheduleKind::gpipe, p, m, 1), 1e-12);
        }
      }
    }
  }
}

TEST(PerfModel, PipelineTimeAgreesWithTheSimulator) {
  // Per chunk: forward 1, backward 2; a stage of v chunks takes 3 v per micro-batch.
  for (int p : {2, 3, 4}) {
    for (int m : {4, 8, 12}) {
      for (int v : {1, 2, 3}) {
        if (v > 1 && m % p != 0) continue;
        const ScheduleKind kind = v > 1 ? ScheduleKind::interleaved : ScheduleKind::one_f_one_b;
        const SimResult sim = simulate(make_schedules(kind, p, m, v), p, m, v, 1.0, 2.0);
        ASSERT_TRUE(sim.ok());
        const double T = pipeline_time(std::vector<double>(static_cast<size_t>(p), 3.0 * v), m, v);
        EXPECT_NEAR(sim.makespan, T, 1e-9) << "p " << p << " m " << m << " v " << v;
        if (v == 1) {
          const SimResult g = simulate(make_schedules(ScheduleKind::gpipe, p, m, 1), p, m, 1, 1, 2);
          EXPECT_NEAR(g.makespan, T, 1e-9);
        }
      }
    }
  }
  // Unequal stages (the last holds the head): m * max + the others once.
  EXPECT_DOUBLE_EQ(pipeline_time({1.0, 2.0}, 4, 1), 4 * 2.0 + 1.0);
}

TEST(PerfModel, FlopsPerTokenOfGpt2) {
  RunConfig c = config(
      "[model]\nn_layer = 12\nn_head = 12\nd_model = 768\nvocab_size = 50304\nmax_seq_len = 1024\n"
      "[train]\nbatch_size = 4\nseq_len = 1024\nprecision = \"bf16\"\n");
  const ModelConfig& m = c.model;
  const double N = static_cast<double>(m.num_params(false));
  EXPECT_DOUBLE_EQ(model_flops_per_token(m, 1024), 6 * N + 12.0 * 12 * 768 * 1024);
  const ClusterProfile cl = load_cluster_profile("a100");
  const StepEstimate e = estimate_step(c, 1, cl);
  const double tokens = 4 * 1024;
  EXPECT_DOUBLE_EQ(e.model_flops, (6 * N + 12.0 * 12 * 768 * 1024) * tokens);
  // Executed: the GEMMs (6 x the matrix parameters, the tied head once) and causal attention,
  // half of the 12 L h s term: within 1% of 6N + 6 L h (s + 1).
  const double executed = 6 * N + 6.0 * 12 * 768 * 1025;
  EXPECT_NEAR(e.hardware_flops / tokens / executed, 1.0, 0.01);
  // MFU = model FLOPs / (step x ranks x peak).
  EXPECT_NEAR(e.mfu, e.model_flops / (e.step_s * 312e12), 1e-12);
  EXPECT_GT(e.mfu, 0.2);
  EXPECT_LT(e.mfu, cl.device.gemm_efficiency);
  EXPECT_NEAR(e.tokens_per_s, tokens / e.step_s, 1e-9);
  // The shares add up to the step.
  EXPECT_NEAR(e.compute_s + e.comm_exposed_s + e.bubble_s + e.optimizer_s, e.step_s, 1e-9);
  EXPECT_FALSE(e.explain.empty());
}

// Mixtral 8x7B: 46.7B parameters, of which a token runs through 12.9B (2 of 8 experts). MFU
// and the executed GEMMs count the active ones (and the router).
TEST(PerfModel, FlopsPerTokenOfMixtral) {
  RunConfig c = config(
      "[model]\nfamily = \"mixtral\"\nn_layer = 32\nn_head = 32\nn_kv_head = 8\n"
      "d_model = 4096\nd_ff = 14336\nvocab_size = 32000\nmax_seq_len = 4096\n"
      "tie_embeddings = false\nattention = \"flash\"\n[model.moe]\nexperts = 8\n"
      "[train]\nbatch_size = 1\nseq_len = 4096\n");
  const ModelConfig& m = c.model;
  EXPECT_NEAR(static_cast<double>(m.num_params()), 46.70e9, 0.01e9);
  const double N = static_cast<double>(m.num_active_params(false));
  EXPECT_NEAR(N, 12.88e9, 0.01e9);
  EXPECT_DOUBLE_EQ(model_flops_per_token(m, 4096), 6 * N + 12.0 * 32 * 4096 * 4096);
  const StepEstimate e = estimate_step(c, 8, load_cluster_profile("h100"));
  const double executed = 6 * N + 6.0 * 32 * 4096 * 4097;
  EXPECT_NEAR(e.hardware_flops / (8 * 4096) / executed, 1.0, 0.01);  // dp 8, 4096 tokens each
}

TEST(PerfModel, LlamaFamilyAndGqa) {
  RunConfig c = config(
      "[model]\nfamily = \"llama\"\nn_layer = 32\nn_head = 32\nn_kv_head = 8\nd_model = 4096\n"
      "d_ff = 14336\nvocab_size = 128256\nmax_seq_len = 8192\nattention = \"flash\"\n"
      "[train]\nbatch_size = 1\nseq_len = 8192\nprecision = \"bf16\"\ngrad_accum = 8\n"
      "[parallel]\ntp = 8\n");
  const ClusterProfile cl = load_cluster_profile("h100");
  const StepEstimate e = estimate_step(c, 64, cl);  // dp = 8
  EXPECT_GT(e.mfu, 0.2);
  EXPECT_LT(e.mfu, 0.7);
  EXPECT_GT(e.tp_comm_s, 0);
  EXPECT_GT(e.dp_comm_s, 0);
  EXPECT_NEAR(e.tokens_per_s, 8192.0 * 8 * 8 / e.step_s, 1e-6);
}

TEST(PerfModel, CommunicationAndOverlapBehaveSensibly) {
  const std::string base =
      "[model]\nn_layer = 24\nn_head = 16\nd_model = 2048\nvocab_size = 50304\n"
      "max_seq_len = 2048\n[train]\nbatch_size = 4\nseq_len = 2048\nprecision = \"bf16\"\n"
      "grad_accum = 2\n";
  const ClusterProfile cl = load_cluster_profile("a100");
  const StepEstimate overlapped = estimate_step(config(base), 64, cl);
  const StepEstimate serial = estimate_step(config(base, {"parallel.overlap=false"}), 64, cl);
  EXPECT_GT(serial.comm_exposed_s, overlapped.comm_exposed_s);
  EXPECT_DOUBLE_EQ(serial.dp_comm_s, overlapped.dp_comm_s);
  const StepEstimate bf16 =
      estimate_step(config(base, {"parallel.grad_reduce_dtype=bf16"}), 64, cl);
  EXPECT_NEAR(bf16.dp_comm_s / overlapped.dp_comm_s, 0.5, 0.05);
  const StepEstimate zero3 = estimate_step(config(base, {"parallel.zero=3"}), 64, cl);
  EXPECT_GT(zero3.dp_comm_s, 2 * overlapped.dp_comm_s);
  EXPECT_LT(zero3.optimizer_s, overlapped.optimizer_s);  // AdamW over a 1/64 shard
  // Recomputation costs about one forward (a third of forward + backward).
  const StepEstimate full = estimate_step(config(base, {"train.recompute=full"}), 64, cl);
  EXPECT_NEAR(full.recompute_s / (full.compute_s - full.recompute_s), 1.0 / 3, 0.05);
  // tp = 8 inside a node beats tp = 16 across two.
  const StepEstimate tp8 = estimate_step(config(base, {"parallel.tp=8"}), 64, cl);
  const StepEstimate tp16 = estimate_step(config(base, {"parallel.tp=16"}), 64, cl);
  EXPECT_LT(tp8.tp_comm_s, tp16.tp_comm_s);
  // A bad layout names the keys.
  try {
    estimate_step(config(base, {"parallel.tp=8", "parallel.dp=3"}), 64, cl);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("parallel.dp"), std::string::npos);
  }
}

TEST(PerfModel, FastEnoughForTheLayoutSearch) {
  const RunConfig c = megatron_gpt(128, 25600, 160, 8, 64, 6, 3072, 2);
  const ClusterProfile cl = load_cluster_profile("a100");
  const int calls = 20000;
  double sink = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < calls; ++i) sink += estimate_step(c, 3072, cl, false).step_s;
  const double us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
      calls;
  const auto t1 = std::chrono::steady_clock::now();
  for (int i = 0; i < calls / 10; ++i) sink += estimate_step(c, 3072, cl, true).step_s;
  const double us_explain =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t1).count() /
      (calls / 10);
  std::printf(
      "estimate_step (1T on 3072 GPUs, pp 64 x vpp 2): %.2f us per call, %.2f us with "
      "the explanation\n",
      us, us_explain);
  EXPECT_GT(sink, 0);
  EXPECT_LT(us, 50);
  EXPECT_LT(us_explain, 200);
}

struct Published {
  std::string run, layout, source;
  RunConfig config;
  int64_t gpus;
  ClusterProfile cluster;
  double tflops;     // per GPU, as published (Megatron's formula: recomputation included) or -1
  double mfu;        // as published, or -1
  bool moe = false;  // Megatron-Core's MoE formula (megatron_moe_flops) instead
};

TEST(PerfModel, PublishedRuns) {
  std::vector<Published> runs;
  const ClusterProfile selene = load_cluster_profile("a100");
  runs.push_back({"GPT 175B (Megatron-LM)", "tp 8 pp 8 dp 16, batch 1536, mb 1, vpp 2",
                  "Narayanan et al. 2021, Table 1", megatron_gpt(96, 12288, 96, 8, 8, 16, 1536, 2),
                  1024, selene, 140, -1});
  runs.push_back({"GPT 1T (Megatron-LM)", "tp 8 pp 64 dp 6, batch 3072, mb 1, vpp 2",
                  "Narayanan et al. 2021, Table 1",
                  megatron_gpt(128, 25600, 160, 8, 64, 6, 3072, 2), 3072, selene, 163, -1});
  runs.push_back({"MT-NLG 530B", "tp 8 pp 35 dp 8, batch 1920, mb 1",
                  "Smith et al. 2022 (280 DGX A100 nodes)",
                  megatron_gpt(105, 20480, 128, 8, 35, 8, 1920, 1), 2240, selene, 126, -1});
  {
    // BLOOM: 4 Omni-Path 100 Gb/s cards per 8-GPU node on Jean Zay (50 Gb/s per GPU).
    ClusterProfile jz = selene;
    jz.name = "jean-zay-a100";
    jz.inter.kind = "omni-path";
    jz.inter.bandwidth = 6.25e9;
    RunConfig c = megatron_gpt(70, 14336, 112, 4, 12, 8, 2048, 1);
    c.model.vocab_size = 250880;
    c.train.batch_size = 2;
    c.parallel.micro_batches = 128;
    c.train.precision = Precision::bf16;
    c.parallel.zero = 1;
    runs.push_back({"BLOOM 176B", "tp 4 pp 12 dp 8 zero 1, batch 2048, mb 2",
                    "Le Scao et al. 2022 (~150 TFLOP/s per GPU)", c, 384, jz, 150, -1});
  }
  {
    RunConfig c = megatron_gpt(96, 12288, 96, 8, 1, 124, 992, 1);
    c.model.vocab_size = 50272;
    c.parallel.zero = 3;
    c.train.batch_size = 8;
    c.parallel.micro_batches = 1;
    runs.push_back({"OPT-175B", "tp 8 dp 124 (FSDP = ZeRO-3), batch 992, mb 8",
                    "Zhang et al. 2022 (147 TFLOP/s per GPU)", c, 992, selene, 147, -1});
  }
  {
    RunConfig c = config(
        "[model]\nfamily = \"llama\"\nn_layer = 128\nn_head = 128\nn_kv_head = 8\n"
        "d_model = 16384\nd_ff = 53248\nvocab_size = 128256\nmax_seq_len = 8192\n"
        "attention = \"flash\"\n[train]\nbatch_size = 1\nseq_len = 8192\nprecision = \"bf16\"\n"
        "[parallel]\ntp = 8\npp = 16\ndp = 128\nvpp = 8\nschedule = \"interleaved\"\n"
        "micro_batches = 16\nzero = 1\n");
    runs.push_back({"Llama 3 405B (126 layers; 128 here)", "tp 8 pp 16 dp 128 vpp 8, batch 2048",
                    "Dubey et al. 2024, Table 4 (38-43% BF16 MFU)", c, 16384,
                    load_cluster_profile("h100"), -1, 0.41});
  }
  {
    // Llama 3 405B's long-context stage, with context parallelism. Source: Dubey et al. 2024,
    // "The Llama 3 Herd of Models", https://arxiv.org/abs/2407.21783, Table 4 ("Scaling
    // configurations and MFU for each stage of Llama 3 405B pre-training"), third row: GPUs
    // 16,384, TP 8, CP 16, PP 16, DP 8, Seq. Len. 131,072, Batch size/DP 16, Tokens/Batch 16M,
    // TFLOPs/GPU 380, BF16 MFU 38%. H100 80GB (700 W), 8 per server on NVLink, 400 Gb/s RoCE per
    // GPU (h100-x8-ib400). MFU is PaLM's (6N + 12 L C T, full attention), as strata's. strata's dp
    // counts dp x cp = 128 ranks (8 data replicas); 16 sequences per replica and step as 16
    // micro-batches of 1 through the 16 stages, vpp 8 and 128 layers as in the 8K row above.
    // Meta's cp all-gathers k and v (then attends); strata's ring moves the same (cp-1)/cp of
    // them, in f32, block by block beside the attention.
    RunConfig c = config(
        "[model]\nfamily = \"llama\"\nn_layer = 128\nn_head = 128\nn_kv_head = 8\n"
        "d_model = 16384\nd_ff = 53248\nvocab_size = 128256\nmax_seq_len = 131072\n"
        "attention = \"flash\"\n[train]\nbatch_size = 1\nseq_len = 131072\nprecision = \"bf16\"\n"
        "[parallel]\ntp = 8\npp = 16\ndp = 128\ncp = 16\nvpp = 8\nschedule = \"interleaved\"\n"
        "micro_batches = 16\nzero = 1\n");
    runs.push_back({"Llama 3 405B, 128K context (cp 16)",
                    "tp 8 cp 16 pp 16 dp 8 vpp 8, batch 128 x 131072",
                    "Dubey et al. 2024, Table 4 (380 TFLOP/s, 38% BF16 MFU)", c, 16384,
                    load_cluster_profile("h100"), -1, 0.38});
  }
  {
    // Mixtral 8x7B, Megatron-Core's MoE README: "468 TFLOPS for Mixtral 8X7B bf16 training" (MCore
    // 0.9) with its reference mapping (MCore 0.8): 64 H100 (8 per node, NVLink 4, 8 x 400 Gb/s
    // InfiniBand), seq 4096, tp 1 ep 8 pp 4 "VP 8", micro-batch 1, global batch 256, dropless
    // all-to-all dispatcher, distributed optimizer (ZeRO-1). VP 8 is read as 8 virtual stages of
    // one layer each. strata's engine trains MoE in f32 on the CPU only so far: the config is
    // consistent, and its engine limits are what parse_config reports instead of failing.
    std::vector<std::string> limits;
    const RunConfig c = parse_config(
        "[model]\nfamily = \"mixtral\"\nn_layer = 32\nn_head = 32\nn_kv_head = 8\n"
        "d_model = 4096\nvocab_size = 32000\nmax_seq_len = 4096\ntie_embeddings = false\n"
        "attention = \"flash\"\n[model.moe]\nexperts = 8\ntop_k = 2\nexpert_ffn = 14336\n"
        "[train]\nbatch_size = 1\nseq_len = 4096\nprecision = \"bf16\"\n"
        "[parallel]\ntp = 1\npp = 4\ndp = 16\nep = 8\nvpp = 8\nschedule = \"interleaved\"\n"
        "micro_batches = 16\nzero = 1\n[data]\nsource = \"synthetic\"\n",
        "mixtral-8x7b", {}, &limits);
    EXPECT_EQ(limits.size(), 1u);  // bf16
    runs.push_back({"Mixtral 8x7B (Megatron-Core)", "tp 1 ep 8 pp 4 vpp 8, batch 256, mb 1",
                    "Megatron-Core MoE README (468 TFLOPS, MCore 0.9)", c, 64,
                    load_cluster_profile("h100"), 468, -1, true});
  }
  std::string md =
      "| run | GPUs | layout | published | predicted | ratio | step (pred.) | MFU (pred.) | "
      "source |\n|---|---|---|---|---|---|---|---|---|\n";
  for (const Published& r : runs) {
    const StepEstimate e = estimate_step(r.config, r.gpus, r.cluster);
    const ModelConfig& m = r.config.model;
    const double B = static_cast<double>(
        r.config.train.batch_size * r.config.parallel.micro_batches *
        (r.gpus / (r.config.parallel.tp * r.config.parallel.pp) / r.config.parallel.cp));
    const double mflops =
        r.moe ? megatron_moe_flops(m, B, static_cast<double>(r.config.train.seq_len))
              : megatron_flops(B, static_cast<double>(r.config.train.seq_len),
                               static_cast<double>(m.n_layer), static_cast<double>(m.d_model),
                               static_cast<double>(m.vocab_size));
    const double tflops = mflops / (e.step_s * static_cast<double>(r.gpus)) / 1e12;
    char line[768];
    if (r.tflops > 0) {
      std::snprintf(
          line, sizeof line,
          "| %s | %lld | %s | %.0f TFLOP/s | %.0f TFLOP/s | %.2f | %.2f s | %.1f%% | %s |\n",
          r.run.c_str(), (long long)r.gpus, r.layout.c_str(), r.tflops, tflops, tflops / r.tflops,
          e.step_s, 100 * e.mfu, r.source.c_str());
    } else if (r.config.parallel.cp > 1) {
      // At 128K the attention term is 57% of PaLM's 6N + 12 L C T, and whether the published MFU
      // counts it whole (PaLM, strata) or for the causal half the kernels compute (6 L C T) is not
      // said: both are shown.
      const double T = static_cast<double>(r.config.train.seq_len);
      const double full = model_flops_per_token(m, r.config.train.seq_len);
      const double causal_mfu =
          e.mfu * (full - 6.0 * static_cast<double>(m.n_layer * m.d_model) * T) / full;
      std::snprintf(line, sizeof line,
                    "| %s | %lld | %s | %.0f%% MFU | %.1f%% MFU (%.1f%% counting causal "
                    "attention) | %.2f (%.2f) | %.2f s | %.1f%% | %s |\n",
                    r.run.c_str(), (long long)r.gpus, r.layout.c_str(), 100 * r.mfu, 100 * e.mfu,
                    100 * causal_mfu, e.mfu / r.mfu, causal_mfu / r.mfu, e.step_s, 100 * e.mfu,
                    r.source.c_str());
      // The published MFU lies between the two readings of the prediction.
      EXPECT_GT(e.mfu, r.mfu) << r.run;
      EXPECT_LT(causal_mfu, r.mfu) << r.run;
      EXPECT_NEAR(causal_mfu / r.mfu, 1.0, 0.25) << r.run;
      for (const std::string& x : e.explain) std::printf("    %s\n", x.c_str());
    } else {
      std::snprintf(line, sizeof line,
                    "| %s | %lld | %s | %.0f%% MFU | %.1f%% MFU | %.2f | %.2f s | %.1f%% | %s |\n",
                    r.run.c_str(), (long long)r.gpus, r.layout.c_str(), 100 * r.mfu, 100 * e.mfu,
                    e.mfu / r.mfu, e.step_s, 100 * e.mfu, r.source.c_str());
    }
    md += line;
    // The two runs of Narayanan et al. 2021 (the brief's acceptance) and Megatron-Core's Mixtral
    // 8x7B (issue 21): within 25%. (Llama 3's context-parallel stage is checked above.)
    if (r.run.find("Megatron-LM") != std::string::npos || r.moe) {
      EXPECT_NEAR(tflops / r.tflops, 1.0, 0.25) << r.run;
      for (const std::string& x : e.explain) std::printf("    %s\n", x.c_str());
    }
  }
  std::printf("%s", md.c_str());
  if (const char* out = std::getenv("STRATA_PLAN_PUBLISHED_MD")) std::ofstream(out) << md;
}

}  // namespace
}  // namespace strata
