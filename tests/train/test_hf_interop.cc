// Hugging Face interop: the name/layout mapping (train/hf_names.h), export of a checkpoint saved
// with any layout, import (single file and sharded, f32 and bf16) back into identical tensors,
// resuming training from an import, and the errors for what strata cannot run.
// tests/train/check_hf_transformers.py checks the same files against transformers itself.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <numeric>
#include <set>

#include "core/arena.h"
#include "data/tokenizer.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "model/decoder.h"
#include "run/config.h"
#include "small_run.h"
#include "train/checkpoint.h"
#include "train/hf_export.h"
#include "train/hf_import.h"
#include "train/hf_names.h"
#include "train/trainer.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

RunConfig tiny(const std::string& family, bool tie, int vocab = 64) {
  // "llama3": the llama family with Llama 3.x's rope scaling (not its defaults, so that the
  // round trips below show every field travels).
  std::vector<std::string> sets = {"model.family=" + (family == "llama3" ? "llama" : family),
                                   cat("model.vocab_size=", vocab),
                                   std::string("model.tie_embeddings=") + (tie ? "true" : "false")};
  if (family != "gpt2") sets.insert(sets.end(), {"model.n_kv_head=2", "model.d_ff=48"});
  if (family == "qwen3") sets.push_back("model.head_dim=12");      // apart from d_model / n_head
  if (family == "mixtral") sets.push_back("model.moe.experts=4");  // top-2, experts d_ff wide
  // qwen3's heads, and experts narrower than d_ff whose weights are not renormalised (none of the
  // defaults, so that the round trips show every field travels).
  if (family == "qwen3_moe")
    sets.insert(sets.end(), {"model.head_dim=12", "model.moe.experts=4", "model.moe.expert_ffn=24",
                             "model.moe.normalize_topk=false", "model.moe.aux_loss_coeff=0.001"});
  if (family == "llama3")
    sets.insert(sets.end(),
                {"model.rope_theta=500000", "model.rope_scaling=llama3", "model.rope_factor=32",
                 "model.rope_low_freq_factor=2", "model.rope_high_freq_factor=8",
                 "model.rope_original_max_seq_len=4096"});
  return parse_config(R"(
[model]
n_layer = 2
n_head = 4
d_model = 32
max_seq_len = 16
[train]
batch_size = 2
seq_len = 16
)",
                      "test", sets);
}

// Element i of parameter `name`: depends on nothing else, so every layout holds the same model.
float value_of(const std::string& name, int64_t i) {
  uint64_t h = 1469598103934665603ull;
  for (char ch : name) h = (h ^ static_cast<uint8_t>(ch)) * 1099511628211ull;
  h ^= static_cast<uint64_t>(i) * 0x9e3779b97f4a7c15ull;
  h = (h ^ (h >> 29)) * 0xbf58476d1ce4e5b9ull;
  return static_cast<float>(static_cast<int64_t>(h >> 40) % 20001 - 10000) * 1e-5f;
}

// Writes a checkpoint of step 7 as a job of tp x pp ranks would: every rank its own slices (the
// first tp holder of replicated elements, never a tied head's stage copy).
std::string write_checkpoint(const std::string& root, const RunConfig& run, int tp, int pp,
                             const std::string& tokenizer = "") {
  const std::string tmp = prepare_checkpoint_dir(root, 7);
  int rank = 0;
  for (int pr = 0; pr < pp; ++pr) {
    for (int tr = 0; tr < tp; ++tr, ++rank) {
      const ModelShard sh =
          make_shard(run.model, tp, tr, false, pp, pr, 1, run.train.batch_size * run.train.seq_len);
      ParamStore ps;
      register_model_params(run.model, sh, ps);
      ps.plan_layout();
      std::vector<float> buf(static_cast<size_t>(ps.size()));
      std::vector<SliceSource> sources;
      for (const ParamInfo& p : ps.all()) {
        std::vector<float> global(static_cast<size_t>(p.global_numel()));
        for (size_t i = 0; i < global.size(); ++i) global[i] = value_of(p.name, i);
        copy_global_to_local(p, global.data(), buf.data() + p.offset);
        if (p.slice.holder_index != 0 || p.slice.stage_copy) continue;
        sources.push_back(SliceSource{block_of(p, "", 0, p.numel), buf.data() + p.offset});
      }
      if (!sources.empty()) write_slice_file(rank_slice_path(tmp, rank), sources);
    }
  }
  CheckpointState state;
  state.step = 7;
  state.config = config_to_json(run);
  return commit_checkpoint(root, state, tokenizer, 0);
}

