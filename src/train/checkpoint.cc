#include "train/checkpoint.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <vector>

#include "core/json.h"
#include "core/log.h"
#include "io/atomic_file.h"

namespace strata {

namespace fs = std::filesystem;

namespace {

// v3: each slice's checksum is XXH3 ("xxh3" in index.json). v2 (XXH64, "xxh64") still loads;
// the bump makes a strata from before v3 refuse a v3 checkpoint by its format, not by a key.
constexpr const char* kFormat = "strata-checkpoint-v3";
constexpr const char* kFormatV2 = "strata-checkpoint-v2";

std::string step_dir_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step_%08lld", static_cast<long long>(step));
  return buf;
}

fs::path tmp_dir_of(const std::string& ckpt_root, int64_t step) {
  return fs::path(ckpt_root) / cat(".", step_dir_name(step), ".tmp");
}

}  // namespace

std::string prepare_checkpoint_dir(const std::string& ckpt_root, int64_t step) {
  io::make_dirs(ckpt_root);
  const fs::path tmp = tmp_dir_of(ckpt_root, step);
  std::error_code ec;
  fs::remove_all(tmp, ec);  // a leftover of an earlier failed save
  io::make_dirs(tmp.string());
  return tmp.string();
}

std::string checkpoint_tmp_dir(const std::string& ckpt_root, int64_t step) {
  return tmp_dir_of(ckpt_root, step).string();
}

std::string rank_slice_path(const std::string& tmp_dir, int rank) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "rank_%05d.safetensors", rank);
  return (fs::path(tmp_dir) / buf).string();
}

void abandon_checkpoint(const std::string& ckpt_root, int64_t step) {
  std::error_code ec;
  fs::remove_all(tmp_dir_of(ckpt_root, step), ec);
}

std::string commit_checkpoint(const std::string& ckpt_root, const CheckpointState& state,
                              const std::string& tokenizer_path, int64_t keep_last) {
  const std::string name = step_dir_name(state.step);
  const fs::path final_dir = fs::path(ckpt_root) / name;
  const fs::path tmp_dir = tmp_dir_of(ckpt_root, state.step);
  // The index: every slice of every rank file, and every global tensor's shape.
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(tmp_dir)) {
    const std::string n = entry.path().filename().string();
    if (n.rfind("rank_", 0) == 0 && entry.path().extension() == ".safetensors") files.push_back(n);
  }
  std::sort(files.begin(), files.end());
  nlohmann::json slices = nlohmann::json::array(), tensors = nlohmann::json::object();
  for (const std::string& f : files) {
    for (const SliceEntry& e : read_slice_file_entries((tmp_dir / f).string())) {
      tensors[e.tensor] = {{"shape", e.global_shape}, {"dtype", "F32"}};
      slices.push_back(slice_to_json(e));
    }
  }
  nlohmann::json index = {{"format", kFormat},
                          {"step", state.step},
                          {"files", files},
                          {"tensors", tensors},
                          {"slices", slices}};
  io::write_file_atomic((tmp_dir / "index.json").string(), index.dump(1));
  if (!tokenizer_path.empty() && fs::exists(tokenizer_path))
    io::write_file_atomic((tmp_dir / "tokenizer.json").string(), io::read_file(tokenizer_path));
  nlohmann::json j;
  j["step"] = state.step;
  j["config"] = state.config;
  j["data"] = state.data;
  j["extra"] = state.extra;
  j["format"] = kFormat;
  io::write_file_atomic((tmp_dir / "state.json").string(), j.dump(2));  // last: marks it complete
  io::fsync_dir(tmp_dir.string());

  std::error_code ec;
  if (fs::exists(final_dir)) fs::remove_all(final_dir);  // same step saved again (resume)
  fs::rename(tmp_dir, final_dir);
  io::fsync_dir(ckpt_root);
  io::write_file_atomic((fs::path(ckpt_root) / "latest").string(), name + "\n");

  if (keep_last > 0) {
    const std::vector<std::string> committed = committed_checkpoints(ckpt_root);  // newest first
    for (size_t i = static_cast<size_t>(keep_last); i < committed.size(); ++i)
      if (fs::path(committed[i]).filename() != name) fs::remove_all(committed[i], ec);
  }
  return final_dir.string();
}

std::vector<std::string> committed_checkpoints(const std::string& ckpt_root) {
  std::vector<std::string> committed;
  std::error_code ec;
  if (!fs::is_directory(ckpt_root, ec)) return committed;
  for (const auto& entry : fs::directory_iterator(ckpt_root)) {
    const std::string n = entry.path().filename().string();
    if (entry.is_directory() && n.rfind("step_", 0) == 0 && fs::exists(entry.path() / "state.json"))
      committed.push_back(entry.path().string());
  }
  std::sort(committed.rbegin(), committed.rend());
  return committed;
}

