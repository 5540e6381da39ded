// Hugging Face transformers naming: how strata's global parameters map onto the tensors of a
// GPT2LMHeadModel (gpt2 family), LlamaForCausalLM (llama family, Llama 2 and 3.x: rope_scaling
// "llama3") or Qwen3ForCausalLM (qwen3 family: llama's names plus
// model.layers.i.self_attn.{q,k}_norm.weight = layers.i.attn.{q,k}_norm.weight, and head_dim)
// or MixtralForCausalLM (mixtral family: llama's attention names; the router
// layers.i.moe.router.weight = model.layers.i.block_sparse_moe.gate.weight, and expert j's
// block_sparse_moe.experts.j.{w1,w3}.weight = rows [0, F) and [F, 2F) of
// layers.i.moe.experts.gate_up.weight[j], its w2.weight = layers.i.moe.experts.down.weight[j])
// or Qwen3MoeForCausalLM (qwen3_moe family: qwen3's attention names; the router
// model.layers.i.mlp.gate.weight, expert j's mlp.experts.j.{gate,up,down}_proj.weight as Mixtral's
// w1, w3, w2),
// and how a ModelConfig maps onto their config.json. The export (hf_export.h) and the import
// (hf_import.h) both walk these rules, so that a round trip is exact by construction.
//
//   strata (every linear [out, in])   gpt2 (Conv1D stores [in, out])        llama
//   embed.weight                      transformer.wte.weight model.embed_tokens.weight
//   pos_embed.weight                  transformer.wpe.weight                -
//   layers.i.attn_norm.*              transformer.h.i.ln_1.* model.layers.i.input_layernorm.weight
//   layers.i.attn.{q,k,v}.weight      transformer.h.i.attn.c_attn.weight
//   model.layers.i.self_attn.{q,k,v}_proj.weight
//                                     ([C, 3C]: columns q | k | v, transposed)
//   layers.i.attn.{q,k,v}.bias        transformer.h.i.attn.c_attn.bias      -
//   layers.i.attn.o.*                 transformer.h.i.attn.c_proj.* (w^T)
//   model.layers.i.self_attn.o_proj.weight layers.i.mlp_norm.*               transformer.h.i.ln_2.*
//   model.layers.i.post_attention_layernorm.weight layers.i.mlp.fc.* / mlp.proj.*
//   transformer.h.i.mlp.c_fc.* / c_proj.* (w^T) layers.i.mlp.{gate,up,down}.weight
//   model.layers.i.mlp.{gate,up,down}_proj.weight final_norm.* transformer.ln_f.* model.norm.weight
//   head.weight (untied only)         lm_head.weight                        lm_head.weight
//
// RoPE needs no permutation: strata's kernel already uses Hugging Face's rotate_half pairs
// (i, i + head_dim/2), so q_proj and k_proj rows are stored as they are.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/config.h"

namespace strata::hf {

// How one strata parameter sits in one Hugging Face tensor.
enum class Placement {
  same,        // identical shape and element order
  transposed,  // strata [rows, cols] is the HF tensor [cols, rows] transposed
  columns,     // strata [rows, in] is HF [in, total] columns [offset, offset + rows), transposed
  segment,     // strata [n] is HF [total] elements [offset, offset + n)
  slice,       // the HF tensor is strata elements [offset, offset + its size) (one expert)
};

struct Rule {
  std::string strata;          // strata global name, e.g. "layers.0.attn.k.weight"
  std::vector<int64_t> shape;  // its global shape
  std::string hf;              // the Hugging Face tensor, e.g. "transformer.h.0.attn.c_attn.weight"
  std::vector<int64_t> hf_shape;  // that tensor's shape
  Placement placement = Placement::same;
  int64_t offset = 0;  // columns/segment: where the strata parameter starts in the HF tensor;
                       // slice: where the HF tensor starts in the strata parameter
};

// One rule per strata global parameter of `config` (finalized), in registration order; a
// MoE expert tensor has one rule per expert piece (slice).
std::vector<Rule> rules(const ModelConfig& config);

// The architecture name transformers loads: "GPT2LMHeadModel", "LlamaForCausalLM",
// "Qwen3ForCausalLM", "MixtralForCausalLM" or "Qwen3MoeForCausalLM".
const char* architecture(ModelFamily family);

// Tensors a Hugging Face checkpoint may hold that are not parameters (causal-mask buffers of old
// GPT-2 files, rotary inv_freq of old Llama files): ignored on import.
bool is_ignored_buffer(const std::string& hf_name);

// Moves one strata parameter's values into / out of its HF tensor (row-major f32 buffers of the
// rule's shape and hf_shape).
void place(const Rule& rule, const float* strata_values, float* hf_values);
void extract(const Rule& rule, const float* hf_values, float* strata_values);

// config.json for `config`; bos/eos: the tokenizer's end-of-text id (-1: none).
nlohmann::json config_json(const ModelConfig& config, int64_t eos_token_id);

// The strata model a Hugging Face config.json describes. Anything strata cannot run exactly
// (an unknown architecture, a rope_scaling other than llama3's, biases in llama attention, a
// sliding window, another activation, ...)
// throws an Error naming the key, its value and what is supported. `source` names the file.
ModelConfig model_from_config_json(const nlohmann::json& j, const std::string& source);

}  // namespace strata::hf
