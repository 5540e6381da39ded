// The alpha-beta collective model (plan/collectives.h) and the cluster profiles it reads.
#include <gtest/gtest.h>
#include <toml++/toml.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.h"
#include "plan/calibrate.h"
#include "plan/cluster_profile.h"
#include "plan/collectives.h"

namespace strata {
namespace {

TEST(Collectives, FormulasOnSmallCases) {
  // n = 4, 1 MB, 1 GB/s, 1 us: ring all-reduce 2*3/4 * 1e-3 + 6 us.
  EXPECT_DOUBLE_EQ(ring_all_reduce_s(4, 1e6, 1e9, 1e-6), 1.5e-3 + 6e-6);
  EXPECT_DOUBLE_EQ(ring_all_reduce_s(2, 1e6, 1e9, 1e-6), 1e-3 + 2e-6);
  EXPECT_DOUBLE_EQ(ring_all_reduce_s(1, 1e6, 1e9, 1e-6), 0.0);
  // Reduce-scatter / all-gather: half the all-reduce's traffic and steps.
  EXPECT_DOUBLE_EQ(ring_gather_s(4, 1e6, 1e9, 1e-6), 0.75e-3 + 3e-6);
  EXPECT_DOUBLE_EQ(ring_gather_s(8, 8e6, 2e9, 0), 3.5e-3);
  EXPECT_DOUBLE_EQ(tree_all_reduce_s(3, 1e6, 1e9, 1e-6), 2e-3 + 6e-6);
  EXPECT_DOUBLE_EQ(send_s(1e6, 1e9, 1e-6), 1e-3 + 1e-6);
}

// Expert parallelism's exchange: every rank sends a block to every other at once, the blocks for
// its node's ranks over the intra-node link and the others through its own network card.
TEST(Collectives, AllToAll) {
  // One node (k = n): (n-1)/n of the buffer and n-1 latencies, the reduce-scatter ring's cost.
  EXPECT_DOUBLE_EQ(all_to_all_s(4, 4, 1e6, 1e9, 5e8, 1e-6), 0.75e-3 + 3e-6);
  EXPECT_DOUBLE_EQ(all_to_all_s(4, 4, 1e6, 1e9, 5e8, 1e-6), ring_gather_s(4, 1e6, 1e9, 1e-6));
  EXPECT_DOUBLE_EQ(all_to_all_s(1, 1, 1e6, 1e9, 1e9, 1e-6), 0.0);
  // 16 ranks, 8 per node: 7/16 on the node's link and 8/16 on the card, at the same time.
  EXPECT_DOUBLE_EQ(all_to_all_s(16, 8, 16e6, 100e9, 10e9, 0), 8e6 / 10e9);
  EXPECT_DOUBLE_EQ(all_to_all_s(16, 8, 16e6, 1e9, 100e9, 0), 7e6 / 1e9);
  // One rank per node: everything but its own block over the network.
  EXPECT_DOUBLE_EQ(all_to_all_s(4, 1, 4e6, 100e9, 1e9, 2e-6), 3e6 / 1e9 + 6e-6);

  const ClusterProfile c = load_cluster_profile("h100");
  // ep 8 with tp 1: the ep group is one node's 8 GPUs on NVLink.
  const CollectiveCost ep8 = collective_cost(CollectiveOp::all_to_all, 64e6, 8, 1, c);
  EXPECT_FALSE(ep8.inter_node);
  EXPECT_STREQ(ep8.algorithm, "pairwise");
  EXPECT_DOUBLE_EQ(ep8.seconds, ring_gather_s(8, 64e6, 450e9 * 0.8, 3e-6));
  // ep 8 with tp 2 (world-rank stride 2): 4 ranks per node on 2 nodes, half the buffer over the
  // 400 Gb/s cards: four times slower.
  const CollectiveCost spread = collective_cost(CollectiveOp::all_to_all, 64e6, 8, 2, c);
  EXPECT_TRUE(spread.inter_node);
  EXPECT_DOUBLE_EQ(spread.seconds, all_to_all_s(8, 4, 64e6, 450e9 * 0.8, 50e9 * 0.9, 7e-6));
  EXPECT_GT(spread.seconds, 4 * ep8.seconds);
  EXPECT_DOUBLE_EQ(collective_cost(CollectiveOp::all_to_all, 64e6, 1, 1, c).seconds, 0.0);
}

TEST(Collectives, Placement) {
  GroupPlacement g = place_group(8, 1, 8);  // tp = 8 on 8-GPU nodes
  EXPECT_EQ(g.ranks_per_node, 8);
  EXPECT_EQ(g.nodes, 1);
  g = place_group(16, 8, 8);  // dp over nodes with tp = 8: one rank per node
  EXPECT_EQ(g.ranks_per_node, 1);
  EXPECT_EQ(g.nodes, 16);
  g = place_group(8, 2, 8);  // dp = 8 with tp = 2: 4 ranks per node, 2 nodes
  EXPECT_EQ(g.ranks_per_node, 4);
  EXPECT_EQ(g.nodes, 2);
  g = place_group(4, 2, 8);  // fits one node
  EXPECT_EQ(g.nodes, 1);
  g = place_group(16, 1, 8);  // tp = 16: two nodes of 8
  EXPECT_EQ(g.ranks_per_node, 8);
  EXPECT_EQ(g.nodes, 2);
}

TEST(Collectives, TensorParallelStaysOnNvlink) {
  const ClusterProfile c = load_cluster_profile("a100-80gb-x8-ib200");
  const double bytes = 48e6;
  const CollectiveCost tp8 = collective_cost(CollectiveOp::all_reduce, bytes, 8, 1, c);
  EXPECT_FALSE(tp8.inter_node);
  EXPECT_STREQ(tp8.algorithm, "ring");
  EXPECT_DOUBLE_EQ(tp8.bandwidth, 300e9 * 0.78);
  EXPECT_DOUBLE_EQ(tp8.seconds, ring_all_reduce_s(8, bytes, 300e9 * 0.78, 3e-6));
  // tp = 16 leaves the node: the network bounds it (8 ranks per node share 8 cards).
  const CollectiveCost tp16 = collective_cost(CollectiveOp::all_reduce, bytes, 16, 1, c);
  EXPECT_TRUE(tp16.inter_node);
  EXPECT_DOUBLE_EQ(tp16.bandwidth, std::min(300e9 * 0.78, 8 * 25e9 * 0.9));
  EXPECT_GT(tp16.seconds, tp8.seconds);
}

TEST(Collectives, DataParallelAcrossNodesUsesInfiniband) {
  const ClusterProfile c = load_cluster_profile("a100");
  const double bytes = 1e9;
  // dp = 16 with tp = 8: one rank per node, each on its own 200 Gb/s card.
  const CollectiveCost dp = collective_cost(CollectiveOp::all_reduce, bytes, 16, 8, c);
  EXPECT_TRUE(dp.inter_node);
  EXPECT_DOUBLE_EQ(dp.bandwidth, 25e9 * 0.9);
  const double ring = ring_all_reduce_s(16, bytes, 25e9 * 0.9, 7e-6);
  const double tree = tree_all_reduce_s(1, bytes, 25e9 * 0.9, 4 * 7e-6);
  EXPECT_DOUBLE_EQ(dp.seconds, std::min(ring, tree));
  EXPECT_STREQ(dp.algorithm, "ring");  // large messages: the ring moves fewer bytes
  // Small messages over many nodes: the tree's log-depth latency wins.
  const CollectiveCost small = collective_cost(CollectiveOp::all_reduce, 4096, 1024, 8, c);
  EXPECT_STREQ(small.algorithm, "tree");
  EXPECT_LT(small.seconds, ring_all_reduce_s(1024, 4096, 25e9 * 0.9, 7e-6));
  // dp = 8 with tp = 2: 4 ranks per node share 4 cards: min(NVLink, 4 x 25 GB/s x 0.9).
  const CollectiveCost dp2 = collective_cost(CollectiveOp::reduce_scatter, bytes, 8, 2, c);
  EXPECT_TRUE(dp2.inter_node);
  EXPECT_DOUBLE_EQ(dp2.bandwidth, 4 * 25e9 * 0.9);
  EXPECT_DOUBLE_EQ(dp2.seconds, ring_gather_s(8, bytes, 90e9, 7e-6));
  // Inside a node (dp = 4, tp = 2): NVLink.
  EXPECT_FALSE(collective_cost(CollectiveOp::all_gather, bytes, 4, 2, c).inter_node);
}

TEST(Collectives, PointToPoint) {
  const ClusterProfile c = load_cluster_profile("h100");
  const CollectiveCost in = collective_cost(CollectiveOp::send, 1e8, 2, 4, c);
  EXPECT_FALSE(in.inter_node);
  EXPECT_DOUBLE_EQ(in.seconds, send_s(1e8, 450e9 * 0.8, 3e-6));
  const CollectiveCost out = collective_cost(CollectiveOp::send, 1e8, 2, 8, c);
  EXPECT_TRUE(out.inter_node);
  EXPECT_DOUBLE_EQ(out.seconds, send_s(1e8, 50e9 * 0.9, 7e-6));
}

// Ring attention's step: every rank of the cp group sends a block to the next at once. cp ranks
// at stride tp: on one node every hop is NVLink; once tp x cp outgrows the node some hop crosses
// the network and sets the time.
TEST(Collectives, RingExchangeOfContextParallelism) {
  const ClusterProfile c = load_cluster_profile("h100");
  const CollectiveCost in = ring_exchange_cost(1e8, 4, 2, c);  // tp 2 x cp 4 = 8: one node
  EXPECT_FALSE(in.inter_node);
  EXPECT_DOUBLE_EQ(in.seconds, send_s(1e8, 450e9 * 0.8, 3e-6));
  const CollectiveCost out = ring_exchange_cost(1e8, 4, 4, c);  // tp 4 x cp 4 = 16: two nodes
  EXPECT_TRUE(out.inter_node);
  EXPECT_DOUBLE_EQ(out.seconds, send_s(1e8, 50e9 * 0.9, 7e-6));
  EXPECT_TRUE(ring_exchange_cost(1e8, 2, 8, c).inter_node);  // tp 8: each cp rank a node
  EXPECT_EQ(ring_exchange_cost(1e8, 1, 1, c).seconds, 0.0);
  EXPECT_EQ(ring_exchange_cost(0, 4, 1, c).seconds, 0.0);
}

TEST(Collectives, MeasuredOverridesPerOperation) {
  ClusterProfile c = load_cluster_profile("a100");
  c.intra.ops[static_cast<int>(CollectiveOp::reduce_scatter)] = OpCost{2e9, 10e-6};
  const CollectiveCost rs = collective_cost(CollectiveOp::reduce_scatter, 1e6, 2, 1, c);
  EXPECT_DOUBLE_EQ(rs.seconds, ring_gather_s(2, 1e6, 2e9, 10e-6));
  // The other operations keep the link's numbers.
  const CollectiveCost ar = collective_cost(CollectiveOp::all_reduce, 1e6, 2, 1, c);
  EXPECT_DOUBLE_EQ(ar.seconds, ring_all_reduce_s(2, 1e6, 300e9 * 0.78, 3e-6));
}

// ---- profiles ----------------------------------------------------------------------------------

TEST(Profiles, BuiltinsLoadWithDatasheetNumbers) {
  const std::vector<std::string> names = builtin_cluster_profiles();
  EXPECT_GE(names.size(), 6u);
  for (const std::string& n : names) {
    SCOPED_TRACE(n);
    const ClusterProfile c = load_cluster_profile(n);
    EXPECT_EQ(c.name, n);
    EXPECT_GT(c.device.flops_bf16, 0);
    EXPECT_GT(c.device.memory_bytes, 0);
    if (c.device.is_cpu()) continue;
    EXPECT_GT(c.intra.bandwidth, c.inter.bandwidth);
    EXPECT_EQ(c.gpus_per_node, 8);
  }
  // cpu-local: this machine's cores and memory, one rank per core.
  const ClusterProfile local = load_cluster_profile("cpu-local");
  EXPECT_TRUE(local.device.is_cpu());
  EXPECT_GE(local.device.cores, 1);
  EXPECT_EQ(local.gpus_per_node, local.device.cores);
  EXPECT_EQ(local.max_nodes, 1);
  EXPECT_EQ(local.intra.kind, "shm");
  EXPECT_EQ(load_cluster_profile("cpu").name, "cpu-local");
  const ClusterProfile a = load_cluster_profile("a100-80gb-x8-ib200");
  EXPECT_DOUBLE_EQ(a.device.flops_bf16, 312e12);
  EXPECT_DOUBLE_EQ(a.device.flops_f32, 156e12);
  EXPECT_DOUBLE_EQ(a.device.mem_bandwidth, 2039e9);
  EXPECT_EQ(a.device.memory_capacity_bytes, int64_t{80} << 30);
  EXPECT_DOUBLE_EQ(a.intra.bandwidth, 300e9);
  EXPECT_DOUBLE_EQ(a.inter.bandwidth, 25e9);
  EXPECT_DOUBLE_EQ(load_cluster_profile("h100").device.flops_bf16, 989e12);
  EXPECT_DOUBLE_EQ(load_cluster_profile("h200").device.mem_bandwidth, 4800e9);
  EXPECT_DOUBLE_EQ(load_cluster_profile("b200").device.flops_bf16, 2250e12);
  EXPECT_DOUBLE_EQ(load_cluster_profile("a100-40gb").device.mem_bandwidth, 1555e9);
}

// Every number of every built-in file has a source string beside it.
TEST(Profiles, EveryNumberHasASource) {
  for (const EmbeddedFile& f : embedded_profile_files()) {
    SCOPED_TRACE(f.path);
    const toml::table t = toml::parse(f.text);
    const toml::table* sources = t["sources"].as_table();
    ASSERT_NE(sources, nullptr);
    auto check = [&](const toml::table& tab, const std::string& prefix, auto&& self) -> void {
      for (const auto& [k, v] : tab) {
        const std::string key(k.str());
        if (key == "sources") continue;
        if (v.is_table()) {
          self(*v.as_table(), prefix + key + ".", self);
        } else if (v.is_number()) {
          const std::string path = prefix + key;
          const bool eff = prefix.rfind("efficiency.", 0) == 0;  // sources.gemm, ...
          EXPECT_TRUE(toml::at_path(*sources, eff ? key : path).is_string())
              << "no sources." << path;
        }
      }
    };
    check(t, "", check);
  }
}

TEST(Profiles, AliasesAndSizes) {
  EXPECT_EQ(load_cluster_profile("a100").name, "a100-80gb-x8-ib200");
  const ClusterProfile c = load_cluster_profile("a100x64");
  EXPECT_EQ(c.max_nodes, 8);
  EXPECT_EQ(c.gpus(), 64);
  EXPECT_EQ(c.device.name, "a100-80gb");
  EXPECT_EQ(load_cluster_profile("h100-x8-ib400x1024").gpus(), 1024);
  EXPECT_EQ(load_cluster_profile("h100x4").gpus_per_node, 4);  // part of one node
  EXPECT_THROW(load_cluster_profile("a100x12"), Error);        // not whole nodes
  EXPECT_FALSE(builtin_cluster_aliases().empty());
}

TEST(Profiles, UnknownNameListsTheBuiltins) {
  try {
    load_cluster_profile("tpu-v5");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("tpu-v5"), std::string::npos);
    EXPECT_NE(msg.find("a100-80gb-x8-ib200"), std::string::npos);
    EXPECT_NE(msg.find("h100-x8-ib400"), std::string::npos);
  }
}

TEST(Profiles, UserFileWithInlineDeviceAndErrorsThatNameTheKey) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "strata_plan_prof";
  std::filesystem::create_directories(dir);
  const std::string good = R"(
name = "mybox"
gpus_per_node = 2
max_nodes = 1
[device]
name = "cpu"
kind = "cpu"
cores = 2
memory_gib = 12
f32_tflops = 0.1
bf16_tflops = 0.2
memory_bandwidth_gb_s = 20
[intra]
kind = "shm"
bandwidth_gb_s = 5
latency_us = 10
overlap = 0
[intra.all_to_all]
bandwidth_gb_s = 3
[intra.reduce_scatter]
bandwidth_gb_s = 2
latency_us = 12
)";
  const std::string path = (dir / "box.toml").string();
  std::ofstream(path) << good;
  const ClusterProfile c = load_cluster_profile(path);
  EXPECT_EQ(c.name, "mybox");
  EXPECT_TRUE(c.device.is_cpu());
  EXPECT_DOUBLE_EQ(c.device.flops_fp16, 0.1e12);  // no fp16 rate: the f32 one
  EXPECT_DOUBLE_EQ(c.intra.op_bandwidth(CollectiveOp::reduce_scatter), 2e9);
  EXPECT_DOUBLE_EQ(c.intra.op_latency(CollectiveOp::reduce_scatter), 12e-6);
  EXPECT_DOUBLE_EQ(c.intra.op_bandwidth(CollectiveOp::all_reduce), 5e9);
  EXPECT_DOUBLE_EQ(c.intra.op_bandwidth(CollectiveOp::all_to_all), 3e9);
  EXPECT_DOUBLE_EQ(c.intra.op_latency(CollectiveOp::all_to_all), 10e-6);  // the link's
  EXPECT_EQ(c.inter.kind, "shm");  // one machine: no network tier
  // 2 ranks of 1 thread on 2 cores: one core each; 1 rank of 2 threads: two.
  EXPECT_DOUBLE_EQ(c.device.rank_cores(1, 2), 1.0);
  EXPECT_DOUBLE_EQ(c.device.rank_cores(2, 1), 2.0);
  EXPECT_DOUBLE_EQ(c.device.rank_cores(0, 2), 1.0);
  EXPECT_DOUBLE_EQ(c.device.rank_cores(2, 2), 1.0);

  auto error_of = [&](const std::string& text) {
    std::ofstream(path) << text;
    try {
      load_cluster_profile(path);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  std::string bad = good;
  bad.replace(bad.find("bandwidth_gb_s = 5"), 18, "bandwidth_gb_s = \"fast\"");
  std::string msg = error_of(bad);
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("intra.bandwidth_gb_s"), std::string::npos) << msg;
  msg = error_of(good + "colour = 3\n");  // lands in [intra.reduce_scatter]
  EXPECT_NE(msg.find("unknown key 'intra.reduce_scatter.colour'"), std::string::npos) << msg;
  bad = good;
  bad.replace(bad.find("f32_tflops"), 10, "f33_tflops");
  msg = error_of(bad);
  EXPECT_NE(msg.find("device.f33_tflops"), std::string::npos) << msg;
  msg = error_of("name = \"x\"\ngpus_per_node = 8\n");
  EXPECT_NE(msg.find("device is missing"), std::string::npos) << msg;
  EXPECT_NE(msg.find("a100-80gb"), std::string::npos) << msg;  // lists the built-in devices
  std::filesystem::remove_all(dir);
}