// The global tensors a checkpoint holds, by name.
std::map<std::string, std::vector<float>> read_global(const std::string& ckpt,
                                                      const ModelConfig& model) {
  Arena arena;
  ParamStore ps;
  register_model_params(model, ModelShard::whole(model), ps);
  ps.set_residency(true, false);
  ps.allocate(arena);
  load_checkpoint_tensors(ckpt, ps, ps.data(), nullptr, nullptr);
  std::map<std::string, std::vector<float>> out;
  for (int i = 0; i < ps.count(); ++i)
    out[ps.info(i).name].assign(ps.param(i), ps.param(i) + ps.info(i).numel);
  return out;
}

hf::ExportOptions no_tokenizer(const std::string& out) {
  hf::ExportOptions o;
  o.out_dir = out;
  o.no_tokenizer = true;
  return o;
}

TEST(HfNames, Gpt2TensorsAreConv1DWithPackedQkv) {
  RunConfig run = tiny("gpt2", true);
  std::set<std::string> names;
  for (const hf::Rule& r : hf::rules(run.model)) {
    names.insert(r.hf);
    if (r.hf == "transformer.h.1.attn.c_attn.weight") {
      EXPECT_EQ(r.hf_shape, (std::vector<int64_t>{32, 96}));
    }
    if (r.hf == "transformer.h.0.mlp.c_fc.weight") {
      EXPECT_EQ(r.hf_shape, (std::vector<int64_t>{32, 128}));
    }
  }
  EXPECT_EQ(names.size(), 4u + 12u * 2u);  // wte, wpe, ln_f (2) + 12 per block; head tied
  EXPECT_TRUE(names.count("transformer.wpe.weight"));
  EXPECT_FALSE(names.count("lm_head.weight"));
  // k sits in columns [C, 2C) of c_attn, transposed.
  hf::Rule k;
  for (const hf::Rule& r : hf::rules(run.model))
    if (r.strata == "layers.0.attn.k.weight") k = r;
  std::vector<float> s(32 * 32), h(32 * 96, 0.0f), back(32 * 32);
  for (size_t i = 0; i < s.size(); ++i) s[i] = static_cast<float>(i);
  hf::place(k, s.data(), h.data());
  EXPECT_EQ(h[5 * 96 + 32 + 3], s[3 * 32 + 5]);
  hf::extract(k, h.data(), back.data());
  EXPECT_EQ(back, s);
}

TEST(HfNames, LlamaTensorsKeepTheirLayout) {
  RunConfig run = tiny("llama", false);
  std::set<std::string> names;
  for (const hf::Rule& r : hf::rules(run.model)) {
    EXPECT_EQ(r.placement, hf::Placement::same) << r.strata;
    names.insert(r.hf);
    if (r.hf == "model.layers.0.self_attn.k_proj.weight") {
      EXPECT_EQ(r.hf_shape, (std::vector<int64_t>{16, 32}));  // 2 kv heads of 8
    }
  }
  EXPECT_EQ(names.size(), 3u + 9u * 2u);  // embed_tokens, norm, lm_head + 9 per block
  const nlohmann::json j = hf::config_json(run.model, 63);
  EXPECT_EQ(j["architectures"][0], "LlamaForCausalLM");
  EXPECT_EQ(j["num_key_value_heads"], 2);
  EXPECT_EQ(j["rms_norm_eps"].get<double>(), 1e-5);  // not 9.99999974737875e-06
  const ModelConfig back = hf::model_from_config_json(j, "config.json");
  EXPECT_EQ(back.kv_heads(), 2);
  EXPECT_EQ(back.d_ff, 48);
  EXPECT_EQ(back.norm_eps, run.model.norm_eps);
  EXPECT_FALSE(back.tie_embeddings);
}

