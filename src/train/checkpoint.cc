#include "train/checkpoint.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <vector>

#include "core/log.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"

namespace strata {

namespace fs = std::filesystem;

namespace {

std::string step_dir_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step_%08lld", static_cast<long long>(step));
  return buf;
}

std::vector<int64_t> shape_of(const ParamInfo& p) {
  return std::vector<int64_t>(p.shape.begin(), p.shape.begin() + p.ndim);
}

void write_tensors(const std::string& path, const ParamStore& params, const float* base,
                   const std::string& prefix) {
  std::vector<io::TensorRef> refs;
  refs.reserve(params.all().size());
  for (const ParamInfo& p : params.all())
    refs.push_back(io::TensorRef{prefix + p.name, DType::f32, shape_of(p), base + p.offset});
  io::write_safetensors(path, refs, {{"format", "strata"}});
}

void read_tensors(const std::string& path, const ParamStore& params, float* base,
                  const std::string& prefix) {
  io::SafetensorsFile file = io::SafetensorsFile::open(path);
  for (const ParamInfo& p : params.all()) {
    const std::string name = prefix + p.name;
    STRATA_CHECK(file.has(name), "checkpoint file '", path, "' has no tensor '", name,
                 "': it was saved from a different model; check model.* in the config");
    const auto info = file.info(name);
    STRATA_CHECK(info.shape == shape_of(p), "checkpoint file '", path, "': tensor '", name,
                 "' has a different shape than this model's; check model.* in the config");
    file.read_into(name, base + p.offset, static_cast<size_t>(p.numel) * sizeof(float));
  }
}

}  // namespace

std::string save_checkpoint(const std::string& ckpt_root, const ParamStore& params,
                            const float* param_data, const float* exp_avg, const float* exp_avg_sq,
                            const CheckpointState& state, const std::string& tokenizer_path,
                            int64_t keep_last) {
  io::make_dirs(ckpt_root);
  const std::string name = step_dir_name(state.step);
  const fs::path final_dir = fs::path(ckpt_root) / name;
  const fs::path tmp_dir = fs::path(ckpt_root) / ("." + name + ".tmp");
  std::error_code ec;
  fs::remove_all(tmp_dir, ec);  // a leftover of an earlier failed save
  io::make_dirs(tmp_dir.string());

  write_tensors((tmp_dir / "model.safetensors").string(), params, param_data, "");
  if (exp_avg && exp_avg_sq) {
    // Both moments in one file: every tensor is named, so one file suffices.
    std::vector<io::TensorRef> refs;
    for (const ParamInfo& p : params.all()) {
      refs.push_back(
          io::TensorRef{"exp_avg." + p.name, DType::f32, shape_of(p), exp_avg + p.offset});
      refs.push_back(
          io::TensorRef{"exp_avg_sq." + p.name, DType::f32, shape_of(p), exp_avg_sq + p.offset});
    }
    io::write_safetensors((tmp_dir / "optimizer.safetensors").string(), refs,
                          {{"format", "strata"}});
  }
  if (!tokenizer_path.empty() && fs::exists(tokenizer_path))
    io::write_file_atomic((tmp_dir / "tokenizer.json").string(), io::read_file(tokenizer_path));
  nlohmann::json j;
  j["step"] = state.step;
  j["config"] = state.config;
  j["data"] = state.data;
  j["extra"] = state.extra;
  j["format"] = "strata-checkpoint-v1";
  io::write_file_atomic((tmp_dir / "state.json").string(), j.dump(2));  // last: marks it complete
  io::fsync_dir(tmp_dir.string());

  if (fs::exists(final_dir)) fs::remove_all(final_dir);  // same step saved again (resume)
  fs::rename(tmp_dir, final_dir);
  io::fsync_dir(ckpt_root);
  io::write_file_atomic((fs::path(ckpt_root) / "latest").string(), name + "\n");

  if (keep_last > 0) {
    std::vector<std::string> committed;
    for (const auto& entry : fs::directory_iterator(ckpt_root)) {
      const std::string n = entry.path().filename().string();
      if (entry.is_directory() && n.rfind("step_", 0) == 0 &&
          fs::exists(entry.path() / "state.json"))
        committed.push_back(n);
    }
    std::sort(committed.begin(), committed.end());
    for (size_t i = 0; i + static_cast<size_t>(keep_last) < committed.size(); ++i)
      if (committed[i] != name) fs::remove_all(fs::path(ckpt_root) / committed[i], ec);
  }
  return final_dir.string();
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

CheckpointState read_checkpoint_state(const std::string& dir) {
  const std::string path = (fs::path(dir) / "state.json").string();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(io::read_file(path));
  } catch (const nlohmann::json::exception& e) {
    fail("checkpoint state '", path, "' is not valid JSON (", e.what(), ")");
  }
  CheckpointState s;
  s.step = j.at("step").get<int64_t>();
  s.config = j.at("config");
  s.data = j.value("data", nlohmann::json::object());
  s.extra = j.value("extra", nlohmann::json::object());
  return s;
}

void load_checkpoint_tensors(const std::string& dir, const ParamStore& params, float* param_data,
                             float* exp_avg, float* exp_avg_sq) {
  read_tensors((fs::path(dir) / "model.safetensors").string(), params, param_data, "");
  if (exp_avg && exp_avg_sq) {
    const std::string path = (fs::path(dir) / "optimizer.safetensors").string();
    read_tensors(path, params, exp_avg, "exp_avg.");
    read_tensors(path, params, exp_avg_sq, "exp_avg_sq.");
  }
}

}  // namespace strata
