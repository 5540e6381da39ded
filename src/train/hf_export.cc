#include "train/hf_export.h"

#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "core/arena.h"
#include "data/tokenizer.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "model/decoder.h"
#include "run/config.h"
#include "train/checkpoint.h"
#include "train/hf_names.h"

namespace strata::hf {

namespace fs = std::filesystem;

namespace {

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

const char* torch_dtype(DType t) {
  return t == DType::bf16 ? "bfloat16" : t == DType::f16 ? "float16" : "float32";
}

// The tokenizer to ship: --tokenizer, else the checkpoint's own, else its run's data.dir.
std::string find_tokenizer(const std::string& ckpt, const RunConfig& run, const ExportOptions& o) {
  if (o.no_tokenizer) return "";
  if (!o.tokenizer.empty()) {
    STRATA_CHECK(fs::is_regular_file(o.tokenizer), "--tokenizer '", o.tokenizer,
                 "' is not a file (expected a Hugging Face tokenizer.json)");
    return o.tokenizer;
  }
  const fs::path own = fs::path(ckpt) / "tokenizer.json";
  if (fs::exists(own)) return own.string();
  const fs::path data = fs::path(run.data.dir) / "tokenizer.json";
  if (run.data.source != DataSource::synthetic && fs::exists(data)) return data.string();
  fail("checkpoint '", ckpt, "' carries no tokenizer.json",
       run.data.source == DataSource::synthetic
           ? " (its run trained on synthetic tokens, data.source = \"synthetic\")"
           : cat(" and its run's data.dir '", run.data.dir, "' has none"),
       ": pass --tokenizer PATH/tokenizer.json to ship one (its vocabulary must fit "
       "model.vocab_size = ",
       run.model.vocab_size, "), or --no-tokenizer to export the weights and config.json only");
}

// One Hugging Face tensor: f32 values (borrowed from the parameters when the layout is the
// same, assembled otherwise), and their 16-bit rounding when exporting bf16/f16.
struct HfTensor {
  std::vector<int64_t> shape;
  const float* values = nullptr;
  std::vector<float> assembled;
  std::vector<uint16_t> half;
  const void* data(DType t) const {
    return t == DType::f32 ? static_cast<const void*>(values) : half.data();
  }
};

// Removes model files an earlier export left, so transformers cannot pick up a stale one.
void remove_old_weights(const fs::path& dir) {
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string n = e.path().filename().string();
    const bool shard = n.rfind("model-", 0) == 0 && n.find("-of-") != std::string::npos &&
                       e.path().extension() == ".safetensors";
    if (shard || n == "model.safetensors" || n == "model.safetensors.index.json")
      fs::remove(e.path());
  }
}

}  // namespace

std::string ExportReport::summary() const {
  std::string s = cat("exported step ", step, " of ", checkpoint, " (", family_name(model.family),
                      ", ", model.num_params(), " parameters) to ", out_dir, " as ",
                      architecture(model.family), ":\n");
  for (const std::string& f : files) s += "  " + f + "\n";
  s += tokenizer.empty() ? "  (no tokenizer)\n" : cat("  tokenizer.json from ", tokenizer, "\n");
  s += cat("load it with transformers.AutoModelForCausalLM.from_pretrained(\"", out_dir, "\")");
  return s;
}