TEST(HfNames, Qwen3AddsHeadNormsAndItsHeadWidth) {
  RunConfig run = tiny("qwen3", true);
  std::set<std::string> names;
  for (const hf::Rule& r : hf::rules(run.model)) {
    names.insert(r.hf);
    if (r.hf == "model.layers.1.self_attn.q_norm.weight") {
      EXPECT_EQ(r.strata, "layers.1.attn.q_norm.weight");
      EXPECT_EQ(r.hf_shape, (std::vector<int64_t>{12}));
    }
    if (r.hf == "model.layers.0.self_attn.q_proj.weight") {
      EXPECT_EQ(r.hf_shape, (std::vector<int64_t>{48, 32}));  // 4 heads of 12 from d_model 32
    }
  }
  EXPECT_EQ(names.size(), 2u + 11u * 2u);  // embed_tokens, norm (tied) + 11 per block
  EXPECT_TRUE(names.count("model.layers.0.self_attn.k_norm.weight"));
  const nlohmann::json j = hf::config_json(run.model, 63);
  EXPECT_EQ(j["architectures"][0], "Qwen3ForCausalLM");
  EXPECT_EQ(j["model_type"], "qwen3");
  EXPECT_EQ(j["head_dim"], 12);
  EXPECT_EQ(j["use_sliding_window"], false);
  const ModelConfig back = hf::model_from_config_json(j, "config.json");
  EXPECT_EQ(back.family, ModelFamily::qwen3);
  EXPECT_EQ(back.head_dim(), 12);
  EXPECT_TRUE(back.tie_embeddings);
}

TEST(HfNames, Llama3RopeScalingTravelsBothWays) {
  const RunConfig run = tiny("llama3", false);
  const nlohmann::json j = hf::config_json(run.model, 63);
  EXPECT_EQ(j["rope_scaling"]["rope_type"], "llama3");
  EXPECT_EQ(j["rope_scaling"]["factor"], 32.0);
  EXPECT_EQ(j["rope_scaling"]["original_max_position_embeddings"], 4096);
  const ModelConfig back = hf::model_from_config_json(j, "config.json");
  EXPECT_EQ(back.rope_scaling, RopeScaling::llama3);
  EXPECT_EQ(back.rope_factor, 32.0);
  EXPECT_EQ(back.rope_low_freq_factor, 2.0);
  EXPECT_EQ(back.rope_high_freq_factor, 8.0);
  EXPECT_EQ(back.rope_original_max_seq_len, 4096);
  // transformers 5 writes "rope_parameters", with rope_theta inside.
  nlohmann::json v5 = j;
  v5.erase("rope_scaling");
  v5.erase("rope_theta");
  v5["rope_parameters"] = {{"rope_type", "llama3"},
                           {"factor", 8.0},
                           {"low_freq_factor", 1.0},
                           {"high_freq_factor", 4.0},
                           {"original_max_position_embeddings", 8192},
                           {"rope_theta", 500000.0}};
  const ModelConfig b5 = hf::model_from_config_json(v5, "config.json");
  EXPECT_EQ(b5.rope_scaling, RopeScaling::llama3);
  EXPECT_EQ(b5.rope_factor, 8.0);
  EXPECT_EQ(b5.rope_theta, 500000.0f);
}

struct RoundTrip {
  std::string family;
  bool tie;
  double shard_mb;  // 0: one file
};

void PrintTo(const RoundTrip& r, std::ostream* os) {
  *os << r.family << (r.tie ? " tied" : " untied") << ", shards of " << r.shard_mb << " MB";
}

class HfRoundTrip : public ::testing::TestWithParam<RoundTrip> {};

TEST_P(HfRoundTrip, ExportThenImportGivesIdenticalTensors) {
  const RoundTrip& p = GetParam();
  const std::string dir = test_support::fresh_dir("hf_rt_" + p.family + std::to_string(p.tie) +
                                                  std::to_string(p.shard_mb > 0));
  const RunConfig run = tiny(p.family, p.tie);
  const std::string ckpt = write_checkpoint(dir + "/ckpt", run, 1, 1);
  hf::ExportOptions o = no_tokenizer(dir + "/hf");
  o.max_shard_bytes = static_cast<int64_t>(p.shard_mb * 1e6);
  const hf::ExportReport e = hf::export_checkpoint(dir + "/ckpt", o);
  EXPECT_EQ(e.step, 7);
  EXPECT_EQ(fs::exists(dir + "/hf/model.safetensors.index.json"), p.shard_mb > 0);
  if (p.shard_mb > 0) {
    EXPECT_GE(io::ShardedSafetensors::open(dir + "/hf").num_shards(), 3u);
  }
  const hf::ImportReport i = hf::import_model(dir + "/hf", dir + "/imported");
  EXPECT_EQ(resolve_checkpoint(dir + "/imported"), i.checkpoint);
  EXPECT_TRUE(fs::exists(dir + "/imported/config.toml"));
  const RunConfig reread = load_config(dir + "/imported/config.toml");
  EXPECT_EQ(config_to_json(reread)["model"], config_to_json(run)["model"]);
  EXPECT_EQ(read_global(i.checkpoint, run.model), read_global(ckpt, run.model));
}

