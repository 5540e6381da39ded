// Model parallelism is an implementation detail of the arithmetic: every layout (tp, pp, dp) of
// the world, with sequence parallelism on and off, with 1 and 2 virtual stages where the layer
// count allows, under GPipe, 1F1B and interleaved 1F1B, gives per-step losses and final
// parameters equal to one process training on the same global batch (f32, relative <= 1e-5).
// Rank 0 also runs that single process, in-process. Run as 2, 4 and 8 ranks.
//
// STRATA_LAYOUTS=ci runs a representative subset (every kind of group at least once); the
// default is the full matrix.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>

#include "comm/layout.h"
#include "comm/process_groups.h"
#include "train/config.h"
#include "train/trainer.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

int world_size() {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

struct Case {
  std::string family;
  int tp = 1, pp = 1, dp = 1, vpp = 1, zero = 0;
  bool sp = false;
  std::string schedule = "1f1b";
  int micro_batches = 4;
  std::string recompute = "none";
  std::string precision = "f32";
  std::string grad_reduce = "f32";

  std::string name() const {
    return cat(family, "_tp", tp, "_pp", pp, "_dp", dp, sp ? "_sp" : "", "_v", vpp, "_",
               schedule == "1f1b" ? "1f1b" : schedule, "_z", zero,
               recompute == "none" ? "" : "_rc_" + recompute,
               precision == "f32" ? "" : "_" + precision,
               grad_reduce == "f32" ? "" : "_reduce_" + grad_reduce);
  }
  // f32 reassociation only; with 16-bit GEMM inputs a partial sum that differs in its last f32
  // bit can round to another bf16 value, so mixed precision compares at bf16's resolution.
  double tolerance() const { return precision == "f32" ? 1e-5 : 5e-3; }
};

constexpr int64_t kBatch = 2, kSeq = 16, kSteps = 10;

RunConfig config_for(const Case& k, int64_t batch, int64_t accum, const std::string& dir) {
  RunConfig c = parse_config(
      R"(
[model]
n_layer = 8
n_head = 8
d_model = 64
vocab_size = 256
max_seq_len = 16
[train]
seq_len = 16
eval_every = 0
[optim]
lr = 3e-3
warmup_steps = 2
grad_clip = 0.5
[data]
source = "synthetic"
[parallel]
bucket_mb = 0.02
)",
      "test",
      {"model.family=" + k.family, "run.dir=" + dir, "run.resume=none", cat("train.steps=", kSteps),
       cat("train.batch_size=", batch), cat("train.grad_accum=", accum)});
  if (k.family == "llama") c.model.n_kv_head = 2;  // tp 4 and 8 share each kv head
  c.parallel.tp = k.tp;
  c.parallel.pp = k.pp;
  c.parallel.dp = k.dp;
  c.parallel.zero = k.zero;
  c.parallel.sp = k.sp;
  c.parallel.vpp = k.vpp;
  c.parallel.schedule = k.schedule;
  c.train.recompute = k.recompute;
  c.train.precision = k.precision;
  c.parallel.grad_reduce_dtype = k.grad_reduce;
  return c;
}

struct RunResult {
  std::vector<double> losses;
  std::vector<float> params;  // global tensors, single-process layout (rank 0)
  std::vector<double> bubbles;
};

RunResult train(const RunConfig& c, ProcessGroups* g) {
  Trainer t(c, g);
  RunResult r;
  for (int i = 0; i < c.train.steps; ++i) {
    const StepResult s = t.train_step();
    r.losses.push_back(s.loss);
    r.bubbles.push_back(s.bubble_fraction);
  }
  r.params = t.global_params();
  return r;
}

double rel(double a, double b) {
  return std::abs(a - b) / std::max(std::abs(b), 1e-30);
}

// One process with the same global batch: micro-batches of kBatch * dp sequences (the loader
// gives dp rank r rows [r * kBatch, (r + 1) * kBatch) of each), micro_batches of them per step.
const RunResult& reference(const Case& k) {
  static std::map<std::string, RunResult> cache;
  const std::string key = cat(k.family, "_", k.dp, "_", k.micro_batches, "_", k.precision);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  Case one = k;
  one.tp = one.pp = one.dp = one.vpp = 1;
  one.zero = 0;
  one.sp = false;
  one.schedule = "1f1b";
  one.recompute = "none";
  one.grad_reduce = "f32";
  const RunConfig c =
      config_for(one, kBatch * k.dp, k.micro_batches,
                 (fs::temp_directory_path() / cat("strata_test_mp_ref_", key)).string());
  return cache[key] = train(c, nullptr);
}

