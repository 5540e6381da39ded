// The memory model against the engine: for each config, the real objects of one rank are built
// in this process (the Trainer itself, or the same objects Trainer::build_model builds, on
// communicators that only know their rank and size) and the arena's bytes per category must
// equal the estimate exactly. Multi-rank runs check the same end to end (validate_memory.sh).
#include <gtest/gtest.h>
#include <omp.h>

#include <chrono>
#include <filesystem>

#include "comm/process_groups.h"
#include "model/decoder.h"
#include "optim/adamw.h"
#include "optim/host_offload.h"
#include "optim/offload.h"
#include "parallel/data_parallel.h"
#include "parallel/model_parallel.h"
#include "parallel/pipeline_executor.h"
#include "plan/memory_model.h"
#include "run/run_plan.h"
#include "train/small_run.h"
#include "train/trainer.h"

namespace strata {
namespace {

// A communicator that knows its rank and size; building a rank needs no more. Any communication
// fails the test.
class ShapeComm final : public Comm {
 public:
  ShapeComm(int rank, int size, std::string name) : rank_(rank), size_(size), name_(name) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& name() const override { return name_; }
  int world_rank_of(int group_rank) const override { return group_rank; }
  WorkHandle all_reduce(void*, int64_t, DType, ReduceOp) override { return none(); }
  WorkHandle reduce_scatter(const void*, void*, int64_t, DType, ReduceOp) override {
    return none();
  }
  WorkHandle all_gather(const void*, void*, int64_t, DType) override { return none(); }
  WorkHandle broadcast(void*, int64_t, DType, int) override { return none(); }
  WorkHandle send(const void*, int64_t, DType, int, int) override { return none(); }
  WorkHandle recv(void*, int64_t, DType, int, int) override { return none(); }
  WorkHandle all_to_all_v(const void*, const int64_t*, void*, const int64_t*, DType) override {
    return none();
  }
  void barrier() override { none(); }
  void set_step(int64_t) override {}
  void set_timeout(double) override {}
  CommStats stats() const override { return {}; }
  void reset_stats() override {}