INSTANTIATE_TEST_SUITE_P(
    Families, HfRoundTrip,
    ::testing::Values(RoundTrip{"gpt2", true, 0}, RoundTrip{"gpt2", false, 0},
                      RoundTrip{"llama", false, 0}, RoundTrip{"llama", true, 0},
                      RoundTrip{"gpt2", true, 0.02}, RoundTrip{"llama", false, 0.02},
                      RoundTrip{"llama3", false, 0}, RoundTrip{"qwen3", false, 0},
                      RoundTrip{"qwen3", true, 0.02}, RoundTrip{"mixtral", false, 0},
                      RoundTrip{"mixtral", true, 0.02}, RoundTrip{"qwen3_moe", false, 0},
                      RoundTrip{"qwen3_moe", true, 0.02}),
    [](const ::testing::TestParamInfo<RoundTrip>& param) {
      const RoundTrip& p = param.param;
      return p.family + (p.tie ? "_tied" : "_untied") + (p.shard_mb > 0 ? "_sharded" : "_one_file");
    });

TEST(HfExport, AnyLayoutExportsTheSameFiles) {
  for (const std::string family : {"gpt2", "llama"}) {
    const std::string dir = test_support::fresh_dir("hf_layout_" + family);
    const RunConfig run = tiny(family, family == "gpt2");
    write_checkpoint(dir + "/one", run, 1, 1);
    write_checkpoint(dir + "/tp2", run, 2, 1);
    write_checkpoint(dir + "/tp2pp2", run, 2, 2);  // gpt2: the head's tied copy on stage 1
    std::string reference;
    for (const char* layout : {"one", "tp2", "tp2pp2"}) {
      const std::string out = dir + "/hf_" + layout;
      hf::export_checkpoint(dir + "/" + layout, no_tokenizer(out));
      const std::string bytes = io::read_file(out + "/model.safetensors");
      if (reference.empty()) reference = bytes;
      EXPECT_EQ(bytes, reference) << family << " saved with layout " << layout;
    }
  }
}

TEST(HfExport, Bf16RoundsAndImportsBack) {
  const std::string dir = test_support::fresh_dir("hf_bf16");
  const RunConfig run = tiny("llama", false);
  const std::string ckpt = write_checkpoint(dir + "/ckpt", run, 1, 1);
  hf::ExportOptions o = no_tokenizer(dir + "/hf");
  o.dtype = DType::bf16;
  hf::export_checkpoint(ckpt, o);
  const auto st = io::ShardedSafetensors::open(dir + "/hf");
  EXPECT_EQ(st.info("lm_head.weight").dtype, DType::bf16);
  const hf::ImportReport i = hf::import_model(dir + "/hf", dir + "/imported");
  const auto original = read_global(ckpt, run.model),
             imported = read_global(i.checkpoint, run.model);
  for (const auto& [name, values] : original)
    for (size_t k = 0; k < values.size(); ++k)
      ASSERT_EQ(imported.at(name)[k], bf16_to_f32(f32_to_bf16(values[k]))) << name << " " << k;
}

TEST(HfExport, ShipsTheTokenizerOrExplainsWhyNot) {
  const std::string dir = test_support::fresh_dir("hf_tok");
  const RunConfig run = tiny("gpt2", true, 320);
  write_checkpoint(dir + "/bare", run, 1, 1);
  hf::ExportOptions o;
  o.out_dir = dir + "/hf";
  try {
    hf::export_checkpoint(dir + "/bare", o);
    FAIL() << "exported without a tokenizer";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--tokenizer"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("--no-tokenizer"), std::string::npos) << e.what();
  }
  const data::Tokenizer tok =
      data::Tokenizer::train({"In the beginning God created the heaven and the earth."}, 300);
  tok.save(dir + "/tokenizer.json");
  write_checkpoint(dir + "/with", run, 1, 1, dir + "/tokenizer.json");
  const hf::ExportReport e = hf::export_checkpoint(dir + "/with", o);
  EXPECT_EQ(io::read_file(dir + "/hf/tokenizer.json"), io::read_file(dir + "/tokenizer.json"));
  const auto config = nlohmann::json::parse(io::read_file(dir + "/hf/config.json"));
  EXPECT_EQ(config["eos_token_id"], tok.eot_id());
  EXPECT_TRUE(fs::exists(dir + "/hf/tokenizer_config.json"));
  const hf::ImportReport i = hf::import_model(dir + "/hf", dir + "/imported");
  EXPECT_TRUE(fs::exists(fs::path(i.checkpoint) / "tokenizer.json")) << i.tokenizer;
}