class LayoutEquivalence : public ::testing::TestWithParam<Case> {};

TEST_P(LayoutEquivalence, MatchesOneProcess) {
  const Case& k = GetParam();
  const int world = world_size();
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  ProcessGroups g = ProcessGroups::create(resolve_layout(k.tp, k.pp, k.dp, k.zero, world));
  RunConfig c = config_for(
      k, kBatch, k.micro_batches,
      (fs::temp_directory_path() / cat("strata_test_mp_np", world, "_", k.name(), "_", rank))
          .string());
  const RunResult got = train(c, &g);
  int ok = 1;
  if (rank == 0) {
    const RunResult& want = reference(k);
    const double tol = k.tolerance();
    for (size_t i = 0; i < want.losses.size(); ++i) {
      EXPECT_LE(rel(got.losses[i], want.losses[i]), tol)
          << "step " << i + 1 << ": " << got.losses[i] << " vs " << want.losses[i];
      if (!(rel(got.losses[i], want.losses[i]) <= tol)) ok = 0;
    }
    ASSERT_EQ(got.params.size(), want.params.size());
    double num = 0, den = 0;
    for (size_t i = 0; i < want.params.size(); ++i) {
      const double d = static_cast<double>(got.params[i]) - want.params[i];
      num += d * d;
      den += static_cast<double>(want.params[i]) * want.params[i];
    }
    EXPECT_LE(std::sqrt(num / den), tol) << "final parameters";
    if (!(std::sqrt(num / den) <= tol)) ok = 0;
    if (k.pp > 1) {
      // Each run measures its pipeline bubble; it must be a fraction.
      EXPECT_GT(got.bubbles.back(), 0.0);
      EXPECT_LT(got.bubbles.back(), 1.0);
    }
  }
  MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
  EXPECT_EQ(ok, 1);
}

std::vector<Case> all_cases() {
  const int world = world_size();
  const bool ci =
      std::getenv("STRATA_LAYOUTS") && std::string(std::getenv("STRATA_LAYOUTS")) == "ci";
  std::vector<Case> out;
  const int sizes[] = {1, 2, 4, 8};
  for (const char* family : {"gpt2", "llama"}) {
    for (int tp : sizes)
      for (int pp : sizes)
        for (int dp : sizes) {
          if (tp * pp * dp != world || world == 1) continue;
          for (bool sp : {false, true}) {
            if (sp && tp == 1) continue;
            std::vector<std::pair<int, std::string>> pipes = {{1, "1f1b"}};
            if (pp > 1) {
              pipes.push_back({1, "gpipe"});
              if (8 % (pp * 2) == 0) pipes.push_back({2, "interleaved"});
            }
            for (const auto& [vpp, schedule] : pipes) {
              Case k{family, tp, pp, dp, vpp, dp > 1 ? 1 : 0, sp, schedule, pp == 8 ? 8 : 4};
              out.push_back(k);
            }
          }
        }
    // ZeRO-2 and -3 compose with tensor parallelism (not with pipelines: a config error).
    if (world >= 4) {
      for (int zero : {2, 3}) out.push_back(Case{family, 2, 1, world / 2, 1, zero, zero == 3});
    }
  }
  if (ci) {
    // Every kind of group, both families, each schedule, sp, vpp, shared kv heads.
    std::vector<Case> subset;
    for (size_t i = 0; i < out.size(); i += 3) subset.push_back(out[i]);
    out = subset;
  }
  // Recomputation composes with every kind of parallelism (it changes nothing in the arithmetic).
  // So does mixed precision (bf16 and fp16 with its loss scale), including ZeRO-2 with tp.
  {
    Case b{"gpt2", 2, world >= 4 ? 2 : 1, 1, 1, 0, true, "1f1b", 4, "none", "bf16"};
    b.dp = world / (b.tp * b.pp);
    b.zero = b.dp > 1 ? 1 : 0;
    out.push_back(b);
    Case h{"llama", world >= 4 ? 2 : 1, 2, 1, 1, 0, false, "1f1b", 4, "none", "fp16"};
    h.dp = world / (h.tp * h.pp);
    h.zero = h.dp > 1 ? 1 : 0;
    out.push_back(h);
    if (world >= 4) {
      out.push_back(Case{"llama", 2, 1, world / 2, 1, 2, true, "1f1b", 4, "none", "bf16"});
      out.push_back(Case{"gpt2", 2, 1, world / 2, 1, 3, false, "1f1b", 4, "none", "bf16"});
    }
    // ZeRO-3 gathers f32 master shards and converts each gathered group to 16 bits on use.
    if (world >= 2)
      out.push_back(Case{"llama", 1, 1, world, 1, 3, false, "1f1b", 4, "none", "bf16"});
    // Gradients reduced in bf16 (parallel.grad_reduce_dtype), ZeRO-1 and ZeRO-2.
    for (int zero : {1, 2}) {
      Case r{"gpt2", 1, 1, world, 1, zero, false, "1f1b", 4, "none", "bf16"};
      r.grad_reduce = "bf16";
      out.push_back(r);
    }
  }
  if (world >= 4) {
    out.push_back(Case{"gpt2", 2, 2, world / 4, 1, world / 4 > 1 ? 1 : 0, true, "1f1b", 4, "full"});
    out.push_back(Case{"llama", 2, 2, world / 4, 2, world / 4 > 1 ? 1 : 0, false, "interleaved", 4,
                       "selective"});
  } else {
    out.push_back(Case{"gpt2", 2, 1, 1, 1, 0, true, "1f1b", 4, "full"});
    out.push_back(Case{"llama", 1, 2, 1, 1, 0, false, "1f1b", 4, "selective"});
  }
  return out;
}