 private:
  WorkHandle none() const {
    ADD_FAILURE() << "ShapeComm " << name_ << ": no communication while building a rank";
    return nullptr;
  }
  int rank_, size_;
  std::string name_;
};

// One rank (tp rank 0, dp rank 0, so ep rank 0) of pipeline stage pp_rank, built as
// Trainer::build_model builds it under process groups (the experts of an MoE model reduced over
// the expert-data-parallel group). ModelParallel needs real process groups, so its buffers are
// added from the ParamStore's slices here, the way its constructor sizes them.
MemBytes build_rank(const RunConfig& config, int world, int pp_rank, const std::string& dir) {
  const RunPlan plan = resolve_run_plan(config, world, true);
  const TrainConfig& t = config.train;
  const int tp = plan.layout.tp, pp = plan.layout.pp, dp = plan.layout.dp, ep = plan.layout.ep;
  const int vpp = static_cast<int>(config.parallel.vpp);
  const int m = static_cast<int>(plan.micro_batches);
  ShapeComm dp_comm(0, dp, "dp"), tp_comm(0, tp, "tp"), pp_comm(pp_rank, pp, "pp");
  ShapeComm ep_comm(0, ep, "ep"), edp_comm(0, plan.layout.edp(), "edp");
  ShapeComm cp_comm(0, plan.layout.cp, "cp");
  Arena arena;
  DataParallel data_parallel(dp_comm, plan.data_parallel, &edp_comm);
  DecoderOptions o = plan.decoder_options(0, pp_rank, 0);
  o.plan = [&](ParamStore& params) { data_parallel.plan(params); };
  std::vector<PipelineAction> actions;
  if (plan.sharded_model()) {
    o.tp = tp > 1 ? &tp_comm : nullptr;
    o.ep = ep > 1 ? &ep_comm : nullptr;
    if (pp > 1) {
      actions = make_schedule(plan.schedule, pp, m, vpp, pp_rank);
      o.chunk_slots = pipeline_slots_needed(actions, vpp);
    }
  }
  // Trainer::build_model: the cp group, and the Decoder at this rank's rows per sequence.
  o.context = {plan.layout.cp > 1 ? &cp_comm : nullptr, config.parallel.cp_impl,
               config.data.document_mask};
  Decoder model(config.model, arena, t.batch_size, plan.seq_len, o);
  data_parallel.setup(model.params(), arena);
  std::unique_ptr<AdamW> adam;
  std::unique_ptr<OffloadedAdamW> offload;
  if (plan.optimizer_offload == OptimizerOffload::nvme) {
    OffloadOptions oo;
    oo.dir = dir + "/offload";
    oo.chunk_elements = plan.offload_chunk_elements;
    offload = std::make_unique<OffloadedAdamW>(data_parallel.optimizer_segments(),
                                               data_parallel.optimizer_state_size(), arena,
                                               config.optim, oo);
  } else {
    adam = std::make_unique<AdamW>(data_parallel.optimizer_segments(),
                                   data_parallel.optimizer_state_size(), arena, config.optim);
  }
  int64_t model_parallel = 0;  // ModelParallel's constructor: comm elements
  if (plan.sharded_model()) {
    const ParamStore& ps = model.params();
    int64_t tp_summed = 0, kv_summed = 0;
    for (const ParamInfo& info : ps.all())
      if (info.slice.sum_grads) (info.slice.replicated ? tp_summed : kv_summed) += info.numel;
    model_parallel = std::max(tp_summed, kv_summed) + kv_summed * tp;
    const ModelShard& sh = model.shard();
    if (model.config().tie_embeddings && pp > 1 && (sh.has_embedding || sh.has_head))
      model_parallel += ps.info(sh.has_embedding ? model.index().embed : model.index().head).numel;
  }
  std::unique_ptr<PipelineExecutor> pipe;
  if (pp > 1) pipe = std::make_unique<PipelineExecutor>(model, pp_comm, actions, m, arena);
  MemBytes bytes = arena.stats().current;
  bytes[static_cast<int>(MemCategory::comm)] += 4 * model_parallel;
  return bytes;
}

// The one-process trainer (no launcher, 1x1x1): Trainer::build_model's first branch.
MemBytes build_single(const RunConfig& config, const std::string& dir) {
  const RunPlan plan = resolve_run_plan(config, 1, false);
  const TrainConfig& t = config.train;
  Arena arena;
  DecoderOptions o = plan.decoder_options();
  o.context = {nullptr, config.parallel.cp_impl, config.data.document_mask};
  Decoder model(config.model, arena, t.batch_size, plan.seq_len, o);
  std::unique_ptr<AdamW> adam;
  std::unique_ptr<OffloadedOptimizer> offload;
  if (plan.optimizer_offload == OptimizerOffload::nvme) {
    OffloadOptions oo;
    oo.dir = dir + "/offload";
    oo.chunk_elements = plan.offload_chunk_elements;
    offload = std::make_unique<OffloadedAdamW>(segments_for_all(model.params()),
                                               model.params().size(), arena, config.optim, oo);
  } else if (plan.optimizer_offload ==
             OptimizerOffload::cpu) {  // the state in a host arena of its own
    offload = std::make_unique<HostOffloadAdamW>(
        segments_for_all(model.params()), model.params().size(), config.optim, model.backend());
  } else {
    adam = std::make_unique<AdamW>(segments_for_all(model.params()), model.params().size(), arena,
                                   config.optim);
  }
  return arena.stats().current;
}

RunConfig small(const std::string& dir, const std::vector<std::string>& sets) {
  std::vector<std::string> all = {"model.n_layer=4", "train.batch_size=2", "system.threads=0"};
  all.insert(all.end(), sets.begin(), sets.end());
  RunConfig c = test_support::small_run_config(dir, all);
  c.model.finalize();
  return c;
}

std::string joined(const std::vector<std::string>& sets) {
  std::string out;
  for (const std::string& s : sets) out += (out.empty() ? "" : " ") + s;
  return out.empty() ? "(defaults)" : out;
}

void expect_equal(const MemBytes& arena, const MemoryEstimate& e, const std::string& what) {
  int64_t total = 0;
  for (int c = 0; c < kNumMemCategories; ++c) {
    EXPECT_EQ(arena[c], e.bytes[c])
        << what << ": " << mem_category_name(static_cast<MemCategory>(c));
    total += arena[c];
  }
  EXPECT_EQ(total, e.total) << what;
}

MemoryModelOptions with_threads(bool under_launcher) {
  MemoryModelOptions o;
  o.under_launcher = under_launcher;
  o.threads = omp_get_max_threads();
  return o;
}

// Every precision, recomputation mode and attention kernel of both families, one process.
TEST(MemoryModel, OneProcessMatchesTheArenaExactly) {
  const std::string dir = test_support::fresh_dir("memory_model_single");
  for (const char* family : {"gpt2", "llama"}) {
    for (const char* precision : {"f32", "bf16", "fp16"}) {
      for (const char* recompute : {"none", "selective", "full"}) {
        for (AttentionKernel attention : {AttentionKernel::naive, AttentionKernel::flash}) {
          std::vector<std::string> sets = {
              cat("model.family=", family), cat("train.precision=", precision),
              cat("train.recompute=", recompute), cat("model.attention=", attention)};
          if (std::string(family) == "llama") sets.push_back("model.n_kv_head=2");
          if (std::string(recompute) == "full") sets.push_back("train.recompute_layers=3");
          const RunConfig c = small(dir, sets);
          expect_equal(build_single(c, dir), estimate_rank_memory(c, 1, 0, with_threads(false)),
                       joined(sets));
        }
      }
    }
  }
  for (const auto& sets : std::vector<std::vector<std::string>>{
           {"optim.offload=nvme", "optim.offload_chunk_mb=0.01"},
           {"optim.offload=nvme", "train.precision=bf16"},
           {"optim.offload=cpu", "train.precision=bf16"},
           {"train.activation_offload=true"},
           {"train.activation_offload=true", "train.precision=bf16", "train.recompute=selective",
            "model.attention=naive"},
           {"train.grad_accum=3", "train.seq_len=16"},
           // Document masking on one rank: ContextAttention's masks and its one-block ring.
           {"model.attention=flash", "data.document_mask=true", "data.eos_id=7"},
           {"model.family=llama", "model.n_kv_head=2", "model.attention=flash",
            "data.document_mask=true", "data.eos_id=7", "train.precision=bf16",
            "train.recompute=full"},
           // The MoE layer's kept tensors and scratch (mixtral: f32 only).
           {"model.family=mixtral", "model.n_kv_head=2", "model.moe.experts=4"},
           {"model.family=mixtral", "model.n_kv_head=2", "model.moe.experts=4",
            "model.moe.z_loss_coeff=0.01", "model.moe.capacity_factor=1.5",
            "model.moe.expert_ffn=48", "train.recompute=full", "train.recompute_layers=1"},
           {"model.family=mixtral", "model.n_kv_head=2", "model.moe.experts=4",
            "train.activation_offload=true", "train.recompute=selective"},
           // Shared experts: their gate|up and activation kept, their gradients in scratch.
           {"model.family=mixtral", "model.n_kv_head=2", "model.moe.experts=4",
            "model.moe.shared_experts=2", "model.moe.shared_ffn=24"},
           {"model.family=mixtral", "model.n_kv_head=2", "model.moe.experts=4",
            "model.moe.shared_experts=1", "model.moe.activation=gelu",
            "model.moe.gating=sigmoid_bias", "model.moe.bias_update_rate=0.001",
            "model.moe.aux_loss_scope=global"},
           // qwen3_moe: the head norms' kept q, k beside the MoE layer's tensors.
           {"model.family=qwen3_moe", "model.n_kv_head=2", "model.head_dim=12",
            "model.moe.experts=4", "model.moe.normalize_topk=false"},
           {"model.family=qwen3_moe", "model.n_kv_head=2", "model.moe.experts=4",
            "model.moe.z_loss_coeff=0.01", "train.recompute=selective"}}) {
    const RunConfig c = small(dir, sets);
    expect_equal(build_single(c, dir), estimate_rank_memory(c, 1, 0, with_threads(false)),
                 joined(sets));
  }
  std::filesystem::remove_all(dir);
}

// The real Trainer (what `strata train` runs), for a few of the configs above.
TEST(MemoryModel, TrainerMatchesTheArenaExactly) {
  for (const auto& sets : std::vector<std::vector<std::string>>{
           {},
           {"model.family=llama", "model.n_kv_head=2", "train.precision=bf16",
            "model.attention=flash", "train.recompute=selective"},
           {"train.precision=fp16", "train.recompute=full", "optim.offload=nvme",
            "system.threads=1"},
           {"optim.offload=cpu", "train.precision=bf16", "train.activation_offload=true"},
           // MoE: every layer's experts a parameter group of their own.
           {"model.family=mixtral", "model.n_kv_head=2", "model.moe.experts=4",
            "model.moe.shared_experts=1", "model.moe.shared_ffn=32"},
           // Document masking (synthetic tokens: data.eos_id ends a document).
           {"model.family=llama", "model.n_kv_head=2", "model.attention=flash",
            "data.document_mask=true", "data.eos_id=5"}}) {
    const std::string dir = test_support::fresh_dir("memory_model_trainer");
    const RunConfig c = small(dir, sets);
    Trainer trainer(c);
    expect_equal(trainer.arena().stats().current,
                 estimate_rank_memory(c, 1, 0, with_threads(false)), joined(sets));
    std::filesystem::remove_all(dir);
  }
}

struct RankCase {
  std::vector<std::string> sets;
  int world = 1, pp_rank = 0;
};

void expect_ranks_equal(const std::vector<RankCase>& cases, const std::string& dir) {
  for (const RankCase& k : cases) {
    const RunConfig c = small(dir, k.sets);
    const std::string what = cat(joined(k.sets), " world ", k.world, " pp rank ", k.pp_rank);
    expect_equal(build_rank(c, k.world, k.pp_rank, dir),
                 estimate_rank_memory(c, k.world, k.pp_rank, with_threads(true)), what);
  }
}

// Under process groups: every ZeRO stage, gradient reduction in bf16, tensor parallelism with and
// without sp (GQA kv heads split and shared), pipelines (GPipe, 1F1B, interleaved; first, middle
// and last stages; tied embeddings; explicit stage sizes), offload, and their combinations.
TEST(MemoryModel, RanksUnderProcessGroupsMatchTheArenaExactly) {
  const std::string dir = test_support::fresh_dir("memory_model_ranks");
  const std::vector<RankCase> cases = {
      {{"parallel.zero=2"}, 1},
      {{"parallel.zero=0"}, 4},
      {{"parallel.zero=1", "train.precision=bf16"}, 4},
      {{"parallel.zero=2", "parallel.bucket_mb=0.05"}, 4},
      {{"parallel.zero=3", "parallel.bucket_mb=0.05", "train.precision=bf16"}, 4},
      {{"parallel.zero=3", "train.precision=fp16", "model.family=llama", "model.n_kv_head=2"}, 2},
      {{"parallel.zero=1", "parallel.grad_reduce_dtype=bf16"}, 2},
      {{"parallel.zero=2", "parallel.grad_reduce_dtype=bf16", "parallel.bucket_mb=0.1"}, 2},
      {{"parallel.tp=2"}, 2},
      {{"parallel.tp=2", "parallel.sp=true", "train.precision=bf16"}, 4},
      {{"parallel.tp=4", "parallel.sp=true", "model.family=llama", "model.n_kv_head=2"}, 4},
      {{"parallel.tp=2", "model.family=llama", "model.n_kv_head=2", "parallel.zero=3"}, 4},
      {{"parallel.pp=2", "train.grad_accum=4"}, 2, 0},
      {{"parallel.pp=2", "train.grad_accum=4"}, 2, 1},
      {{"parallel.pp=2", "parallel.schedule=gpipe", "train.grad_accum=3"}, 4, 1},
      {{"parallel.pp=4", "train.grad_accum=4", "model.family=llama", "model.n_kv_head=2"}, 4, 2},
      {{"parallel.pp=2", "parallel.vpp=2", "parallel.schedule=interleaved", "train.grad_accum=4"},
       2,
       0},
      {{"parallel.pp=2", "parallel.vpp=2", "parallel.schedule=interleaved", "train.grad_accum=4",
        "train.recompute=selective"},
       2,
       1},
      {{"parallel.pp=2", "parallel.stage_layers=[3, 1]", "train.grad_accum=2",
        "train.recompute=full", "train.recompute_layers=2"},
       2,
       0},
      {{"parallel.tp=2", "parallel.pp=2", "parallel.sp=true", "parallel.zero=1",
        "train.precision=bf16", "train.grad_accum=4", "model.attention=flash"},
       8,
       1},
      {{"parallel.zero=1", "optim.offload=nvme", "optim.offload_chunk_mb=0.02"}, 2},
  };
  expect_ranks_equal(cases, dir);
  std::filesystem::remove_all(dir);
}

// Mixture-of-Experts models under process groups: each layer's experts a parameter group of their
// own, bucketed apart and reduced (and ZeRO-sharded) over the expert-data-parallel group; with
// ep > 1 the rank's E / ep experts and the exchange's buffers, sized for the worst-case routing
// (every rank's tokens to this rank's experts, or the capacity); composed with every ZeRO stage,
// bf16 reduction, tp with and without sp, pipelines, shared experts and qwen3_moe.
TEST(MemoryModel, MixtureOfExpertsRanksMatchTheArenaExactly) {
  const std::string dir = test_support::fresh_dir("memory_model_moe_ranks");
  const std::vector<std::string> moe = {"model.family=mixtral", "model.n_kv_head=2",
                                        "model.moe.experts=4"};
  auto with = [&](std::vector<std::string> sets) {
    sets.insert(sets.begin(), moe.begin(), moe.end());
    return sets;
  };
  const std::vector<RankCase> cases = {
      {with({"parallel.zero=2"}), 2},  // ep 1: the experts still bucketed apart, over dp
      {with({"parallel.zero=0", "parallel.bucket_mb=0.05"}), 4},
      {with({"parallel.ep=2"}), 2},
      {with({"parallel.ep=2", "parallel.zero=1", "parallel.bucket_mb=0.05"}), 4},
      {with({"parallel.ep=2", "parallel.zero=2", "parallel.grad_reduce_dtype=bf16"}), 4},
      {with({"parallel.ep=4", "parallel.zero=3", "parallel.bucket_mb=0.05"}), 4},
      {with({"parallel.ep=2", "parallel.zero=3", "parallel.bucket_mb=0.05"}), 4},
      {with({"parallel.ep=2", "model.moe.capacity_factor=1.25", "train.recompute=full",
             "train.recompute_layers=2"}),
       2},
      {with({"parallel.ep=2", "model.moe.z_loss_coeff=0.01", "train.recompute=selective",
             "model.moe.shared_experts=2", "model.moe.shared_ffn=24"}),
       2},
      {with({"parallel.ep=2", "parallel.tp=2"}), 4},
      {with({"parallel.ep=2", "parallel.tp=2", "parallel.sp=true", "parallel.zero=1"}), 4},
      {with({"parallel.ep=2", "parallel.pp=2", "train.grad_accum=4"}), 4, 0},
      {with({"parallel.ep=2", "parallel.pp=2", "train.grad_accum=4", "parallel.zero=1"}), 4, 1},
      {with({"parallel.ep=2", "parallel.tp=2", "parallel.pp=2", "parallel.sp=true",
             "train.grad_accum=4"}),
       8, 1},
      {{"model.family=qwen3_moe", "model.n_kv_head=2", "model.moe.experts=4", "parallel.ep=4",
        "parallel.zero=2", "model.moe.shared_experts=1"},
       4},
  };
  expect_ranks_equal(cases, dir);
  std::filesystem::remove_all(dir);
}

// Context parallelism (parallel.cp, carved out of dp): the Decoder at train.seq_len / cp rows per
// sequence, plus ContextAttention's masks per activation store and its ring or Ulysses buffers;
// composed with ZeRO, bf16, tp with and without sp, pipelines (several stores per rank),
// recomputation, activation offload, document masking, MoE, and both implementations.
TEST(MemoryModel, ContextParallelRanksMatchTheArenaExactly) {
  const std::string dir = test_support::fresh_dir("memory_model_cp_ranks");
  const std::vector<std::string> flash = {"model.attention=flash"};
  auto with = [&](std::vector<std::string> sets) {
    sets.insert(sets.begin(), flash.begin(), flash.end());
    return sets;
  };
  const std::vector<RankCase> cases = {
      {with({"parallel.cp=2"}), 2},
      {with({"parallel.cp=2", "parallel.cp_impl=ulysses", "model.family=llama",
             "model.n_kv_head=2"}),
       2},
      {with({"parallel.cp=2", "data.document_mask=true", "data.eos_id=3"}), 2},
      {with({"parallel.cp=2", "parallel.cp_impl=ulysses", "data.document_mask=true",
             "data.eos_id=3"}),
       2},
      {with({"parallel.cp=4", "parallel.zero=1", "train.precision=bf16"}), 4},
      {with({"parallel.cp=2", "parallel.zero=3", "parallel.bucket_mb=0.05"}), 4},
      {with({"parallel.cp=2", "parallel.tp=2"}), 4},
      {with({"parallel.cp=2", "parallel.tp=2", "parallel.sp=true", "model.family=llama",
             "model.n_kv_head=2"}),
       4},
      {with({"parallel.cp=2", "parallel.cp_impl=ulysses", "parallel.tp=2"}), 4},
      {with({"parallel.cp=2", "train.recompute=full", "train.recompute_layers=2"}), 2},
      {with({"parallel.cp=2", "train.activation_offload=true"}), 2},
      {with({"parallel.cp=2", "parallel.pp=2", "train.grad_accum=4"}), 4, 0},
      {with({"parallel.cp=2", "parallel.pp=2", "parallel.vpp=2", "parallel.schedule=interleaved",
             "train.grad_accum=4"}),
       4, 1},
      {with({"parallel.cp=2", "parallel.ep=2", "model.family=mixtral", "model.n_kv_head=2",
             "model.moe.experts=4"}),
       2},
  };
  expect_ranks_equal(cases, dir);
  std::filesystem::remove_all(dir);
}

// The local rows are what shrinks: cp 2 holds half of every activation a layer keeps, and the
// report says so in a note.
TEST(MemoryModel, ContextParallelismHalvesTheActivationsAndSaysSo) {
  const RunConfig one = small("unused", {"model.attention=flash"});
  const RunConfig two = small("unused", {"model.attention=flash", "parallel.cp=2"});
  const MemoryEstimate e1 = estimate_rank_memory(one, 2, 0), e2 = estimate_rank_memory(two, 2, 0);
  EXPECT_EQ(2 * e2.activation_bytes_per_layer, e1.activation_bytes_per_layer);
  EXPECT_EQ(e2.category(MemCategory::params), e1.category(MemCategory::params));
  EXPECT_TRUE(e1.notes.empty());
  ASSERT_EQ(e2.notes.size(), 1u);
  EXPECT_NE(e2.notes[0].find("context parallelism cp 2 (ring): each rank holds 16 of the 32 rows"),
            std::string::npos)
      << e2.notes[0];
  EXPECT_NE(e2.explain.back().find(" cp 2"), std::string::npos) << e2.explain.back();
  const MemoryEstimate ulysses = estimate_rank_memory(
      small("unused", {"model.attention=flash", "parallel.cp=2", "parallel.cp_impl=ulysses"}), 2,
      0);
  ASSERT_EQ(ulysses.notes.size(), 1u);
  EXPECT_NE(ulysses.notes[0].find("Ulysses exchange buffers"), std::string::npos);
}

// The planner states what the expert buffers of ep > 1 assume; ep = 1 holds n * top_k rows exactly.
TEST(MemoryModel, ExpertParallelNotesTheWorstCaseRouting) {
  const std::vector<std::string> moe = {"model.family=mixtral", "model.n_kv_head=2",
                                        "model.moe.experts=4"};
  auto sets = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), moe.begin(), moe.end());
    return small("unused", extra);
  };
  EXPECT_TRUE(estimate_rank_memory(sets({}), 4, 0).notes.empty());
  const MemoryEstimate ep2 = estimate_rank_memory(sets({"parallel.ep=2"}), 4, 0);
  ASSERT_EQ(ep2.notes.size(), 1u);
  EXPECT_NE(ep2.notes[0].find("worst-case routing"), std::string::npos) << ep2.notes[0];
  EXPECT_EQ(ep2.notes[0].find("capacity"), std::string::npos) << ep2.notes[0];
  const MemoryEstimate capped =
      estimate_rank_memory(sets({"parallel.ep=2", "model.moe.capacity_factor=1.0"}), 4, 0);
  ASSERT_EQ(capped.notes.size(), 1u);
  EXPECT_NE(capped.notes[0].find("capacity factor"), std::string::npos) << capped.notes[0];
  // The experts split over ep: fewer parameters (and their gradients, optimizer state) per rank.
  const MemoryEstimate ep1 = estimate_rank_memory(sets({}), 4, 0);
  const MemoryEstimate ep4 = estimate_rank_memory(sets({"parallel.ep=4"}), 4, 0);
  EXPECT_LT(ep4.category(MemCategory::params), ep1.category(MemCategory::params));
  EXPECT_LT(ep4.category(MemCategory::optimizer), ep1.category(MemCategory::optimizer));
  EXPECT_NE(ep4.explain.back().find(" ep 4"), std::string::npos) << ep4.explain.back();
}