TEST(HfImport, TrainingResumesFromAnImport) {
  const std::string dir = test_support::fresh_dir("hf_resume");
  const RunConfig run = tiny("llama", false);
  const std::string ckpt = write_checkpoint(dir + "/ckpt", run, 1, 1);
  hf::export_checkpoint(ckpt, no_tokenizer(dir + "/hf"));
  hf::import_model(dir + "/hf", dir + "/imported");
  const RunConfig c =
      load_config(dir + "/imported/config.toml",
                  {"run.dir=" + dir + "/run", "run.resume=" + dir + "/imported", "train.steps=2",
                   "train.seq_len=16", "train.batch_size=2", "train.eval_every=0"});
  Trainer t(c);
  EXPECT_EQ(t.step(), 0);
  const auto original = read_global(ckpt, run.model);
  const ParamStore& ps = t.model().params();
  for (int i = 0; i < ps.count(); ++i)
    ASSERT_TRUE(std::equal(ps.param(i), ps.param(i) + ps.info(i).numel,
                           original.at(ps.info(i).name).begin()))
        << ps.info(i).name;
  EXPECT_TRUE(std::isfinite(t.train_step().loss));
}

// Writes config.json after `edit` and expects import to fail naming `key`.
void expect_import_error(const std::string& name, const std::string& family, bool tie,
                         const std::function<void(nlohmann::json&)>& edit, const std::string& key) {
  const std::string dir = test_support::fresh_dir("hf_err_" + name);
  write_checkpoint(dir + "/ckpt", tiny(family, tie), 1, 1);
  hf::export_checkpoint(dir + "/ckpt", no_tokenizer(dir + "/hf"));
  auto j = nlohmann::json::parse(io::read_file(dir + "/hf/config.json"));
  edit(j);
  io::write_file_atomic(dir + "/hf/config.json", j.dump());
  try {
    hf::import_model(dir + "/hf", dir + "/imported");
    FAIL() << name << ": imported";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << name << ": " << e.what();
  }
  EXPECT_FALSE(fs::exists(dir + "/imported/latest")) << name;
}

