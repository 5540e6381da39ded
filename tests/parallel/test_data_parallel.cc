// Data parallelism is an implementation detail of the arithmetic: for dp = world size and every
// ZeRO stage, with and without gradient accumulation, on both model families, the loss and the
// gradient norm of every step and the final parameters equal those of one process training on
// the same global batch (f32, relative error <= 1e-5). Rank 0 also runs that single process,
// in-process. Clipping and AdamW hide a uniform gradient scale from the losses and parameters
// (a sum instead of the mean would still train alike), so the norms are compared too, and the
// raw reduced gradients themselves with clipping off (RawGradients).
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <filesystem>

#include "comm/layout.h"
#include "comm/process_groups.h"
#include "model/decoder.h"
#include "optim/adamw.h"
#include "parallel/data_parallel.h"
#include "run/config.h"
#include "train/trainer.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

ProcessGroups& groups() {
  static ProcessGroups g = ProcessGroups::create(resolve_layout(1, 1, 0, 0, [] {
    int n = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    return n;
  }()));
  return g;
}

RunConfig config_for(const std::string& family, int64_t zero, int64_t accum, int64_t batch,
                     const std::string& dir, double bucket_mb = 0.02) {
  std::vector<std::string> sets = {"model.family=" + family,
                                   "run.dir=" + dir,
                                   "run.resume=none",
                                   cat("parallel.zero=", zero),
                                   cat("train.grad_accum=", accum),
                                   cat("train.batch_size=", batch),
                                   cat("parallel.bucket_mb=", bucket_mb)};
  // mixtral: the balancing loss is a product of means over a micro-batch's tokens, which each
  // rank takes over its own rows, so not the whole batch's value: off here. Routing (dropless)
  // is per token, and the z-loss a mean over tokens, like the rest of the objective.
  if (family == "mixtral")
    sets.insert(sets.end(), {"model.n_kv_head=2", "model.moe.experts=4",
                             "model.moe.aux_loss_coeff=0", "model.moe.z_loss_coeff=1e-3"});
  RunConfig c = parse_config(
      R"(
[model]
n_layer = 2
n_head = 4
d_model = 64
vocab_size = 256
max_seq_len = 32
[train]
steps = 10
seq_len = 32
eval_every = 0
[optim]
lr = 3e-3
warmup_steps = 2
[data]
source = "synthetic"
[parallel]
)",
      "test", sets);
  if (family == "llama") {
    c.model.n_kv_head = 2;
    c.model.finalize();
  }
  return c;
}

struct RunResult {
  std::vector<double> losses, grad_norms;
  std::vector<float> params;              // full, by the single-process layout (name order)
  std::vector<std::vector<float>> grads;  // each step's reduced gradients, the same order
};

// A full-layout buffer (bucket padding included) in registration order.
std::vector<float> name_order(const ParamStore& p, const float* data) {
  std::vector<float> out;
  for (int i = 0; i < p.count(); ++i)
    out.insert(out.end(), data + p.info(i).offset, data + p.info(i).offset + p.info(i).numel);
  return out;
}

// Parameters in registration order, whatever the layout and sharding.
std::vector<float> full_params(Trainer& t) {
  ParamStore& p = t.model().params();
  std::vector<float> flat(static_cast<size_t>(p.size()));
  const float* data = p.data();
  if (t.data_parallel() && t.data_parallel()->params_sharded()) {
    t.data_parallel()->gather_to_full(t.data_parallel()->shard_params(), flat.data());
    data = flat.data();
  }
  return name_order(p, data);
}

RunResult train(const RunConfig& c, ProcessGroups* g, bool keep_grads = false) {
  Trainer t(c, g);
  RunResult r;
  for (int i = 0; i < c.train.steps; ++i) {
    const StepResult s = t.train_step();
    r.losses.push_back(s.loss);
    r.grad_norms.push_back(s.grad_norm);
    if (keep_grads) r.grads.push_back(name_order(t.model().params(), t.global_grads().data()));
  }
  r.params = full_params(t);
  return r;
}

double rel(double a, double b) {
  return std::abs(a - b) / std::max(std::abs(b), 1e-30);
}