// A checkpoint holds global tensors: saved by one layout (tp = 2 with pipeline stages), it resumes
// on another (the same ranks as pipeline stages only) and in one process, and both continue with
// the losses and parameters of the run that was never interrupted.
// Saves with layout a after half the steps (every rank writing its own slices), resumes with
// layout c and in one process, and compares both with the uninterrupted run of a (same global
// batch: the micro-batch per rank scales with 1 / dp).
void check_resume_on_other_layout(const Case& a, const Case& c, const std::string& tag) {
  ASSERT_EQ(kBatch * a.dp % c.dp, 0);
  const int world = world_size();
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const std::string base =
      (fs::temp_directory_path() / cat("strata_test_mp_ckpt_np", world, "_", tag, "_")).string();
  {
    ProcessGroups g = ProcessGroups::create(resolve_layout(a.tp, a.pp, a.dp, a.zero, world));
    // One run directory for the job, as on a shared filesystem: every rank writes its slices.
    Trainer t(config_for(a, kBatch, a.micro_batches, cat(base, "a")), &g);
    for (int i = 0; i < kSteps / 2; ++i) t.train_step();
    t.save();
  }
  const std::string ckpt = cat(base, "a/ckpt");
  auto resumed = [&](const RunConfig& config, ProcessGroups* g) {
    RunConfig cfg = config;
    cfg.run.resume = ckpt;
    Trainer t(cfg, g);
    EXPECT_EQ(t.step(), kSteps / 2);
    RunResult r;
    while (t.step() < kSteps) r.losses.push_back(t.train_step().loss);
    r.params = t.global_params();
    return r;
  };
  ProcessGroups g = ProcessGroups::create(resolve_layout(c.tp, c.pp, c.dp, c.zero, world));
  const RunResult other =
      resumed(config_for(c, kBatch * a.dp / c.dp, c.micro_batches, cat(base, "c")), &g);
  int ok = 1;
  if (rank == 0) {
    const RunResult& want = reference(a);
    Case one = a;
    one.tp = one.pp = one.dp = 1;
    one.zero = 0;
    const RunResult single =
        resumed(config_for(one, kBatch * a.dp, a.micro_batches, base + "one"), nullptr);
    for (const RunResult* got : {&other, &single}) {
      ASSERT_EQ(got->losses.size(), static_cast<size_t>(kSteps / 2));
      for (int i = 0; i < kSteps / 2; ++i) {
        EXPECT_LE(rel(got->losses[i], want.losses[kSteps / 2 + i]), 1e-5) << "step " << i + 6;
        if (!(rel(got->losses[i], want.losses[kSteps / 2 + i]) <= 1e-5)) ok = 0;
      }
      double num = 0, den = 0;
      for (size_t i = 0; i < want.params.size(); ++i) {
        const double d = static_cast<double>(got->params[i]) - want.params[i];
        num += d * d;
        den += static_cast<double>(want.params[i]) * want.params[i];
      }
      EXPECT_LE(std::sqrt(num / den), 1e-5) << "final parameters";
      if (!(std::sqrt(num / den) <= 1e-5)) ok = 0;
    }
  }
  MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
  EXPECT_EQ(ok, 1);
}

TEST(ModelParallelCheckpoint, ResumesOnAnotherLayout) {
  const int world = world_size();
  Case a{"gpt2", 2, world >= 4 ? 2 : 1, 1};
  a.dp = world / (a.tp * a.pp);
  a.zero = a.dp > 1 ? 1 : 0;
  Case c = a;
  c.tp = 1;
  c.pp = a.tp * a.pp;
  c.sp = false;
  check_resume_on_other_layout(a, c, "tp_pp");
}

