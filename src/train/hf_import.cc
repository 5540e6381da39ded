#include "train/hf_import.h"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "core/arena.h"
#include "core/json.h"
#include "data/tokenizer.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "model/block.h"
#include "model/decoder.h"
#include "run/config.h"
#include "train/checkpoint.h"
#include "train/hf_names.h"

namespace strata::hf {

namespace fs = std::filesystem;

namespace {

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// A float as TOML reads it back exactly (shortest round-trip digits, always a float literal).
template <typename F>
std::string toml_float(F f) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, f);
  std::string s(buf, r.ptr);
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  return s;
}

// The name a tensor has in this file: save_pretrained writes "transformer."/"model." prefixes,
// GPT-2 files from the hub (and base-model saves) leave them out.
std::string locate(const io::ShardedSafetensors& st, const std::string& name) {
  if (st.has(name)) return name;
  for (const char* prefix : {"transformer.", "model."}) {
    const std::string p(prefix);
    if (name.rfind(p, 0) == 0 && st.has(name.substr(p.size()))) return name.substr(p.size());
  }
  return "";
}

// Tensor `name`'s dtype and shape, checked against the shape config.json implies.
io::TensorInfo checked_info(const io::ShardedSafetensors& st, const std::string& name,
                            const std::vector<int64_t>& shape, const std::string& where) {
  const std::string& dtype = st.shard_of(name).dtype_name_of(name);
  STRATA_CHECK(dtype == "F32" || dtype == "BF16" || dtype == "F16", where, ": tensor '", name,
               "' is ", dtype, "; strata imports F32, BF16 and F16 weights");
  io::TensorInfo info = st.info(name);
  STRATA_CHECK(info.shape == shape, where, ": tensor '", name, "' has shape ",
               shape_str(info.shape), " but config.json implies ", shape_str(shape));
  return info;
}

// Tensor `name` as f32, checked as above.
std::vector<float> read_f32(const io::ShardedSafetensors& st, const std::string& name,
                            const std::vector<int64_t>& shape, const std::string& where) {
  const io::TensorInfo info = checked_info(st, name, shape, where);
  const size_t n = static_cast<size_t>(info.numel());
  std::vector<float> out(n);
  if (info.dtype == DType::f32) {
    st.read_into(name, out.data(), n * sizeof(float));
    return out;
  }
  std::vector<uint16_t> half(n);
  st.read_into(name, half.data(), n * sizeof(uint16_t));
  for (size_t i = 0; i < n; ++i)
    out[i] = info.dtype == DType::bf16 ? bf16_to_f32(half[i]) : f16_to_f32(half[i]);
  return out;
}

nlohmann::json read_json(const fs::path& path) {
  STRATA_CHECK(fs::exists(path), "'", path.parent_path().string(),
               "' has no config.json: expected a directory written by save_pretrained");
  try {
    return parse_json(io::read_file(path.string()), path.string());
  } catch (const nlohmann::json::exception& e) {
    fail("'", path.string(), "' is not valid JSON (", e.what(), ")");
  }
}

}  // namespace