// ||a - b|| / ||b|| over all elements, in double.
double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    num += d * d;
    den += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

struct Case {
  std::string family;
  int64_t zero, accum;
  // Fewer buckets than ZeRO-2/3 staging slots: a bucket's next micro-batch must still get a
  // fresh slot while the previous one's reduce-scatter is in flight.
  double bucket_mb = 0.02;
};

class DataParallelEquivalence : public ::testing::TestWithParam<Case> {};

TEST_P(DataParallelEquivalence, MatchesOneProcess) {
  const Case& k = GetParam();
  ProcessGroups& g = groups();
  const int world = g.world().size(), rank = g.world().rank();
  const std::string base = (fs::temp_directory_path() / cat("strata_test_dp_np", world)).string();
  const int64_t per_rank = 2;
  const RunResult dp = train(
      config_for(k.family, k.zero, k.accum, per_rank, cat(base, "_dp_", rank), k.bucket_mb), &g);
  int ok = 1;
  if (rank == 0) {
    const RunResult one =
        train(config_for(k.family, 0, k.accum, per_rank * world, base + "_one"), nullptr);
    for (size_t i = 0; i < one.losses.size(); ++i) {
      EXPECT_LE(rel(dp.losses[i], one.losses[i]), 1e-5) << "step " << i + 1;
      if (!(rel(dp.losses[i], one.losses[i]) <= 1e-5)) ok = 0;
      // The norm before clipping: a wrong reduction scale shows here first.
      EXPECT_LE(rel(dp.grad_norms[i], one.grad_norms[i]), 1e-5)
          << "grad_norm step " << i + 1 << ": " << dp.grad_norms[i] << " vs " << one.grad_norms[i];
      if (!(rel(dp.grad_norms[i], one.grad_norms[i]) <= 1e-5)) ok = 0;
    }
    ASSERT_EQ(dp.params.size(), one.params.size());
    EXPECT_LE(rel_l2(dp.params, one.params), 1e-5) << "final parameters";
    if (!(rel_l2(dp.params, one.params) <= 1e-5)) ok = 0;
  }
  // Every rank must agree on the parameters it holds (replicas never diverge).
  MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
  EXPECT_EQ(ok, 1);
}

std::vector<Case> all_cases() {
  std::vector<Case> out;
  for (const char* f : {"gpt2", "llama"})
    for (int64_t zero : {0, 1, 2, 3})
      for (int64_t accum : {1, 2}) out.push_back({f, zero, accum});
  for (int64_t zero : {2, 3}) out.push_back({"gpt2", zero, 3, 25.0});
  for (int64_t zero : {0, 3}) out.push_back({"mixtral", zero, 2});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Layouts, DataParallelEquivalence, ::testing::ValuesIn(all_cases()),
                         [](const auto& param_info) {
                           return param_info.param.family + "_zero" +
                                  std::to_string(param_info.param.zero) + "_accum" +
                                  std::to_string(param_info.param.accum);
                         });

// The reduced gradients themselves, with clipping off: the dp mean (all-reduce, ZeRO 0) and the
// ZeRO-2/3 reduce-scatter into each rank's shard (with accumulation over micro-batches) give,
// after every step, the gradients of one process on the whole batch (relative L2 <= 1e-5; a sum
// instead of the mean is off by a factor of dp).
struct GradCase {
  int64_t zero, accum;
};

class RawGradients : public ::testing::TestWithParam<GradCase> {};

TEST_P(RawGradients, MatchOneProcess) {
  const GradCase& k = GetParam();
  ProcessGroups& g = groups();
  const int world = g.world().size(), rank = g.world().rank();
  const std::string base =
      (fs::temp_directory_path() / cat("strata_test_dp_grads_np", world)).string();
  auto cfg = [&](int64_t zero, int64_t batch, const std::string& dir) {
    RunConfig c = config_for("gpt2", zero, k.accum, batch, dir);
    c.optim.grad_clip = 0;  // the update sees the gradients as reduced
    c.train.steps = 3;
    return c;
  };
  const RunResult dp = train(cfg(k.zero, 2, cat(base, "_dp_", rank)), &g, true);
  int ok = 1;
  if (rank == 0) {
    const RunResult one = train(cfg(0, 2 * world, base + "_one"), nullptr, true);
    ASSERT_EQ(dp.grads.size(), one.grads.size());
    for (size_t i = 0; i < one.grads.size(); ++i) {
      ASSERT_EQ(dp.grads[i].size(), one.grads[i].size());
      const double e = rel_l2(dp.grads[i], one.grads[i]);
      EXPECT_LE(e, 1e-5) << "gradients after step " << i + 1;
      if (!(e <= 1e-5)) ok = 0;
    }
  }
  MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
  EXPECT_EQ(ok, 1);
}

