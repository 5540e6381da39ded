// Model parallelism is an implementation detail of the arithmetic: every layout (tp, pp, dp) of
// the world, with sequence parallelism on and off, with 1 and 2 virtual stages where the layer
// count allows, under GPipe, 1F1B and interleaved 1F1B, gives per-step losses and final
// parameters equal to one process training on the same global batch (f32, relative <= 1e-5), and
// per-step gradient norms before clipping (at the same tolerance, see config_for). Rank 0 also runs
// that single process, in-process. Run as 2, 4 and 8 ranks. Clipping and AdamW hide a uniform
// gradient scale from the losses and parameters, hence the norms, and LayoutGradients compares the
// raw reduced gradients with clipping off.
//
// STRATA_LAYOUTS=ci runs a subset chosen to cover every axis value at least once per rank count
// (see ci_subset); the default is the full matrix (scripts/layout_matrix.sh).
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>

#include "comm/layout.h"
#include "comm/process_groups.h"
#include "model/decoder.h"
#include "optim/adamw.h"
#include "parallel/model_parallel.h"
#include "parallel/pipeline_executor.h"
#include "run/config.h"
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
  float grad_clip = 0.5f;  // 0: off (LayoutGradients)
  int64_t steps = 10;
  int ep = 1;  // expert parallelism (mixtral), carved out of dp
  // Context parallelism, carved out of dp too (dp / cp data replicas), and document masking
  // (sequences of kDocSeq tokens, so that documents end inside them).
  int cp = 1;
  std::string cp_impl = "ring";
  bool doc_mask = false;
  bool flash = false;  // model.attention = "flash" (what cp and document masking need)

  int replicas() const { return dp / cp; }
  int64_t seq() const;
  std::string name() const {
    return cat(family, "_tp", tp, "_pp", pp, "_dp", dp, sp ? "_sp" : "", "_v", vpp, "_",
               schedule == "1f1b" ? "1f1b" : schedule, "_z", zero,
               recompute == "none" ? "" : "_rc_" + recompute,
               precision == "f32" ? "" : "_" + precision,
               grad_reduce == "f32" ? "" : "_reduce_" + grad_reduce, ep > 1 ? cat("_ep", ep) : "",
               cp > 1 ? cat("_cp", cp, "_", cp_impl) : "", doc_mask ? "_docmask" : "");
  }
  // f32 reassociation only; with 16-bit GEMM inputs a partial sum that differs in its last f32
  // bit can round to another bf16 value, so mixed precision compares at bf16's resolution.
  double tolerance() const { return precision == "f32" ? 1e-5 : 5e-3; }
};

constexpr int64_t kBatch = 2, kSeq = 16, kSteps = 10;  // kSteps: Case::steps' default
// Document masking's rows: 64 tokens with token 7 ending each document (uniform over a vocabulary
// of 256: about one sequence in five holds a document boundary, several per micro-batch step).
constexpr int64_t kDocSeq = 64, kEos = 7;

int64_t Case::seq() const {
  return doc_mask ? kDocSeq : kSeq;
}