std::string import_config_toml(const ModelConfig& m, const std::string& source,
                               const std::string& ckpt_dir, const std::string& run_name) {
  std::string t;
  t += cat("# The model imported from ", source, " by `strata import` (its config.json).\n");
  t += cat("#   sample:    strata generate ", ckpt_dir, " --prompt \"...\"\n");
  t += cat("#   fine-tune: strata train THIS_FILE --set run.resume=", ckpt_dir, "\n");
  t += "#              ([data]: your own shards need this model's tokenizer; synthetic tokens\n";
  t += "#              below only exercise the run)\n\n";
  t += "[model]\n";
  t += cat("family = \"", family_name(m.family), "\"\n");
  t += cat("n_layer = ", m.n_layer, "\nn_head = ", m.n_head, "\nn_kv_head = ", m.kv_heads(), "\n");
  t += cat("d_model = ", m.d_model, "\nd_ff = ", m.d_ff, "\nvocab_size = ", m.vocab_size, "\n");
  t += cat("max_seq_len = ", m.max_seq_len, "\nnorm_eps = ", toml_float(m.norm_eps), "\n");
  if (m.attn_head_dim > 0) t += cat("head_dim = ", m.attn_head_dim, "\n");
  if (block_for(m.family).layout().rope) t += cat("rope_theta = ", toml_float(m.rope_theta), "\n");
  if (m.rope_scaling != RopeScaling::none) {
    t += cat("rope_scaling = \"", enum_name(m.rope_scaling), "\"\n");
    t += cat("rope_factor = ", toml_float(m.rope_factor), "\n");
    t += cat("rope_low_freq_factor = ", toml_float(m.rope_low_freq_factor), "\n");
    t += cat("rope_high_freq_factor = ", toml_float(m.rope_high_freq_factor), "\n");
    t += cat("rope_original_max_seq_len = ", m.rope_original_max_seq_len, "\n");
  }
  t += cat("tie_embeddings = ", m.tie_embeddings ? "true" : "false", "\n");
  t += cat("init_std = ", toml_float(m.init_std), "\n\n");
  if (m.moe.enabled()) {
    t += cat("[model.moe]\nexperts = ", m.moe.experts, "\ntop_k = ", m.moe.top_k, "\n");
    if (m.moe.expert_ffn > 0) t += cat("expert_ffn = ", m.moe.expert_ffn, "\n");
    if (!m.moe.normalize_topk) t += "normalize_topk = false\n";
    t += cat("aux_loss_coeff = ", toml_float(m.moe.aux_loss_coeff), "\n\n");
  }
  t += cat("[train]\nseq_len = ", std::min<int64_t>(m.max_seq_len, 256), "\nbatch_size = 4\n\n");
  t += "[data]\nsource = \"synthetic\"\n\n";
  t += cat("[run]\ndir = \"runs/", run_name, "\"\n");
  return t;
}

std::string ImportReport::summary() const {
  return cat("imported ", source, " (", architecture(model.family), ", ", model.num_params(),
             " parameters) as checkpoint ", checkpoint, "\n  config: ", config,
             "\n  tokenizer: ", tokenizer, "\nsample:    strata generate ",
             fs::path(checkpoint).parent_path().string(),
             has_tokenizer ? " --prompt \"...\"" : " --tokens ID,ID,...",
             "\nfine-tune: strata train ", config,
             " --set run.resume=", fs::path(checkpoint).parent_path().string());
}

void check_import_size(const ModelConfig& model, size_t file_tensors, const std::string& where) {
  const auto tensors = static_cast<int64_t>(std::min<size_t>(file_tensors, INT64_MAX));
  STRATA_CHECK(model.n_layer <= tensors, where, ": the config has ", model.n_layer,
               " layers but the model's safetensors hold only ", tensors,
               " tensors; config.json does not describe these weights");
  const int64_t experts = std::max<int64_t>(model.moe.experts, 1);
  STRATA_CHECK(experts <= tensors / std::max<int64_t>(model.n_layer, 1), where, ": the config has ",
               model.n_layer, " layers of ", experts,
               " experts but the model's safetensors hold "
               "only ",
               tensors, " tensors; config.json does not describe these weights");
}