INSTANTIATE_TEST_SUITE_P(Reductions, RawGradients,
                         ::testing::Values(GradCase{0, 1}, GradCase{2, 2}, GradCase{3, 2}),
                         [](const auto& param_info) {
                           return cat("zero", param_info.param.zero, "_accum",
                                      param_info.param.accum);
                         });

// The memory each rank's arena reports per category follows the ZeRO paper's arithmetic: for Ψ
// parameters over N_d ranks, optimizer state K·Ψ/N_d from stage 1 (K = 8 bytes: f32 Adam moments,
// no separate master copy in f32), gradients 4Ψ/N_d from stage 2, parameters 4Ψ/N_d at stage 3,
// up to the padding that makes each bucket divide evenly.
TEST(ZeroMemory, MatchesThePaper) {
  ProcessGroups& g = groups();
  const int nd = g.world().size(), rank = g.world().rank();
  for (int64_t zero : {0, 1, 2, 3}) {
    Trainer t(
        config_for(
            "gpt2", zero, 1, 2,
            cat((fs::temp_directory_path() / cat("strata_test_zmem_np", nd, "_")).string(), rank)),
        &g);
    const ParamStore& p = t.model().params();
    const double psi = static_cast<double>(t.model().config().num_params(true));
    const double padding = static_cast<double>(p.size()) - psi;  // < buckets * nd elements
    EXPECT_LT(padding, t.data_parallel()->num_buckets() * nd);
    const double shard = psi / nd;
    auto expect_bytes = [&](MemCategory c, double elements) {
      const double got = static_cast<double>(t.arena().current(c));
      EXPECT_NEAR(got, 4.0 * elements, 4.0 * (padding + nd))
          << mem_category_name(c) << " zero " << zero;
    };
    expect_bytes(MemCategory::params, zero >= 3 ? shard : psi);
    expect_bytes(MemCategory::grads, zero >= 2 ? shard : psi);
    expect_bytes(MemCategory::optimizer, zero >= 1 ? 2 * shard : 2 * psi);
  }
}

// The detectors across ranks: a rank made slow (fault.slow_ms inside its compute) is named as the
// straggler on every rank; a rank that perturbs its replica is named by the checksum comparison
// (with two ranks nobody holds a majority, so both are).
TEST(Detectors, StragglerAndDivergingReplicaAreNamed) {
  ProcessGroups& g = groups();
  const int world = g.world().size();
  if (world < 2) GTEST_SKIP() << "needs two ranks";
  const int slow = world - 1;
  const std::string dir =
      (fs::temp_directory_path() / cat("strata_test_detect_np", world)).string();
  RunConfig c = config_for("gpt2", 0, 1, 2, dir);
  c.fault.slow_rank = slow;
  c.fault.slow_ms = 400;
  c.fault.diverge_rank = slow;
  c.fault.diverge_step = 2;
  c.anomaly.replica_check_every = 1;
  c.anomaly.straggler_factor = 2.0;
  Trainer t(c, &g);
  for (int i = 1; i <= 3; ++i) {
    const StepResult r = t.train_step();
    EXPECT_EQ(r.stragglers, std::vector<int>{slow}) << "step " << i;
    if (i < 2)
      EXPECT_TRUE(r.diverged.empty()) << "step " << i;
    else if (world > 2)
      EXPECT_EQ(r.diverged, std::vector<int>{slow}) << "step " << i;
    else
      EXPECT_EQ(r.diverged.size(), 2u) << "step " << i;
  }
}

}  // namespace
}  // namespace strata