TEST(MemoryModel, LargestStageAndExplanation) {
  const RunConfig c = small("unused", {"parallel.pp=2", "train.grad_accum=4"});
  const MemoryEstimate first = estimate_rank_memory(c, 4, 0), last = estimate_rank_memory(c, 4, 1);
  const MemoryEstimate largest = estimate_memory(c, 4);
  EXPECT_EQ(largest.total, std::max(first.total, last.total));
  EXPECT_EQ(largest.pp_rank, first.total >= last.total ? 0 : 1);
  EXPECT_EQ(first.micro_batches_in_flight, 2);  // 1F1B: pp - rank micro-batches on stage 0
  EXPECT_GT(first.activation_bytes_per_layer, 0);
  ASSERT_EQ(largest.explain.size(), static_cast<size_t>(kNumMemCategories) + 1);
  for (const std::string& line : largest.explain) std::printf("  %s\n", line.c_str());
  const MemoryEstimate zero1 = estimate_rank_memory(small("unused", {"parallel.zero=1"}), 4, 0);
  EXPECT_NE(zero1.explain[static_cast<int>(MemCategory::optimizer)].find("/ dp 4"),
            std::string::npos);
}

// The layout search's load: 20,000 estimates of a 1T-parameter llama-style model over varied
// layouts. Each must be microseconds; the bound is generous (a sanity check, not a benchmark).
TEST(MemoryModel, TwentyThousandEstimatesOfATrillionParameterModelTakeUnderTwoSeconds) {
  RunConfig c =
      small("unused", {"model.family=llama", "model.n_layer=128", "model.d_model=25600",
                       "model.n_head=160", "model.n_kv_head=160", "model.vocab_size=51200",
                       "model.max_seq_len=2048", "train.seq_len=2048", "train.batch_size=1"});
  c.model.finalize();
  EXPECT_GT(c.model.num_params(), int64_t{1'000'000'000'000});
  const int64_t world = 1024;
  std::vector<RunConfig> layouts;
  for (int64_t tp : {1, 2, 4, 8})
    for (int64_t pp : {1, 2, 4, 8, 16})
      for (int64_t zero : {0, 1, 2, 3})
        for (Recompute recompute : {Recompute::none, Recompute::selective, Recompute::full})
          for (int64_t mb : {1, 2, 4}) {
            if (pp > 1 && zero > 1) continue;
            RunConfig l = c;
            l.parallel.tp = tp;
            l.parallel.pp = pp;
            l.parallel.zero = zero;
            l.parallel.sp = tp > 1;
            l.train.recompute = recompute;
            l.train.batch_size = mb;
            l.train.grad_accum = std::max<int64_t>(1, 64 / mb / (world / (tp * pp)) * pp);
            layouts.push_back(l);
          }
  int64_t checksum = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 20000; ++i) {
    const MemoryEstimate e = estimate_memory(layouts[i % layouts.size()], world);
    checksum += e.total > 0;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("20000 estimates over %zu layouts: %.3f s (%.1f us each)\n", layouts.size(), seconds,
              seconds / 20000 * 1e6);
  EXPECT_EQ(checksum, 20000);
  EXPECT_LT(seconds, 2.0);
  // No overflow: a 1T model without any sharding needs 16 bytes per parameter of model states.
  const MemoryEstimate whole = estimate_rank_memory(c, 1, 0);
  EXPECT_GT(whole.total, 16 * c.model.num_params());
}

}  // namespace
}  // namespace strata