// AdamW's eps is 1e-2, not 1e-8, so that the gradient norm can be compared at the losses'
// tolerance on every step: with eps far below |g| the first updates are nearly lr * sign(g), so an
// element whose gradient is within rounding of 0 steps +lr in one layout and -lr in the other. With
// eps = 1e-8 the norms of later steps drifted apart by up to 8.9e-4 (f32) and 0.21 (16-bit) while
// the losses still agreed; with eps = 1e-3, by 1.6e-5 (f32, llama dp 4 ZeRO-1) and 0.18 (bf16).
// With eps = 1e-2 the update is a smooth function of g (slope at most lr / eps = 0.3), rounding
// stays rounding, and the later steps agree within the losses' tolerances (1e-5 f32, 5e-3 16-bit):
// over the full matrix (scripts/layout_matrix.sh, 149 cases, 2026-12-02) at most 8.7e-8 in f32
// and 3.1e-4 in 16 bits. The layouts are what is under test, not AdamW's eps: the one-process
// reference uses the same.
RunConfig config_for(const Case& k, int64_t batch, int64_t accum, const std::string& dir) {
  std::vector<std::string> overrides = {
      "model.family=" + (k.family == "llama3" ? std::string("llama") : k.family),
      "run.dir=" + dir,
      "run.resume=none",
      cat("train.steps=", k.steps),
      cat("train.batch_size=", batch),
      cat("train.grad_accum=", accum),
      cat("parallel.ep=", k.ep),
      cat("parallel.cp=", k.cp),
      "parallel.cp_impl=" + k.cp_impl,
      cat("train.seq_len=", k.seq()),
      cat("model.max_seq_len=", k.seq())};
  if (k.flash) overrides.push_back("model.attention=flash");
  if (k.doc_mask) {
    overrides.push_back("data.document_mask=true");
    overrides.push_back(cat("data.eos_id=", kEos));
  }
  if (k.family == "mixtral") {
    // 8 experts of width 32, 2 per token, with the z-loss and the auxiliary loss over the global
    // batch (aux_loss_scope "global": the loads of all data-parallel ranks, and tp ranks under
    // sp, added first). Over each rank's own rows ("micro_batch", Megatron-Core's default) the
    // auxiliary loss depends on how the batch is cut into ranks, so no layout could match.
    for (const char* o : {"model.moe.experts=8", "model.moe.top_k=2", "model.moe.expert_ffn=32",
                          "model.moe.aux_loss_coeff=0.05", "model.moe.aux_loss_scope=global",
                          "model.moe.z_loss_coeff=1e-3"})
      overrides.push_back(o);
  }
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
eps = 1e-2  # see above
[data]
source = "synthetic"
[parallel]
bucket_mb = 0.02
)",
      "test", overrides);
  if (k.family != "gpt2") c.model.n_kv_head = 2;        // tp 4 and 8 share each kv head
  if (k.family == "qwen3") c.model.attn_head_dim = 12;  // heads apart from d_model / n_head = 8
  if (k.family == "llama3") {  // hd 8: pairs in all three of Llama 3's frequency bands
    c.model.rope_scaling = RopeScaling::llama3;
    c.model.rope_theta = 50000.0f;
    c.model.rope_original_max_seq_len = 256;
  }
  c.parallel.tp = k.tp;
  c.parallel.pp = k.pp;
  c.parallel.dp = k.dp;
  c.parallel.zero = k.zero;
  c.parallel.sp = k.sp;
  c.parallel.vpp = k.vpp;
  c.parallel.schedule = parse_enum<ScheduleKind>("parallel.schedule", k.schedule);
  c.train.recompute = parse_enum<Recompute>("train.recompute", k.recompute);
  c.train.precision = parse_enum<Precision>("train.precision", k.precision);
  c.parallel.grad_reduce_dtype =
      parse_enum<GradReduceType>("parallel.grad_reduce_dtype", k.grad_reduce);
  c.optim.grad_clip = k.grad_clip;
  return c;
}

struct RunResult {
  std::vector<double> losses, grad_norms;
  std::vector<float> params;  // global tensors, single-process layout (rank 0)
  std::vector<double> bubbles;
  std::vector<std::vector<float>> grads;  // each step's reduced gradients, global (rank 0)
};

