// The PyTorch golden files (tests/golden, written by tools/torch_reference.py): float64 results
// of the same decoder from the same weights, read by the CPU and the GPU model tests.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "model/config.h"

namespace strata::testing {

struct Golden {
  io::SafetensorsFile file;
  nlohmann::json config, optim;

  explicit Golden(const std::string& name)
      : file(io::SafetensorsFile::open(std::string(STRATA_SOURCE_DIR) + "/tests/golden/" + name)) {
    config = nlohmann::json::parse(file.metadata().at("config"));
    optim = nlohmann::json::parse(file.metadata().at("optim"));
  }
  template <typename T>
  std::vector<T> read(const std::string& name) const {
    const auto info = file.info(name);
    int64_t n = 1;
    for (int64_t d : info.shape) n *= d;
    std::vector<T> out(static_cast<size_t>(n));
    file.read_into(name, out.data(), out.size() * sizeof(T));
    return out;
  }
};

// The model the golden file was made with.
inline ModelConfig golden_model_config(const nlohmann::json& j) {
  ModelConfig c;
  c.family = family_from_name(j.at("family").get<std::string>());
  c.n_layer = j.at("n_layer");
  c.n_head = j.at("n_head");
  c.n_kv_head = j.at("n_kv_head");
  c.d_model = j.at("d_model");
  c.d_ff = j.at("d_ff");
  c.vocab_size = j.at("vocab_size");
  c.max_seq_len = j.at("max_seq_len");
  c.norm_eps = j.at("norm_eps");
  c.rope_theta = j.at("rope_theta");
  c.tie_embeddings = j.at("tie_embeddings");
  return c;
}

}  // namespace strata::testing