TEST(HfImport, UnsupportedConfigsNameTheKey) {
  expect_import_error(
      "arch", "llama", false, [](auto& j) { j["architectures"] = {"MistralForCausalLM"}; },
      "LlamaForCausalLM (model_type \"llama\")");
  expect_import_error(
      "rope", "llama", false,
      [](auto& j) {
        j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 2}};
      },
      "\"rope_scaling\"");
  expect_import_error(
      "bias", "llama", false, [](auto& j) { j["attention_bias"] = true; },
      "\"attention_bias\" = true is not supported");
  expect_import_error(
      "act", "gpt2", true, [](auto& j) { j["activation_function"] = "relu"; },
      "\"activation_function\" = \"relu\"");
  // A head width the tensors do not have: the tensor and both shapes are named.
  expect_import_error(
      "head_dim", "llama", false, [](auto& j) { j["head_dim"] = 16; },
      "self_attn.q_proj.weight' has shape [32, 32] but config.json implies [64, 32]");
  expect_import_error(
      "window", "qwen3", false, [](auto& j) { j["use_sliding_window"] = true; },
      "\"use_sliding_window\" = true is not supported");
  expect_import_error(
      "layer_types", "qwen3", false,
      [](auto& j) {
        j["layer_types"] = {"full_attention", "sliding_attention"};
      },
      "\"layer_types\" holds \"sliding_attention\"");
  expect_import_error(
      "rope_llama3", "llama", false,
      [](auto& j) {
        j["rope_scaling"] = {{"rope_type", "llama3"},
                             {"factor", 8.0},
                             {"low_freq_factor", 4.0},
                             {"high_freq_factor", 1.0}};
      },
      "rope_high_freq_factor");
  expect_import_error(
      "untie", "llama", true, [](auto& j) { j["tie_word_embeddings"] = false; }, "lm_head.weight");
  expect_import_error(
      "tie", "llama", false, [](auto& j) { j["tie_word_embeddings"] = true; },
      "lm_head.weight differs");
  // Qwen3-MoE with dense layers among the sparse ones.
  expect_import_error(
      "sparse_step", "qwen3_moe", false, [](auto& j) { j["decoder_sparse_step"] = 2; },
      "\"decoder_sparse_step\" = 2 is not supported");
  expect_import_error(
      "mlp_only", "qwen3_moe", false, [](auto& j) { j["mlp_only_layers"] = {1}; },
      "\"mlp_only_layers\" = [1] is not supported");
  expect_import_error(
      "moe_window", "qwen3_moe", false, [](auto& j) { j["use_sliding_window"] = true; },
      "\"use_sliding_window\" = true is not supported");
  expect_import_error(
      "shape", "gpt2", true, [](auto& j) { j["n_inner"] = 64; },
      "transformer.h.0.mlp.c_fc.weight' has shape [32, 128]");
  expect_import_error(
      "missing", "gpt2", true, [](auto& j) { j.erase("n_embd"); }, "missing key \"n_embd\"");
  // Found by fuzz_hf_config (regress-rope-type-not-string): an nlohmann type_error escaped.
  expect_import_error(
      "rope_type", "llama", false,
      [](auto& j) {
        j["rope_scaling"] = {{"rope_type", 4.0}};
      },
      "\"rope_type\" must be a string, found 4.0");
  // Sizes from config.json are checked against the file before anything is allocated (the
  // parameters of these would need terabytes).
  expect_import_error(
      "huge_layers", "llama", false, [](auto& j) { j["num_hidden_layers"] = 100000000; },
      "100000000 layers but the model's safetensors hold only");
  expect_import_error(
      "huge_ffn", "llama", false, [](auto& j) { j["intermediate_size"] = int64_t{1} << 40; },
      "but config.json implies [1099511627776, 32]");
}

// Mixtral: the router is block_sparse_moe.gate, expert j's w1 | w3 are rows [0, F) and [F, 2F) of
// gate_up[j] and its w2 is down[j]; config.json carries the experts. A router Hugging Face's
// Mixtral cannot express is refused on export.
TEST(HfNames, MixtralExpertsAreSlicesOfTheGlobalTensors) {
  RunConfig run = tiny("mixtral", false);
  const ModelConfig& m = run.model;
  const int64_t C = 32, F = 48;
  std::map<std::string, hf::Rule> by_hf;
  for (const hf::Rule& r : hf::rules(m)) by_hf[r.hf] = r;
  const hf::Rule& router = by_hf.at("model.layers.1.block_sparse_moe.gate.weight");
  EXPECT_EQ(router.strata, "layers.1.moe.router.weight");
  EXPECT_EQ(router.hf_shape, (std::vector<int64_t>{4, C}));
  const hf::Rule& w3 = by_hf.at("model.layers.0.block_sparse_moe.experts.2.w3.weight");
  EXPECT_EQ(w3.strata, "layers.0.moe.experts.gate_up.weight");
  EXPECT_EQ(w3.placement, hf::Placement::slice);
  EXPECT_EQ(w3.hf_shape, (std::vector<int64_t>{F, C}));
  EXPECT_EQ(w3.offset, (2 * 2 + 1) * F * C);
  const hf::Rule& w2 = by_hf.at("model.layers.0.block_sparse_moe.experts.3.w2.weight");
  EXPECT_EQ(w2.strata, "layers.0.moe.experts.down.weight");
  EXPECT_EQ(w2.hf_shape, (std::vector<int64_t>{C, F}));
  EXPECT_EQ(w2.offset, 3 * C * F);
  // place and extract move exactly that slice.
  std::vector<float> gate_up(static_cast<size_t>(4 * 2 * F * C)), piece(F * C),
      back(gate_up.size());
  std::iota(gate_up.begin(), gate_up.end(), 0.0f);
  hf::place(w3, gate_up.data(), piece.data());
  EXPECT_EQ(piece[0], static_cast<float>(w3.offset));
  hf::extract(w3, piece.data(), back.data());
  EXPECT_EQ(back[w3.offset + F * C - 1], gate_up[w3.offset + F * C - 1]);

  const nlohmann::json j = hf::config_json(m, -1);
  EXPECT_EQ(j["architectures"][0], "MixtralForCausalLM");
  EXPECT_EQ(j["num_local_experts"], 4);
  EXPECT_EQ(j["num_experts_per_tok"], 2);
  EXPECT_EQ(j["intermediate_size"], F);
  const ModelConfig back_config = hf::model_from_config_json(j, "config.json");
  EXPECT_EQ(back_config.family, ModelFamily::mixtral);
  EXPECT_EQ(back_config.moe.experts, 4);
  EXPECT_EQ(back_config.expert_ffn(), F);
  run.model.moe.gating = kernels::MoeGating::sigmoid_bias;
  EXPECT_THROW(hf::config_json(run.model, -1), Error);
}