// ZeRO shards (dp = world, ZeRO-1 moments and ZeRO-3 master weights) into tensor and pipeline
// blocks, and those into ZeRO shards of another dp size.
TEST(ModelParallelCheckpoint, ZeroShardsReshardIntoTensorAndPipelineBlocks) {
  const int world = world_size();
  for (int zero : {1, 3}) {
    Case a{"llama", 1, 1, world, 1, zero};
    Case c{"llama", 2, world / 2, 1};
    check_resume_on_other_layout(a, c, cat("z", zero, "_to_tp_pp"));
    // Back into ZeRO shards of another dp size (tp takes the other ranks).
    check_resume_on_other_layout(c, Case{"llama", world / 2, 1, 2, 1, zero}, cat("to_z", zero));
  }
}

// Each rank holds 1/tp of every split parameter and only its pipeline stage's layers: its
// parameter bytes (arena accounting) are the global bytes of its layers divided by tp, plus the
// small replicated tensors (norms, row-parallel biases, positions).
TEST(ModelParallelMemory, ParameterBytesFollowTheSplit) {
  const int world = world_size();
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  for (const char* family : {"gpt2", "llama"}) {
    Case k{family, 2, world / 2, 1};
    ProcessGroups g = ProcessGroups::create(resolve_layout(k.tp, k.pp, k.dp, 0, world));
    Trainer t(config_for(k, kBatch, k.micro_batches,
                         cat(fs::temp_directory_path().string(), "/strata_test_mp_bytes_", rank)),
              &g);
    const ParamStore& local = t.model().params();
    const ParamStore whole = whole_model_layout(t.model().config());
    const ModelShard& sh = t.model().shard();
    int64_t expected = 0, split_local = 0, split_global = 0;
    for (const ParamInfo& p : local.all()) {
      const ParamInfo& global = whole.info(whole.index_of(p.name));
      // Split tensors hold exactly 1/tp, or a kv head shared by tp / n_kv_head ranks.
      const int64_t share = p.slice.dim >= 0 ? sh.tp / p.slice.holders : 1;
      EXPECT_EQ(p.numel * share, global.numel) << p.name;
      expected += p.numel;
      if (p.slice.dim >= 0 && p.slice.holders == 1) {
        split_local += p.numel;
        split_global += global.numel;
      }
    }
    EXPECT_EQ(split_local * sh.tp, split_global);
    EXPECT_EQ(t.arena().current(MemCategory::params), 4 * expected);
    // Layers: this stage's share, and every layer on exactly one stage.
    int64_t mine = 0;
    for (const LayerRange& r : sh.chunks) mine += r.size();
    int64_t total = mine;
    MPI_Allreduce(MPI_IN_PLACE, &total, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
    EXPECT_EQ(total, t.model().config().n_layer * sh.tp);
  }
}

// Sequence parallelism keeps only this rank's rows of the residual stream, the norms and their
// statistics: the activation bytes the arena reports fall by exactly (1 - 1/tp) of those tensors.
TEST(ModelParallelMemory, SequenceParallelShardsTheReplicatedActivations) {
  const int world = world_size();
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  for (const char* family : {"gpt2", "llama"}) {
    int64_t bytes[2] = {0, 0};
    ModelConfig model;
    for (bool sp : {false, true}) {
      Case k{family, 2, 1, world / 2, 1, 0, sp};
      ProcessGroups g = ProcessGroups::create(resolve_layout(k.tp, k.pp, k.dp, 0, world));
      Trainer t(config_for(k, kBatch, 1,
                           cat(fs::temp_directory_path().string(), "/strata_test_mp_sp_", rank)),
                &g);
      bytes[sp] = t.arena().current(MemCategory::activations);
      model = t.model().config();
    }
    const int64_t n = kBatch * kSeq, c = model.d_model,
                  stats = family == std::string("gpt2") ? 2 : 1;
    // Per layer: attention norm, residual after attention, mlp norm, block output, and two norms'
    // statistics; plus the embedding output, the final norm and its statistics.
    const int64_t elements =
        model.n_layer * (4 * n * c + 2 * stats * n) + n * c + n * c + stats * n;
    EXPECT_EQ(bytes[0] - bytes[1], 4 * elements / 2) << family;
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, LayoutEquivalence, ::testing::ValuesIn(all_cases()),
                         [](const auto& param_info) { return param_info.param.name(); });

}  // namespace
}  // namespace strata