// ---- calibration (the arithmetic; the measurements run in bench/plan_time.sh) -------------------

TEST(Calibrate, FitRecoversLatencyAndBandwidthOfTheRingFormulas) {
  // Points made from the formulas on 4 ranks: alpha 5 us, bus bandwidth 8 GB/s.
  for (int op = 0; op < kNumCollectiveOps; ++op) {
    const CollectiveOp o = static_cast<CollectiveOp>(op);
    std::vector<CommPoint> pts;
    for (double bytes = 4096; bytes <= 64e6; bytes *= 4) {
      const double t = o == CollectiveOp::all_reduce ? ring_all_reduce_s(4, bytes, 8e9, 5e-6)
                       : o == CollectiveOp::send     ? send_s(bytes, 8e9, 5e-6)
                                                     : ring_gather_s(4, bytes, 8e9, 5e-6);
      pts.push_back({bytes, t});
    }
    const OpCost c = fit_collective(o, 4, pts);
    EXPECT_NEAR(c.latency_s, 5e-6, 1e-9) << collective_name(o);
    EXPECT_NEAR(c.bandwidth / 8e9, 1.0, 1e-6) << collective_name(o);
  }
  // Noise that would make the intercept negative: latency 0, slope through the origin.
  const OpCost c = fit_collective(CollectiveOp::send, 2, {{1e6, 1e-4}, {2e6, 2.3e-4}});
  EXPECT_GE(c.latency_s, 0);
  EXPECT_GT(c.bandwidth, 0);
}