// Qwen3-MoE: qwen3's q_norm / k_norm, the router mlp.gate and expert j's gate_proj | up_proj as
// rows of gate_up[j], its down_proj as down[j] (the names transformers 5's save_pretrained
// writes); config.json carries the experts, their width apart from intermediate_size and
// norm_topk_prob. transformers 5 writes num_experts as num_local_experts: both are read.
TEST(HfNames, Qwen3MoeExpertsAreSlicesOfTheGlobalTensors) {
  RunConfig run = tiny("qwen3_moe", false);
  const ModelConfig& m = run.model;
  const int64_t C = 32, F = 24;
  std::map<std::string, hf::Rule> by_hf;
  for (const hf::Rule& r : hf::rules(m)) by_hf[r.hf] = r;
  EXPECT_EQ(by_hf.at("model.layers.1.mlp.gate.weight").strata, "layers.1.moe.router.weight");
  EXPECT_EQ(by_hf.at("model.layers.1.self_attn.k_norm.weight").strata,
            "layers.1.attn.k_norm.weight");
  EXPECT_EQ(by_hf.at("model.layers.1.self_attn.k_norm.weight").hf_shape,
            (std::vector<int64_t>{12}));
  const hf::Rule& up = by_hf.at("model.layers.0.mlp.experts.2.up_proj.weight");
  EXPECT_EQ(up.strata, "layers.0.moe.experts.gate_up.weight");
  EXPECT_EQ(up.placement, hf::Placement::slice);
  EXPECT_EQ(up.hf_shape, (std::vector<int64_t>{F, C}));
  EXPECT_EQ(up.offset, (2 * 2 + 1) * F * C);
  const hf::Rule& gate = by_hf.at("model.layers.0.mlp.experts.2.gate_proj.weight");
  EXPECT_EQ(gate.offset, 2 * 2 * F * C);
  const hf::Rule& down = by_hf.at("model.layers.0.mlp.experts.3.down_proj.weight");
  EXPECT_EQ(down.strata, "layers.0.moe.experts.down.weight");
  EXPECT_EQ(down.hf_shape, (std::vector<int64_t>{C, F}));
  EXPECT_EQ(down.offset, 3 * C * F);
  EXPECT_EQ(by_hf.count("model.layers.0.mlp.gate_proj.weight"), 0u);  // no dense MLP

  nlohmann::json j = hf::config_json(m, -1);
  EXPECT_EQ(j["architectures"][0], "Qwen3MoeForCausalLM");
  EXPECT_EQ(j["model_type"], "qwen3_moe");
  EXPECT_EQ(j["num_experts"], 4);
  EXPECT_EQ(j["num_experts_per_tok"], 2);
  EXPECT_EQ(j["moe_intermediate_size"], F);
  EXPECT_EQ(j["intermediate_size"], 48);
  EXPECT_EQ(j["norm_topk_prob"], false);
  EXPECT_EQ(j["decoder_sparse_step"], 1);
  EXPECT_EQ(j["mlp_only_layers"], nlohmann::json::array());
  EXPECT_EQ(j["head_dim"], 12);
  j["num_local_experts"] = j["num_experts"];
  j.erase("num_experts");
  const ModelConfig back = hf::model_from_config_json(j, "config.json");
  EXPECT_EQ(back.family, ModelFamily::qwen3_moe);
  EXPECT_EQ(back.moe.experts, 4);
  EXPECT_EQ(back.expert_ffn(), F);
  EXPECT_EQ(back.d_ff, 48);
  EXPECT_FALSE(back.moe.normalize_topk);
  EXPECT_EQ(back.head_dim(), 12);
  run.model.moe.routed_scale = 2.0f;
  EXPECT_THROW(hf::config_json(run.model, -1), Error);
}

}  // namespace
}  // namespace strata