ExportReport export_checkpoint(const std::string& checkpoint, const ExportOptions& o) {
  STRATA_CHECK(!o.out_dir.empty(), "export: no output directory (--hf DIR)");
  STRATA_CHECK(o.dtype == DType::f32 || o.dtype == DType::bf16 || o.dtype == DType::f16,
               "export: dtype must be f32, bf16 or f16");
  ExportReport report;
  report.checkpoint = resolve_checkpoint(checkpoint);
  const CheckpointState state = read_checkpoint_state(report.checkpoint);
  const RunConfig run = config_from_json(state.config);
  ModelConfig model = run.model;
  model.finalize();
  report.model = model;
  report.step = state.step;
  report.out_dir = o.out_dir;
  report.tokenizer = find_tokenizer(report.checkpoint, run, o);
  int64_t eos = -1;
  std::string eos_text;  // the document separator's spelling: <|endoftext|>, <|end_of_text|>, ...
  if (!report.tokenizer.empty()) {
    const data::Tokenizer tok = data::Tokenizer::load(report.tokenizer);
    STRATA_CHECK(tok.vocab_size() <= model.vocab_size, "tokenizer '", report.tokenizer, "' has ",
                 tok.vocab_size(), " tokens but the model's vocab_size is ", model.vocab_size);
    eos = tok.eot_id();
    eos_text = tok.decode_token(tok.eot_id());
  }

  // The global tensors, whatever layout saved them.
  Arena arena;
  ParamStore params;
  register_model_params(model, ModelShard::whole(model), params);
  params.set_residency(true, false);
  params.allocate(arena);
  load_checkpoint_tensors(report.checkpoint, params, params.data(), nullptr, nullptr);

  std::map<std::string, HfTensor> tensors;  // sorted by name
  for (const Rule& r : rules(model)) {
    HfTensor& t = tensors[r.hf];
    const float* src = params.param(params.index_of(r.strata));
    t.shape = r.hf_shape;
    if (r.placement == Placement::same) {
      t.values = src;
      continue;
    }
    if (t.assembled.empty()) t.assembled.assign(static_cast<size_t>(numel(r.hf_shape)), 0.0f);
    place(r, src, t.assembled.data());
    t.values = t.assembled.data();
  }
  for (auto& [name, t] : tensors) {
    if (o.dtype == DType::f32) continue;
    const int64_t n = numel(t.shape);
    t.half.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
      t.half[i] = o.dtype == DType::bf16 ? f32_to_bf16(t.values[i]) : f32_to_f16(t.values[i]);
  }

  // Shards in name order, each filled up to max_shard_bytes.
  std::vector<std::vector<std::string>> shards(1);
  int64_t in_shard = 0;
  for (const auto& [name, t] : tensors) {
    const int64_t bytes = numel(t.shape) * static_cast<int64_t>(dtype_size(o.dtype));
    if (o.max_shard_bytes > 0 && in_shard > 0 && in_shard + bytes > o.max_shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(name);
    in_shard += bytes;
    report.bytes += bytes;
  }
  report.tensors = static_cast<int64_t>(tensors.size());

  io::make_dirs(o.out_dir);
  const fs::path out(o.out_dir);
  remove_old_weights(out);
  const std::map<std::string, std::string> metadata = {{"format", "pt"}};
  nlohmann::json weight_map = nlohmann::json::object();
  for (size_t s = 0; s < shards.size(); ++s) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", s + 1, shards.size());
    const std::string file = shards.size() == 1 ? "model.safetensors" : name;
    std::vector<io::TensorRef> refs;
    for (const std::string& n : shards[s]) {
      const HfTensor& t = tensors.at(n);
      refs.push_back(io::TensorRef{n, o.dtype, t.shape, t.data(o.dtype)});
      weight_map[n] = file;
    }
    io::write_safetensors((out / file).string(), refs, metadata);
    report.files.push_back(file);
  }
  if (shards.size() > 1) {
    const nlohmann::json index = {{"metadata", {{"total_size", report.bytes}}},
                                  {"weight_map", weight_map}};
    io::write_file_atomic((out / "model.safetensors.index.json").string(), index.dump(2));
    report.files.push_back("model.safetensors.index.json");
  }
  nlohmann::json config = config_json(model, eos);
  config["torch_dtype"] = torch_dtype(o.dtype);
  io::write_file_atomic((out / "config.json").string(), config.dump(2) + "\n");
  report.files.push_back("config.json");
  if (!report.tokenizer.empty()) {
    io::write_file_atomic((out / "tokenizer.json").string(), io::read_file(report.tokenizer));
    const nlohmann::json tok_config = {{"tokenizer_class", "PreTrainedTokenizerFast"},
                                       {"bos_token", eos_text},
                                       {"eos_token", eos_text},
                                       {"unk_token", eos_text},
                                       {"model_max_length", model.max_seq_len},
                                       {"clean_up_tokenization_spaces", false}};
    io::write_file_atomic((out / "tokenizer_config.json").string(), tok_config.dump(2) + "\n");
    report.files.push_back("tokenizer.json");
    report.files.push_back("tokenizer_config.json");
  }
  io::fsync_dir(o.out_dir);
  return report;
}

}  // namespace strata::hf