RunResult train(const RunConfig& c, ProcessGroups* g, bool keep_grads = false) {
  Trainer t(c, g);
  RunResult r;
  for (int i = 0; i < c.train.steps; ++i) {
    const StepResult s = t.train_step();
    r.losses.push_back(s.loss);
    r.grad_norms.push_back(s.grad_norm);
    r.bubbles.push_back(s.bubble_fraction);
    if (keep_grads) r.grads.push_back(t.global_grads());
  }
  r.params = t.global_params();
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

// One process with the same global batch: micro-batches of kBatch * dp sequences (the loader
// gives dp rank r rows [r * kBatch, (r + 1) * kBatch) of each), micro_batches of them per step.
const RunResult& reference(const Case& k, bool keep_grads = false) {
  static std::map<std::string, RunResult> cache;
  const std::string key = cat(k.family, "_", k.replicas(), "_", k.micro_batches, "_", k.precision,
                              "_", k.grad_clip, "_", k.steps, k.doc_mask ? "_docmask" : "",
                              k.flash ? "_flash" : "", keep_grads ? "_grads" : "");
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  Case one = k;
  one.tp = one.pp = one.dp = one.vpp = one.ep = one.cp = 1;
  one.zero = 0;
  one.sp = false;
  one.schedule = "1f1b";
  one.recompute = "none";
  one.grad_reduce = "f32";
  const RunConfig c =
      config_for(one, kBatch * k.replicas(), k.micro_batches,
                 (fs::temp_directory_path() / cat("strata_test_mp_ref_", key)).string());
  return cache[key] = train(c, nullptr, keep_grads);
}

class LayoutEquivalence : public ::testing::TestWithParam<Case> {};

TEST_P(LayoutEquivalence, MatchesOneProcess) {
  const Case& k = GetParam();
  const int world = world_size();
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  ProcessGroups g =
      ProcessGroups::create(resolve_layout(k.tp, k.pp, k.dp, k.zero, world, k.ep, k.cp));
  RunConfig c = config_for(
      k, kBatch, k.micro_batches,
      (fs::temp_directory_path() / cat("strata_test_mp_np", world, "_", k.name(), "_", rank))
          .string());
  const RunResult got = train(c, &g);
  int ok = 1;
  if (rank == 0) {
    const RunResult& want = reference(k);
    const double tol = k.tolerance();
    double norm_first = 0, norm_later = 0;
    for (size_t i = 0; i < want.losses.size(); ++i) {
      EXPECT_LE(rel(got.losses[i], want.losses[i]), tol)
          << "step " << i + 1 << ": " << got.losses[i] << " vs " << want.losses[i];
      if (!(rel(got.losses[i], want.losses[i]) <= tol)) ok = 0;
      // The norm before clipping: a wrong reduction scale (a sum for a mean, a partial sum added
      // twice) shows here, where the clipped update would hide it.
      // At the losses' tolerance on every step: see config_for's AdamW eps.
      const double e = rel(got.grad_norms[i], want.grad_norms[i]);
      EXPECT_LE(e, tol) << "grad_norm step " << i + 1 << ": " << got.grad_norms[i] << " vs "
                        << want.grad_norms[i];
      if (!(e <= tol)) ok = 0;
      (i == 0 ? norm_first : norm_later) = std::max(i == 0 ? norm_first : norm_later, e);
    }
    std::printf("[ grad_norm ] %s: step 1 %.1e, later steps %.1e (relative)\n", k.name().c_str(),
                norm_first, norm_later);
    ASSERT_EQ(got.params.size(), want.params.size());
    EXPECT_LE(rel_l2(got.params, want.params), tol) << "final parameters";
    if (!(rel_l2(got.params, want.params) <= tol)) ok = 0;
    if (k.pp > 1) {
      // Each run measures its pipeline bubble; it must be a fraction.
      EXPECT_GT(got.bubbles.back(), 0.0);
      EXPECT_LT(got.bubbles.back(), 1.0);
    }
  }
  MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
  EXPECT_EQ(ok, 1);
}

// What a case exercises, one string per axis value (and the combinations with their own code
// paths): the ci subset must hold each of them at least once per rank count.
std::set<std::string> features(const Case& k) {
  std::set<std::string> f = {"family " + k.family, cat("tp ", k.tp),     cat("pp ", k.pp),
                             cat("dp ", k.dp),     cat("zero ", k.zero), cat("vpp ", k.vpp)};
  if (k.pp > 1) {
    f.insert("schedule " + k.schedule);
    f.insert(k.family + " pp");  // gpt2: the tied embedding across stages; llama: untied head
  }
  if (k.tp > 1) f.insert(k.family + (k.sp ? " tp with sp" : " tp without sp"));
  if (k.family == "llama" && k.tp > 2) f.insert("kv heads shared by tp ranks");  // n_kv_head 2
  if (k.tp > 1 && k.pp > 1) f.insert("tp x pp");
  if (k.dp > 1 && (k.tp > 1 || k.pp > 1)) f.insert("dp x (tp or pp)");
  return f;
}

// The ci subset, by design: greedily the case that adds the most features not yet covered
// (ties: the first in matrix order) until every feature of the full f32 matrix is covered. At 2
// ranks that is 10 of 16 cases, at 4 ranks 8 of 38, at 8 ranks 8 of 70; every case the full
// matrix adds after it (bf16, fp16, bf16 gradient reduction, recomputation) runs in both.
std::vector<Case> ci_subset(const std::vector<Case>& all) {
  std::set<std::string> need, have;
  for (const Case& k : all) {
    const std::set<std::string> f = features(k);
    need.insert(f.begin(), f.end());
  }
  std::vector<Case> out;
  while (have != need) {
    size_t best = 0, best_gain = 0;
    for (size_t i = 0; i < all.size(); ++i) {
      size_t gain = 0;
      for (const std::string& x : features(all[i])) gain += have.count(x) == 0;
      if (gain > best_gain) best = i, best_gain = gain;
    }
    out.push_back(all[best]);
    const std::set<std::string> f = features(all[best]);
    have.insert(f.begin(), f.end());
  }
  return out;
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
    // ZeRO-2 and -3 compose with tensor parallelism (not with pipelines: a config error); at 2
    // ranks, with pure data parallelism, so that every rank count runs every stage.
    for (int zero : {2, 3}) {
      if (world >= 4)
        out.push_back(Case{family, 2, 1, world / 2, 1, zero, zero == 3});
      else
        out.push_back(Case{family, 1, 1, world, 1, zero});
    }
  }
  if (ci) out = ci_subset(out);
  // Mixture of experts with expert parallelism (GitHub issue 21), in ci too: ep alone, ep x dp,
  // ep x tp (with sp), ep x pp, ep 4 under ZeRO-1 and ZeRO-3, and at 8 ranks ep x tp x pp x dp.
  auto moe = [](int tp, int pp, int dp, int zero, int ep, bool sp = false) {
    Case k{"mixtral", tp, pp, dp, 1, zero, sp};
    k.ep = ep;
    return k;
  };
  if (world == 2) {
    out.push_back(moe(1, 1, 2, 0, 2));
    out.push_back(moe(1, 1, 2, 3, 2));
  } else if (world == 4) {
    out.push_back(moe(1, 1, 4, 1, 2));        // ep 2 x dp 2
    out.push_back(moe(2, 1, 2, 1, 2, true));  // ep 2 x tp 2 (sp)
    out.push_back(moe(2, 1, 2, 0, 2));        // ep 2 x tp 2 (no sp: the MoE replicated over tp)
    out.push_back(moe(1, 2, 2, 1, 2));        // ep 2 x pp 2
    out.push_back(moe(1, 1, 4, 1, 4));
    out.push_back(moe(1, 1, 4, 3, 4));
  } else if (world == 8) {
    out.push_back(moe(2, 2, 2, 1, 2, true));
    out.push_back(moe(1, 1, 8, 3, 4));
  }
  // The families added through the block seam, a row each at every rank count, in ci too: Qwen3
  // (per-head q/k norms, heads 12 wide) over tp with sp (tp 4 > n_kv_head 2 from 4 ranks: shared
  // kv heads, and q/k norm gradients summed over the group), and Llama 3.x's rope scaling over pp
  // (with dp and ZeRO-1 from 4 ranks).
  if (world >= 2) {
    Case q{"qwen3", world >= 4 ? 4 : 2, world >= 8 ? 2 : 1, 1, 1, 0, true};
    q.dp = world / (q.tp * q.pp);
    q.zero = q.dp > 1 ? 1 : 0;
    out.push_back(q);
    out.push_back(Case{"llama3", 1, 2, world / 2, 1, world / 2 > 1 ? 1 : 0});
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
  // Context parallelism (GitHub issue 22), in ci too: ring and Ulysses, the learned positions of
  // gpt2, document masking, recomputation and bf16 at 2 ranks; cp 4, cp x tp (sp), cp x pp,
  // cp x dp under ZeRO-3 and cp x ep at 4; cp x tp x pp and cp 8 at 8.
  auto context = [](std::string family, int tp, int pp, int dp, int zero, int cp,
                    std::string impl = "ring") {
    Case k{std::move(family), tp, pp, dp, 1, zero, tp > 1};
    k.cp = cp;
    k.cp_impl = std::move(impl);
    k.flash = true;
    return k;
  };
  if (world == 2) {
    out.push_back(context("llama", 1, 1, 2, 0, 2));
    out.push_back(context("llama", 1, 1, 2, 1, 2, "ulysses"));
    out.push_back(context("gpt2", 1, 1, 2, 0, 2));
    for (const char* impl : {"ring", "ulysses"}) {
      Case d = context("llama", 1, 1, 2, 0, 2, impl);
      d.doc_mask = true;
      out.push_back(d);
    }
    Case r = context("llama", 1, 1, 2, 0, 2);
    r.recompute = "full";
    out.push_back(r);
    Case b = context("llama", 1, 1, 2, 1, 2);
    b.precision = "bf16";
    out.push_back(b);
  } else if (world == 4) {
    out.push_back(context("llama", 1, 1, 4, 1, 4));
    out.push_back(context("llama", 2, 1, 2, 0, 2));
    out.push_back(context("gpt2", 1, 2, 2, 0, 2));
    out.push_back(context("llama", 1, 1, 4, 3, 2));
    Case u = context("llama", 1, 1, 4, 3, 2, "ulysses");
    u.doc_mask = true;
    out.push_back(u);
    Case e = context("mixtral", 1, 1, 4, 1, 2);
    e.ep = 2;
    out.push_back(e);
  } else if (world == 8) {
    out.push_back(context("llama", 2, 2, 2, 0, 2));
    out.push_back(context("gpt2", 1, 1, 8, 1, 8));
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

// The raw gradients each reduction leaves, with clipping off, against one process's (relative L2:
// 1e-5 after step 1, kGradDrift after step 2; measured over the full matrix 4.6e-7 and 4.0e-5):
// tp partial sums (the sequence-parallel norms and position table, kv heads shared by tp ranks),
// tp without sp (the row/column-parallel reductions inside backward), the pipeline's tied
// embedding (first + last stage), and ZeRO-2's reduce-scatter under tp. A reduction counted
// twice, or a sum for a mean, is off by a factor of 2 or more; step 2 would also see a gradient
// left over from step 1.
constexpr double kGradDrift = 2e-4;

class LayoutGradients : public ::testing::TestWithParam<Case> {};

TEST_P(LayoutGradients, MatchOneProcess) {
  const Case& k = GetParam();
  const int world = world_size();
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  ProcessGroups g =
      ProcessGroups::create(resolve_layout(k.tp, k.pp, k.dp, k.zero, world, k.ep, k.cp));
  const RunResult got =
      train(config_for(k, kBatch, k.micro_batches,
                       (fs::temp_directory_path() /
                        cat("strata_test_mp_grads_np", world, "_", k.name(), "_", rank))
                           .string()),
            &g, true);
  int ok = 1;
  if (rank == 0) {
    const RunResult& want = reference(k, true);
    ASSERT_EQ(got.grads.size(), want.grads.size());
    for (size_t i = 0; i < want.grads.size(); ++i) {
      ASSERT_EQ(got.grads[i].size(), want.grads[i].size());
      // Step 1: the same parameters, only the reductions differ. Step 2 starts from parameters
      // AdamW moved a few ulps apart (see config_for).
      const double tol = i == 0 ? 1e-5 : kGradDrift;
      const double e = rel_l2(got.grads[i], want.grads[i]);
      std::printf("[ gradients ] %s: step %zu %.1e (relative L2)\n", k.name().c_str(), i + 1, e);
      EXPECT_LE(e, tol) << "gradients after step " << i + 1;
      if (!(e <= tol)) ok = 0;
    }
  }
  MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
  EXPECT_EQ(ok, 1);
}

std::vector<Case> gradient_cases() {
  const int world = world_size();
  std::vector<Case> out = {
      Case{"gpt2", 2, 1, world / 2, 1, world > 2 ? 1 : 0, true},   // sp norms, position table
      Case{"gpt2", 2, 1, world / 2, 1, world > 2 ? 1 : 0, false},  // inside backward only
      Case{"gpt2", 1, 2, world / 2, 1, world > 2 ? 1 : 0},         // tied embedding over pp
  };
  if (world >= 4) {
    out.push_back(Case{"llama", 4, 1, world / 4, 1, world > 4 ? 1 : 0});  // shared kv heads
    out.push_back(Case{"gpt2", 2, 1, world / 2, 1, 2});                   // ZeRO-2 under tp
  }
  // Experts reduced over the expert-data-parallel group, scaled by 1 / ep (ZeRO-2 from 4 ranks:
  // reduce-scattered over it).
  Case experts{"mixtral", 1, 1, world, 1, world >= 4 ? 2 : 0};
  experts.ep = 2;
  out.push_back(experts);
  for (Case& k : out) {
    k.grad_clip = 0;
    k.steps = 2;
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Reductions, LayoutGradients, ::testing::ValuesIn(gradient_cases()),
                         [](const auto& param_info) { return param_info.param.name(); });

// A checkpoint holds global tensors: saved by one layout (tp = 2 with pipeline stages), it resumes
// on another (the same ranks as pipeline stages only) and in one process, and both continue with
// the losses and parameters of the run that was never interrupted.
// Saves with layout a after half the steps (every rank writing its own slices), resumes with
// layout c and in one process, and compares both with the uninterrupted run of a (same global
// batch: the micro-batch per rank scales with 1 / dp).
void check_resume_on_other_layout(const Case& a, const Case& c, const std::string& tag) {
  ASSERT_EQ(kBatch * a.replicas() % c.replicas(), 0);
  const int world = world_size();
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const std::string base =
      (fs::temp_directory_path() / cat("strata_test_mp_ckpt_np", world, "_", tag, "_")).string();
  {
    ProcessGroups g =
        ProcessGroups::create(resolve_layout(a.tp, a.pp, a.dp, a.zero, world, a.ep, a.cp));
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
  ProcessGroups g =
      ProcessGroups::create(resolve_layout(c.tp, c.pp, c.dp, c.zero, world, c.ep, c.cp));
  const RunResult other = resumed(
      config_for(c, kBatch * a.replicas() / c.replicas(), c.micro_batches, cat(base, "c")), &g);
  int ok = 1;
  if (rank == 0) {
    const RunResult& want = reference(a);
    Case one = a;
    one.tp = one.pp = one.dp = one.ep = one.cp = 1;
    one.zero = 0;
    const RunResult single =
        resumed(config_for(one, kBatch * a.replicas(), a.micro_batches, base + "one"), nullptr);
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

// Experts are saved as global tensors: expert-parallel shards (under ZeRO-3 over the
// expert-data-parallel group at 4 ranks and more) resume as whole experts on tensor and pipeline
// layouts, and back into expert shards of another ep.
TEST(ModelParallelCheckpoint, ExpertShardsResumeOnAnyLayout) {
  const int world = world_size();
  Case a{"mixtral", 1, 1, world, 1, world >= 4 ? 3 : 1};
  a.ep = world >= 4 ? world / 2 : 2;
  Case c{"mixtral", 2, world / 2, 1};
  check_resume_on_other_layout(a, c, "ep_to_tp_pp");
  Case d{"mixtral", 1, 1, world, 1, 1};
  d.ep = world >= 4 ? 4 : 2;
  if (world >= 4) a.ep = 2;
  check_resume_on_other_layout(d, a, "ep_to_ep");
}

// Context parallelism is not in checkpoints (every cp rank holds the whole model): a run with
// cp = 2 resumes with another cp (1 at 2 ranks, 4 at 4 and more) and in one process.
TEST(ModelParallelCheckpoint, ContextParallelResumesWithAnyCp) {
  const int world = world_size();
  Case a{"llama", 1, 1, world, 1, 1};
  a.cp = 2;
  a.flash = true;
  Case c = a;
  c.cp = world >= 4 ? 4 : 1;
  check_resume_on_other_layout(a, c, "cp_to_cp");
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