ImportReport import_model(const std::string& hf_dir, const std::string& out_dir) {
  STRATA_CHECK(fs::is_directory(hf_dir), "'", hf_dir,
               "' is not a directory (expected a Hugging Face model saved with save_pretrained)");
  STRATA_CHECK(!out_dir.empty(), "import: no output directory (--out CKPT_DIR)");
  ImportReport report;
  report.source = hf_dir;
  const fs::path config_path = fs::path(hf_dir) / "config.json";
  const std::string where = config_path.string();
  const ModelConfig model = model_from_config_json(read_json(config_path), where);
  report.model = model;
  const io::ShardedSafetensors st = io::ShardedSafetensors::open(hf_dir);
  // Every size below comes from config.json: check it against the file before allocating (a
  // config that names more or larger tensors than the file holds fails here, not in the arena).
  check_import_size(model, st.names().size(), where);
  // Each rule's tensor, present with its dtype and shape, before anything is allocated.
  const std::vector<Rule> model_rules = rules(model);
  std::vector<std::string> names;  // the tensor of each rule
  for (const Rule& r : model_rules) {
    names.push_back(locate(st, r.hf));
    STRATA_CHECK(!names.back().empty(), hf_dir, ": the model has no tensor '", r.hf, "' (strata's ",
                 r.strata, ")",
                 r.hf == "lm_head.weight"
                     ? "; config.json says \"tie_word_embeddings\" = false: set it to true if "
                       "the head shares the embedding"
                     : "");
    checked_info(st, names.back(), r.hf_shape, hf_dir);
  }

  Arena arena;
  ParamStore params;
  register_model_params(model, ModelShard::whole(model), params);
  params.set_residency(true, false);
  params.allocate(arena);
  std::set<std::string> used;
  std::string cached_name;  // c_attn is read once for q, k and v
  std::vector<float> cached;
  for (size_t i = 0; i < model_rules.size(); ++i) {
    const Rule& r = model_rules[i];
    const std::string& name = names[i];
    if (name != cached_name) {
      cached = read_f32(st, name, r.hf_shape, hf_dir);
      cached_name = name;
    }
    extract(r, cached.data(), params.param(params.index_of(r.strata)));
    used.insert(name);
  }
  // A tied model may still store the head; it must be the embedding.
  if (const std::string head = locate(st, "lm_head.weight");
      model.tie_embeddings && !head.empty()) {
    const std::vector<float> w = read_f32(st, head, {model.vocab_size, model.d_model}, hf_dir);
    const float* embed = params.param(params.index_of("embed.weight"));
    STRATA_CHECK(std::equal(w.begin(), w.end(), embed), where,
                 ": \"tie_word_embeddings\" = true, but lm_head.weight differs from the input "
                 "embedding; set it to false if the model has a separate head");
    used.insert(head);
  }
  std::vector<std::string> extra;
  for (const std::string& n : st.names())
    if (!used.count(n) && !is_ignored_buffer(n)) extra.push_back(n);
  STRATA_CHECK(extra.empty(), hf_dir, ": tensor '", extra.empty() ? "" : extra[0], "'",
               extra.size() > 1 ? cat(" (and ", extra.size() - 1, " more)") : "",
               " is not part of a ", architecture(model.family),
               " as config.json describes it; strata imports exactly that model's parameters");

  // The tokenizer, when strata can read it (byte-level BPE).
  std::string tokenizer_path;
  const fs::path tok_file = fs::path(hf_dir) / "tokenizer.json";
  if (!fs::exists(tok_file)) {
    report.tokenizer = "none in the model directory (generate needs --tokens)";
  } else {
    try {
      const data::Tokenizer tok = data::Tokenizer::load(tok_file.string());
      STRATA_CHECK(tok.vocab_size() <= model.vocab_size, "it has ", tok.vocab_size(),
                   " tokens, more than vocab_size = ", model.vocab_size);
      tokenizer_path = tok_file.string();
      report.has_tokenizer = true;
      report.tokenizer = cat("tokenizer.json copied (", tok.vocab_size(), " tokens)");
    } catch (const Error& e) {
      report.tokenizer = cat("tokenizer.json not copied: ", e.what());
    }
  }

  // The TOML config (validated by parsing it back) and the checkpoint, whose state.json carries
  // the same config.
  fs::path name = fs::path(out_dir).lexically_normal();
  if (name.filename().empty()) name = name.parent_path();
  io::make_dirs(out_dir);
  report.config = (fs::path(out_dir) / "config.toml").string();
  const std::string toml = import_config_toml(model, hf_dir, out_dir, name.filename().string());
  const RunConfig run = parse_config(toml, report.config);
  CheckpointState state;
  state.step = 0;
  state.config = config_to_json(run);
  state.extra = {{"imported_from", fs::absolute(hf_dir).string()}, {"weights_only", true}};
  const std::string tmp = prepare_checkpoint_dir(out_dir, 0);
  std::vector<SliceSource> sources;
  for (int i = 0; i < params.count(); ++i) {
    const ParamInfo& p = params.info(i);
    sources.push_back(SliceSource{block_of(p, "", 0, p.numel), params.param(i)});
  }
  write_slice_file(rank_slice_path(tmp, 0), sources);
  report.checkpoint = commit_checkpoint(out_dir, state, tokenizer_path, 0);
  io::write_file_atomic(report.config, toml);
  return report;
}

}  // namespace strata::hf