std::vector<SliceEntry> parse_checkpoint_index(const std::string& text, const std::string& path) {
  std::vector<SliceEntry> entries;
  try {
    const nlohmann::json j = parse_json(text, path);
    const std::string format = j.value("format", "");
    STRATA_CHECK(format == kFormat || format == kFormatV2, "'", path, "' is not a ", kFormat,
                 " or ", kFormatV2, " index (format '", format, "')");
    for (const nlohmann::json& e : j.at("slices")) entries.push_back(slice_from_json(e));
  } catch (const std::exception& e) {
    throw CheckpointCorrupt(path, cat("checkpoint index '", path, "' is unreadable: ", e.what()));
  }
  return entries;
}

std::vector<SliceEntry> read_checkpoint_index(const std::string& dir) {
  const std::string path = (fs::path(dir) / "index.json").string();
  std::string text;
  try {
    text = io::read_file(path);
  } catch (const std::exception& e) {
    throw CheckpointCorrupt(path, cat("checkpoint index '", path, "' is unreadable: ", e.what()));
  }
  return parse_checkpoint_index(text, path);
}

std::optional<std::string> latest_checkpoint(const std::string& ckpt_root) {
  const fs::path latest = fs::path(ckpt_root) / "latest";
  if (!fs::exists(latest)) return std::nullopt;
  std::string name = io::read_file(latest.string());
  while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
  const fs::path dir = fs::path(ckpt_root) / name;
  STRATA_CHECK(fs::exists(dir / "state.json"), "'", latest.string(), "' names checkpoint '", name,
               "', which is missing or incomplete; remove the file or point it at a complete one");
  return dir.string();
}

std::string resolve_checkpoint(const std::string& path) {
  const fs::path p(path);
  if (fs::exists(p / "state.json")) return p.string();
  if (auto dir = latest_checkpoint(p.string())) return *dir;
  if (auto dir = latest_checkpoint((p / "ckpt").string())) return *dir;
  if (p.filename() == "latest" && fs::exists(p))
    if (auto dir = latest_checkpoint(p.parent_path().string())) return *dir;
  fail("'", path,
       "' is not a checkpoint: expected a directory with state.json, a ckpt directory "
       "with a 'latest' file, or a run directory (e.g. runs/tiny/ckpt/latest)");
}

CheckpointState parse_checkpoint_state(const std::string& text, const std::string& path) {
  // A damaged state.json is CheckpointCorrupt, like a damaged index or slice file, so that a
  // resume falls back to an older checkpoint (Trainer::restore).
  const auto corrupt = [&](const std::string& why) {
    throw CheckpointCorrupt(path, cat("checkpoint state '", path, "' ", why,
                                      "; the file is damaged (resume falls back to an older "
                                      "checkpoint, or set run.resume = \"none\")"));
  };
  nlohmann::json j;
  try {
    j = parse_json(text, path);
  } catch (const nlohmann::json::exception& e) {
    corrupt(cat("is not valid JSON (", e.what(), ")"));
  } catch (const Error& e) {
    corrupt(cat("is unreadable: ", e.what()));
  }
  // Checked here, so that no nlohmann type_error escapes from a field of the wrong type.
  if (!j.is_object()) corrupt(cat("is a JSON ", j.type_name(), ", not an object"));
  const auto step = j.find("step");
  if (step == j.end() || !step->is_number_integer() || step->get<int64_t>() < 0)
    corrupt(cat("has \"step\" = ", step == j.end() ? "(missing)" : step->dump(),
                ", not a step count >= 0"));
  const auto config = j.find("config");
  if (config == j.end() || !config->is_object()) corrupt(cat("has no \"config\" object"));
  CheckpointState s;
  s.step = step->get<int64_t>();
  s.config = *config;
  s.data = j.value("data", nlohmann::json::object());
  s.extra = j.value("extra", nlohmann::json::object());
  return s;
}

CheckpointState read_checkpoint_state(const std::string& dir) {
  const std::string path = (fs::path(dir) / "state.json").string();
  return parse_checkpoint_state(io::read_file(path), path);
}

void load_checkpoint_tensors(const std::string& dir, const ParamStore& params, float* param_data,
                             float* exp_avg, float* exp_avg_sq) {
  std::vector<SliceTarget> targets;
  auto add = [&](const std::string& kind, float* base) {
    if (!base) return;
    for (const ParamInfo& p : params.all())
      targets.push_back(SliceTarget{block_of(p, kind, 0, p.numel), base + p.offset});
  };
  add("", param_data);
  if (exp_avg && exp_avg_sq) {
    add("exp_avg.", exp_avg);
    add("exp_avg_sq.", exp_avg_sq);
  }
  load_slices(dir, read_checkpoint_index(dir), targets);
}

}  // namespace strata