TEST(Calibrate, WrittenProfileReadsBackAndModelsSharedCores) {
  ComputeMeasurement m;
  m.cpu = "Test CPU";
  m.host = "box";
  m.cores = 4;
  m.memory_bytes = int64_t{16} << 30;
  m.gemm_f32 = 100e9;
  m.gemm_bf16 = 200e9;
  m.gemm_fp16 = 90e9;
  m.gemm_f32_all = 360e9;
  m.gemm_node = 180e9;  // other load leaves 1.8 cores
  m.flash_f32 = 60e9;
  m.flash_bf16 = 90e9;
  m.naive_seconds = 0.01;
  m.naive_flops = 0.5e9;
  m.naive_probs_bytes = 50e6;
  m.stream_core = 20e9;
  m.stream_node = 50e9;
  m.kernels_core = 25e9;
  m.kernels_node = 60e9;
  CommMeasurement cm;
  cm.ranks = 2;
  for (int op = 0; op < kNumCollectiveOps; ++op) {
    cm.ops[static_cast<size_t>(op)] = OpCost{(op + 1) * 1e9, (op + 1) * 1e-6};
    cm.points[static_cast<size_t>(op)] = {{4096, 1e-5}, {1e6, 1e-4}};
  }
  const ClusterProfile p = calibrated_profile(m, &cm, "");
  const ClusterProfile back = parse_cluster_profile(calibrated_profile_toml(p, m, &cm), "t.toml");
  EXPECT_EQ(back.name, "calibrated-box");
  EXPECT_EQ(back.gpus_per_node, 4);
  EXPECT_TRUE(back.device.is_cpu());
  EXPECT_NEAR(back.device.flops_f32, 100e9, 1e3);
  EXPECT_NEAR(back.device.flops_bf16, 200e9, 1e3);
  EXPECT_NEAR(back.device.thread_efficiency, 0.9, 1e-6);
  EXPECT_NEAR(back.device.attention_efficiency, 0.6, 1e-6);
  EXPECT_NEAR(back.device.attention_bf16_efficiency, 0.45, 1e-6);
  // Naive: 10 ms minus 50 MB at 25 GB/s = 8 ms of compute for 0.5 GFLOP: 62.5 GFLOP/s.
  EXPECT_NEAR(back.device.naive_attention_efficiency, 0.625, 1e-6);
  EXPECT_NEAR(back.device.mem_bandwidth, 25e9, 1e3);
  EXPECT_NEAR(back.device.mem_bandwidth_node, 60e9, 1e3);
  EXPECT_EQ(back.intra.kind, "shm");
  EXPECT_DOUBLE_EQ(back.intra.overlap, 0.0);
  for (int op = 0; op < kNumCollectiveOps; ++op) {
    EXPECT_NEAR(back.intra.op_bandwidth(static_cast<CollectiveOp>(op)), (op + 1) * 1e9, 1e3);
    EXPECT_NEAR(back.intra.op_latency(static_cast<CollectiveOp>(op)), (op + 1) * 1e-6, 1e-12);
  }
  // 1 rank of 1 thread: one core; 1 rank of 4 threads would get 4 x 0.9, but other load
  // leaves 1.8 cores, which 2 ranks share.
  EXPECT_NEAR(back.device.available_cores, 1.8, 1e-9);
  EXPECT_DOUBLE_EQ(back.device.rank_scale(1, 1), 1.0);
  EXPECT_NEAR(back.device.rank_scale(4, 1), 1.8, 1e-9);
  EXPECT_NEAR(back.device.rank_scale(1, 2), 0.9, 1e-9);
  ClusterProfile quiet = back;
  quiet.device.available_cores = 0;  // all cores free
  EXPECT_DOUBLE_EQ(quiet.device.rank_scale(1, 4), 1.0);
  EXPECT_NEAR(quiet.device.rank_scale(4, 1), 3.6, 1e-9);
  EXPECT_NEAR(quiet.device.rank_scale(4, 2), 2 * 0.9, 1e-9);
}

}  // namespace
}  // namespace strata
