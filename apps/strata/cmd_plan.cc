// strata plan CONFIG --gpus N [--cluster PROFILE]: memory and step time per rank before launch,
// the layouts that fit ranked by predicted throughput, and why a layout does not fit.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "core/error.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/kernels.h"
#include "plan/calibrate.h"
#include "plan/layout_search.h"
#include "plan/oom_report.h"
#include "plan/plan_report.h"
#include "plan/units.h"
#include "run/config.h"

namespace strata::cli {

namespace {

struct PlanArgs {
  std::string config;
  std::vector<std::string> overrides;
  std::string cluster;
  int64_t gpus = 0;
  int64_t global_batch = 0;
  int64_t top = 5;
  bool explain = false;
  bool json = false;
  bool no_search = false;
  bool calibrate = false;
  std::string calibrate_out = "calibrated.toml";
  int calibrate_ranks = 2;
};

void print_explain(const std::string& title, const PlannedLayout& l) {
  std::printf("\n%s: %s\n  memory (pipeline stage %d, the largest):\n", title.c_str(),
              l.describe().c_str(), l.memory.pp_rank);
  for (const std::string& line : l.memory.explain) std::printf("    %s\n", line.c_str());
  if (!l.step.explain.empty()) std::printf("  step time:\n");
  for (const std::string& line : l.step.explain) std::printf("    %s\n", line.c_str());
}

int run_plan(const PlanArgs& a) {
  if (a.calibrate) {
    CalibrateOptions options;
    options.out = a.calibrate_out;
    options.ranks = a.calibrate_ranks;
    return run_calibrate(options);
  }
  STRATA_CHECK(!a.config.empty(),
               "strata plan: give a config file (strata plan CONFIG --gpus N --cluster PROFILE), "
               "or --calibrate to measure this machine");
  // The engine's own limits (the MoE FFN in f32 on the CPU only, so far) do not stop a plan: a
  // run strata cannot train yet is still predicted, and the output says so.
  std::vector<std::string> engine_limits;
  const RunConfig config = load_config_for_plan(a.config, a.overrides, engine_limits);
  const ParallelConfig& p = config.parallel;
  std::unique_ptr<ClusterProfile> cluster;
  if (!a.cluster.empty())
    cluster = std::make_unique<ClusterProfile>(load_cluster_profile(a.cluster));
  // GPUs: --gpus, the cluster's size when its name carries one (a100x64), or the config's layout.
  const int64_t gpus = a.gpus > 0                       ? a.gpus
                       : cluster && cluster->gpus() > 0 ? cluster->gpus()
                                                        : p.tp * p.pp * std::max<int64_t>(1, p.dp);
  STRATA_CHECK(gpus % (p.tp * p.pp) == 0, "strata plan: --gpus ", gpus,
               " is not a multiple of parallel.tp x parallel.pp = ", p.tp * p.pp,
               " of the config; give --gpus that the layout divides");
  STRATA_CHECK(p.dp == 0 || p.tp * p.pp * p.dp == gpus,
               "strata plan: the config sets parallel.dp = ", p.dp, ", so it runs on ",
               p.tp * p.pp * p.dp, " ranks, not --gpus ", gpus,
               "; drop --gpus or --set parallel.dp=0");
  const PlannedLayout given = evaluate_layout(config, gpus, cluster.get(), 0);
  SearchResult search;
  const bool searching = cluster && !a.no_search;
  if (searching) {
    SearchOptions options;
    options.gpus = gpus;
    options.global_batch = a.global_batch;
    options.top = a.top;
    search = search_layouts(config, *cluster, options);
  }

  if (a.json) {
    nlohmann::json j = {
        {"config", a.config},
        {"gpus", gpus},
        {"parameters", config.model.num_params()},
        {"global_batch",
         search.global_batch > 0 ? search.global_batch : config_global_batch(config, gpus)},
        {"given", planned_layout_json(given)},
        // This machine's CPU kernel level: CPU memory (bf16 operands widened below avx512bf16)
        // and --calibrate's rates are this level's.
        {"cpu_isa", kernels::isa::name(kernels::isa::active())},
        {"cpu_gemm", kernels::gemm_backend()}};
    if (cluster) j["cluster"] = cluster_json(*cluster);
    j["engine_limits"] = engine_limits;
    // Every pipeline stage's total (a run's metrics.jsonl reports rank 0, the first stage).
    j["given"]["stages"] = nlohmann::json::array();
    for (int s = 0; s < config.parallel.pp; ++s) {
      const MemoryEstimate m = estimate_rank_memory(config, gpus, s, memory_options(cluster.get()));
      nlohmann::json stage = {{"pp_rank", s}, {"total", m.total}};
      for (int c = 0; c < kNumMemCategories; ++c)
        stage[std::string(mem_category_name(static_cast<MemCategory>(c)))] = m.bytes[c];
      j["given"]["stages"].push_back(stage);
    }
    if (!given.fits()) j["given"]["oom"] = explain_oom(given, search);
    if (searching) {
      j["search"] = {{"enumerated", search.enumerated},
                     {"fitting", search.fitting},
                     {"seconds", search.seconds}};
      j["ranked"] = nlohmann::json::array();
      for (const PlannedLayout& l : search.ranked) j["ranked"].push_back(planned_layout_json(l));
      if (a.explain) {
        j["given"]["explain"] = {{"memory", given.memory.explain}, {"step", given.step.explain}};
        if (!search.ranked.empty())
          j["ranked"][0]["explain"] = {{"memory", search.ranked[0].memory.explain},
                                       {"step", search.ranked[0].step.explain}};
      }
    }
    std::printf("%s\n", j.dump(2).c_str());
    return given.fits() || !search.ranked.empty() ? 0 : 2;
  }

  const ModelConfig& m = config.model;
  std::printf("strata plan: %s on %lld rank(s)", a.config.c_str(), static_cast<long long>(gpus));
  if (cluster)
    std::printf(" of %s (%s, %s per device, %lld per node)", cluster->name.c_str(),
                cluster->device.name.c_str(),
                format_bytes(static_cast<double>(cluster->device.memory_bytes)).c_str(),
                static_cast<long long>(cluster->gpus_per_node));
  std::printf("\nCPU kernels here: %s%s; GEMM %s",
              kernels::isa::describe(kernels::isa::active()).c_str(),
              kernels::isa::source() == std::string("cpu") ? "" : " (STRATA_CPU_ISA)",
              kernels::describe_gemm_backend().c_str());
  std::printf("\nmodel: %s, %s parameters, %lld layers, d_model %lld, seq %lld, %s, %s attention\n",
              family_name(m.family), format_count(static_cast<double>(m.num_params())).c_str(),
              static_cast<long long>(m.n_layer), static_cast<long long>(m.d_model),
              static_cast<long long>(config.train.seq_len),
              enum_name(config.train.precision).data(), enum_name(m.attention).data());
  for (const std::string& limit : engine_limits)
    std::printf(
        "note: strata cannot train this config yet (%s); the plan predicts it as if it "
        "could\n",
        limit.c_str());
  std::printf("\nthe config's layout: %s\n%s", given.describe().c_str(),
              format_memory(given).c_str());
  if (given.step.step_s > 0) std::printf("    %s\n", format_step(given.step).c_str());
  if (!given.fits()) std::printf("\n%s", explain_oom(given, search).c_str());
  if (searching) {
    std::printf(
        "\nlayouts that fit (%lld of %lld candidates, global batch %lld sequences, "
        "searched in %.2f s):\n",
        static_cast<long long>(search.fitting), static_cast<long long>(search.enumerated),
        static_cast<long long>(search.global_batch), search.seconds);
    if (search.ranked.empty())
      std::printf("  none\n");
    else
      std::printf("%s", format_ranking(search.ranked).c_str());
  } else if (!cluster) {
    std::printf("\n(give --cluster PROFILE for step time and a ranked layout search)\n");
  }
  if (a.explain) {
    print_explain("the config's layout", given);
    if (!search.ranked.empty()) print_explain("the best layout", search.ranked.front());
  }
  return given.fits() || !search.ranked.empty() ? 0 : 2;
}

}  // namespace

Command add_plan_command(CLI::App& parent) {
  auto a = std::make_shared<PlanArgs>();
  CLI::App* app = parent.add_subcommand(
      "plan", "predict memory and step time per rank before launch, and rank the layouts that fit");
  app->add_option("config", a->config, "config file, e.g. configs/gpt2-124m.toml");
  app->add_option("--set", a->overrides, "override a config key: --set train.seq_len=1024")
      ->take_all()
      ->expected(1);
  app->add_option("--cluster", a->cluster,
                  "a built-in cluster profile (e.g. a100-80gb-x8-ib200) or a profile TOML file");
  app->add_option("--gpus", a->gpus, "ranks (GPUs) to plan for; default: the config's layout");
  app->add_option("--global-batch", a->global_batch,
                  "sequences per optimizer step; default: the config's");
  app->add_option("--top", a->top, "layouts to show")->check(CLI::PositiveNumber);
  app->add_flag("--explain", a->explain, "print the arithmetic behind the numbers");
  app->add_flag("--json", a->json, "machine-readable output");
  app->add_flag("--no-search", a->no_search, "evaluate the config's layout only");
  app->add_flag("--calibrate", a->calibrate,
                "measure this machine (GEMM rates, memory bandwidth, collectives through the real "
                "Comm) and write a cluster profile for --cluster");
  app->add_option("--out", a->calibrate_out, "the profile --calibrate writes")
      ->default_str("calibrated.toml");
  app->add_option("--ranks", a->calibrate_ranks,
                  "ranks --calibrate measures collectives with (re-run under mpirun)")
      ->default_str("2");
  return {app, [a] { return run_plan(*a); }};
}

}  // namespace strata::cli
