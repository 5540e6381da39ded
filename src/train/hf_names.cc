#include "train/hf_names.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>

#include "core/error.h"
#include "model/block.h"

namespace strata::hf {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The value a float config field means (1e-5f is written 1e-05, not 9.99999974737875e-06).
double shortest(float f) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, f);
  *r.ptr = '\0';
  return std::strtod(buf, nullptr);
}

// Reads config.json fields, naming the file and the key in every error.
struct Fields {
  const nlohmann::json& j;
  const std::string& source;

  const nlohmann::json* find(const char* key) const {
    const auto it = j.find(key);
    return it == j.end() || it->is_null() ? nullptr : &*it;
  }
  int64_t integer(const char* key) const {
    const nlohmann::json* v = find(key);
    STRATA_CHECK(v, source, ": missing key \"", key, "\"");
    STRATA_CHECK(v->is_number_integer(), source, ": \"", key, "\" must be an integer, found ",
                 v->dump());
    return v->get<int64_t>();
  }
  int64_t integer(const char* key, int64_t fallback) const {
    return find(key) ? integer(key) : fallback;
  }
  float number(const char* key, double fallback) const {
    const nlohmann::json* v = find(key);
    if (!v) return static_cast<float>(fallback);
    STRATA_CHECK(v->is_number(), source, ": \"", key, "\" must be a number, found ", v->dump());
    return static_cast<float>(v->get<double>());
  }
  bool boolean(const char* key, bool fallback) const {
    const nlohmann::json* v = find(key);
    if (!v) return fallback;
    STRATA_CHECK(v->is_boolean(), source, ": \"", key, "\" must be true or false, found ",
                 v->dump());
    return v->get<bool>();
  }
  std::string text(const char* key, const std::string& fallback) const {
    const nlohmann::json* v = find(key);
    if (!v) return fallback;
    STRATA_CHECK(v->is_string(), source, ": \"", key, "\" must be a string, found ", v->dump());
    return v->get<std::string>();
  }
  // A key whose only supported value is `want` (or its absence).
  void require(const char* key, bool want, const char* why) const {
    const bool got = boolean(key, want);
    STRATA_CHECK(got == want, source, ": \"", key, "\" = ", got ? "true" : "false",
                 " is not supported: ", why);
  }
};

}  // namespace

namespace {
struct HfFamily {
  ModelFamily family;
  const char* architecture;
  const char* model_type;
};
constexpr HfFamily kHfFamilies[] = {{ModelFamily::gpt2, "GPT2LMHeadModel", "gpt2"},
                                    {ModelFamily::llama, "LlamaForCausalLM", "llama"},
                                    {ModelFamily::qwen3, "Qwen3ForCausalLM", "qwen3"},
                                    {ModelFamily::mixtral, "MixtralForCausalLM", "mixtral"},
                                    {ModelFamily::qwen3_moe, "Qwen3MoeForCausalLM", "qwen3_moe"}};

// Where an MoE family's experts sit in its Hugging Face checkpoint: model.layers.i.<block>.gate
// is the router, model.layers.i.<block>.experts.j.<gate | up | down>.weight expert j's tensors
// (the per-expert names transformers 5 still writes with save_pretrained, and reads back into
// its fused gate_up_proj [E, 2F, C] and down_proj [E, C, F], which are strata's layout).
struct HfExperts {
  const char* block;
  const char *gate, *up, *down;
};
HfExperts hf_experts(ModelFamily family) {
  if (family == ModelFamily::mixtral) return {"block_sparse_moe", "w1", "w3", "w2"};
  return {"mlp", "gate_proj", "up_proj", "down_proj"};  // qwen3_moe (Qwen2-MoE's names)
}
const HfFamily& hf_family(ModelFamily family) {
  for (const HfFamily& f : kHfFamilies)
    if (f.family == family) return f;
  fail("the ", family_name(family), " family has no Hugging Face mapping");
}
}  // namespace

const char* architecture(ModelFamily family) {
  return hf_family(family).architecture;
}

std::vector<Rule> rules(const ModelConfig& c) {
  hf_family(c.family);  // throws for a family without a mapping
  const int64_t C = c.d_model, nq = c.n_head * c.head_dim(), nkv = c.kv_heads() * c.head_dim();
  const int64_t F = c.d_ff, V = c.vocab_size, qkv = nq + 2 * nkv;
  std::vector<Rule> out;
  auto add = [&](const std::string& s, std::vector<int64_t> shape, const std::string& h,
                 Placement pl = Placement::same, std::vector<int64_t> hs = {}, int64_t off = 0) {
    if (hs.empty()) hs = pl == Placement::transposed ? std::vector{shape[1], shape[0]} : shape;
    out.push_back(Rule{s, std::move(shape), h, std::move(hs), pl, off});
  };
  if (c.family == ModelFamily::gpt2) {
    const std::string t = "transformer.";
    add("embed.weight", {V, C}, t + "wte.weight");
    add("pos_embed.weight", {c.max_seq_len, C}, t + "wpe.weight");
    for (int64_t l = 0; l < c.n_layer; ++l) {
      const std::string p = "layers." + std::to_string(l) + ".";
      const std::string h = t + "h." + std::to_string(l) + ".";
      for (const char* w : {"weight", "bias"}) add(p + "attn_norm." + w, {C}, h + "ln_1." + w);
      const std::string qkv_w = h + "attn.c_attn.weight", qkv_b = h + "attn.c_attn.bias";
      add(p + "attn.q.weight", {nq, C}, qkv_w, Placement::columns, {C, qkv}, 0);
      add(p + "attn.k.weight", {nkv, C}, qkv_w, Placement::columns, {C, qkv}, nq);
      add(p + "attn.v.weight", {nkv, C}, qkv_w, Placement::columns, {C, qkv}, nq + nkv);
      add(p + "attn.q.bias", {nq}, qkv_b, Placement::segment, {qkv}, 0);
      add(p + "attn.k.bias", {nkv}, qkv_b, Placement::segment, {qkv}, nq);
      add(p + "attn.v.bias", {nkv}, qkv_b, Placement::segment, {qkv}, nq + nkv);
      add(p + "attn.o.weight", {C, nq}, h + "attn.c_proj.weight", Placement::transposed);
      add(p + "attn.o.bias", {C}, h + "attn.c_proj.bias");
      for (const char* w : {"weight", "bias"}) add(p + "mlp_norm." + w, {C}, h + "ln_2." + w);
      add(p + "mlp.fc.weight", {F, C}, h + "mlp.c_fc.weight", Placement::transposed);
      add(p + "mlp.fc.bias", {F}, h + "mlp.c_fc.bias");
      add(p + "mlp.proj.weight", {C, F}, h + "mlp.c_proj.weight", Placement::transposed);
      add(p + "mlp.proj.bias", {C}, h + "mlp.c_proj.bias");
    }
    for (const char* w : {"weight", "bias"})
      add(std::string("final_norm.") + w, {C}, t + "ln_f." + w);
  } else {
    add("embed.weight", {V, C}, "model.embed_tokens.weight");
    for (int64_t l = 0; l < c.n_layer; ++l) {
      const std::string p = "layers." + std::to_string(l) + ".";
      const std::string h = "model.layers." + std::to_string(l) + ".";
      add(p + "attn_norm.weight", {C}, h + "input_layernorm.weight");
      add(p + "attn.q.weight", {nq, C}, h + "self_attn.q_proj.weight");
      add(p + "attn.k.weight", {nkv, C}, h + "self_attn.k_proj.weight");
      add(p + "attn.v.weight", {nkv, C}, h + "self_attn.v_proj.weight");
      add(p + "attn.o.weight", {C, nq}, h + "self_attn.o_proj.weight");
      if (block_for(c.family).layout().head_norm) {
        add(p + "attn.q_norm.weight", {c.head_dim()}, h + "self_attn.q_norm.weight");
        add(p + "attn.k_norm.weight", {c.head_dim()}, h + "self_attn.k_norm.weight");
      }
      add(p + "mlp_norm.weight", {C}, h + "post_attention_layernorm.weight");
      if (c.moe.enabled()) {
        // Each expert's gate and up are rows of gate_up[j], its down is down[j].
        const int64_t E = c.moe.experts, Fe = c.expert_ffn();
        const HfExperts names = hf_experts(c.family);
        const std::string moe = h + names.block + ".";
        add(p + "moe.router.weight", {E, C}, moe + "gate.weight");
        for (int64_t j = 0; j < E; ++j) {
          const std::string x = moe + "experts." + std::to_string(j) + ".";
          add(p + "moe.experts.gate_up.weight", {E, 2 * Fe, C}, x + names.gate + ".weight",
              Placement::slice, {Fe, C}, 2 * j * Fe * C);
          add(p + "moe.experts.gate_up.weight", {E, 2 * Fe, C}, x + names.up + ".weight",
              Placement::slice, {Fe, C}, (2 * j + 1) * Fe * C);
          add(p + "moe.experts.down.weight", {E, C, Fe}, x + names.down + ".weight",
              Placement::slice, {C, Fe}, j * C * Fe);
        }
        continue;
      }
      add(p + "mlp.gate.weight", {F, C}, h + "mlp.gate_proj.weight");
      add(p + "mlp.up.weight", {F, C}, h + "mlp.up_proj.weight");
      add(p + "mlp.down.weight", {C, F}, h + "mlp.down_proj.weight");
    }
    add("final_norm.weight", {C}, "model.norm.weight");
  }
  if (!c.tie_embeddings) add("head.weight", {V, C}, "lm_head.weight");
  return out;
}

namespace {
int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}
}  // namespace

bool is_ignored_buffer(const std::string& n) {
  return ends_with(n, ".attn.bias") || ends_with(n, ".attn.masked_bias") ||
         ends_with(n, ".rotary_emb.inv_freq");
}

void place(const Rule& r, const float* s, float* h) {
  switch (r.placement) {
    case Placement::slice:
      std::copy(s + r.offset, s + r.offset + numel_of(r.hf_shape), h);
      return;
    case Placement::same:
    case Placement::segment: {
      int64_t n = 1;
      for (int64_t d : r.shape) n *= d;
      std::copy(s, s + n, h + r.offset);
      return;
    }
    case Placement::transposed:
    case Placement::columns: {
      const int64_t rows = r.shape[0], in = r.shape[1], total = r.hf_shape[1];
      for (int64_t i = 0; i < in; ++i)
        for (int64_t o = 0; o < rows; ++o) h[i * total + r.offset + o] = s[o * in + i];
      return;
    }
  }
}

void extract(const Rule& r, const float* h, float* s) {
  switch (r.placement) {
    case Placement::slice:
      std::copy(h, h + numel_of(r.hf_shape), s + r.offset);
      return;
    case Placement::same:
    case Placement::segment: {
      int64_t n = 1;
      for (int64_t d : r.shape) n *= d;
      std::copy(h + r.offset, h + r.offset + n, s);
      return;
    }
    case Placement::transposed:
    case Placement::columns: {
      const int64_t rows = r.shape[0], in = r.shape[1], total = r.hf_shape[1];
      for (int64_t o = 0; o < rows; ++o)
        for (int64_t i = 0; i < in; ++i) s[o * in + i] = h[i * total + r.offset + o];
      return;
    }
  }
}

nlohmann::json config_json(const ModelConfig& c, int64_t eos) {
  nlohmann::json j;
  j["architectures"] = {architecture(c.family)};
  const nlohmann::json token = eos >= 0 ? nlohmann::json(eos) : nlohmann::json();
  if (c.family == ModelFamily::gpt2) {
    j["model_type"] = "gpt2";
    j["vocab_size"] = c.vocab_size;
    j["n_positions"] = c.max_seq_len;
    j["n_embd"] = c.d_model;
    j["n_layer"] = c.n_layer;
    j["n_head"] = c.n_head;
    j["n_inner"] = c.d_ff;
    j["activation_function"] = "gelu_new";  // GELU, tanh approximation
    j["layer_norm_epsilon"] = shortest(c.norm_eps);
    j["resid_pdrop"] = j["embd_pdrop"] = j["attn_pdrop"] = 0.0;  // strata trains without dropout
    j["scale_attn_weights"] = true;
  } else {
    j["model_type"] = hf_family(c.family).model_type;
    j["vocab_size"] = c.vocab_size;
    j["max_position_embeddings"] = c.max_seq_len;
    j["hidden_size"] = c.d_model;
    j["intermediate_size"] = c.family == ModelFamily::mixtral ? c.expert_ffn() : c.d_ff;
    j["num_hidden_layers"] = c.n_layer;
    j["num_attention_heads"] = c.n_head;
    j["num_key_value_heads"] = c.kv_heads();
    j["head_dim"] = c.head_dim();
    j["hidden_act"] = "silu";
    j["rms_norm_eps"] = shortest(c.norm_eps);
    j["rope_theta"] = shortest(c.rope_theta);
    j["rope_scaling"] = nullptr;
    if (c.rope_scaling == RopeScaling::llama3) {
      j["rope_scaling"] = {{"rope_type", "llama3"},
                           {"factor", c.rope_factor},
                           {"low_freq_factor", c.rope_low_freq_factor},
                           {"high_freq_factor", c.rope_high_freq_factor},
                           {"original_max_position_embeddings", c.rope_original_max_seq_len}};
    }
    j["attention_bias"] = false;
    STRATA_CHECK(
        c.moe.shared_experts == 0, "export: ", family_name(c.family),
        " in Hugging Face has no shared experts; this model has model.moe.shared_experts = ",
        c.moe.shared_experts);
    STRATA_CHECK(c.moe.activation == MoeActivation::swiglu, "export: ", family_name(c.family),
                 " in Hugging Face has SwiGLU experts; this model has model.moe.activation = \"",
                 enum_name(c.moe.activation), "\"");
    if (c.family == ModelFamily::qwen3_moe) {
      // Softmax top-k, renormalised or not (norm_topk_prob), unscaled; every layer sparse.
      const MoeConfig& m = c.moe;
      STRATA_CHECK(m.gating == kernels::MoeGating::softmax_topk && m.routed_scale == 1.0f,
                   "export: Qwen3MoeForCausalLM routes by softmax top-k, unscaled; this model has "
                   "model.moe.gating = \"",
                   enum_name(m.gating), "\", routed_scale = ", m.routed_scale);
      j["intermediate_size"] = c.d_ff;  // the width of dense (mlp_only) layers: none here
      j["moe_intermediate_size"] = c.expert_ffn();
      j["num_experts"] = m.experts;
      j["num_experts_per_tok"] = m.top_k;
      j["norm_topk_prob"] = m.normalize_topk;
      j["router_aux_loss_coef"] = shortest(m.aux_loss_coeff);
      j["output_router_logits"] = false;
      j["decoder_sparse_step"] = 1;
      j["mlp_only_layers"] = nlohmann::json::array();
      j["use_sliding_window"] = false;
      j["sliding_window"] = nullptr;
    } else if (c.family == ModelFamily::qwen3) {
      j["use_sliding_window"] = false;
      j["sliding_window"] = nullptr;
      j["max_window_layers"] = c.n_layer;
    } else if (c.family == ModelFamily::mixtral) {
      // Mixtral routes by softmax, top-k renormalised, unscaled: nothing else can be written.
      const MoeConfig& m = c.moe;
      STRATA_CHECK(m.gating == kernels::MoeGating::softmax_topk && m.normalize_topk &&
                       m.routed_scale == 1.0f,
                   "export: MixtralForCausalLM routes by softmax top-k, renormalised and unscaled; "
                   "this model has model.moe.gating = \"",
                   enum_name(m.gating), "\", normalize_topk = ", m.normalize_topk,
                   ", routed_scale = ", m.routed_scale);
      j["num_local_experts"] = m.experts;
      j["num_experts_per_tok"] = m.top_k;
      j["router_aux_loss_coef"] = shortest(m.aux_loss_coeff);
      j["output_router_logits"] = false;
      j["router_jitter_noise"] = 0.0;
      j["sliding_window"] = nullptr;
    } else {
      j["mlp_bias"] = false;
    }
    j["attention_dropout"] = 0.0;
    j["pretraining_tp"] = 1;
  }
  j["initializer_range"] = shortest(c.init_std);
  j["tie_word_embeddings"] = c.tie_embeddings;
  j["bos_token_id"] = token;
  j["eos_token_id"] = token;
  j["use_cache"] = true;
  j["torch_dtype"] = "float32";
  return j;
}

namespace {

ModelConfig model_from_config_fields(const nlohmann::json& j, const std::string& source) {
  STRATA_CHECK(j.is_object(), source, ": expected a JSON object");
  const Fields f{j, source};
  std::string arch;
  if (const nlohmann::json* a = f.find("architectures")) {
    STRATA_CHECK(a->is_array() && !a->empty() && (*a)[0].is_string(), source,
                 ": \"architectures\" must be a list of names, found ", a->dump());
    arch = (*a)[0].get<std::string>();
  }
  const std::string type = f.text("model_type", "");
  ModelConfig c;
  const HfFamily* known = nullptr;
  for (const HfFamily& h : kHfFamilies)
    if (arch == h.architecture || (arch.empty() && type == h.model_type)) known = &h;
  if (!known) {
    fail(source, ": \"architectures\" = [\"", arch, "\"] (\"model_type\" = \"", type,
         "\") is not supported: strata imports GPT2LMHeadModel (model_type \"gpt2\"), "
         "LlamaForCausalLM (model_type \"llama\"), Qwen3ForCausalLM (model_type \"qwen3\"), "
         "MixtralForCausalLM (model_type \"mixtral\") and Qwen3MoeForCausalLM (model_type "
         "\"qwen3_moe\")");
  }
  c.family = known->family;
  c.vocab_size = f.integer("vocab_size");
  c.init_std = f.number("initializer_range", 0.02);
  if (c.family == ModelFamily::gpt2) {
    c.d_model = f.integer("n_embd");
    c.n_layer = f.integer("n_layer");
    c.n_head = f.integer("n_head");
    c.n_kv_head = c.n_head;
    c.d_ff = f.integer("n_inner", 4 * c.d_model);
    c.max_seq_len = f.integer("n_positions");
    c.norm_eps = f.number("layer_norm_epsilon", 1e-5);
    c.tie_embeddings = f.boolean("tie_word_embeddings", true);
    const std::string act = f.text("activation_function", "gelu_new");
    STRATA_CHECK(act == "gelu_new" || act == "gelu_pytorch_tanh", source,
                 ": \"activation_function\" = \"", act,
                 "\" is not supported: strata's gpt2 uses GELU with the tanh approximation "
                 "(\"gelu_new\" or \"gelu_pytorch_tanh\")");
    f.require("scale_attn_weights", true, "strata scales attention scores by 1/sqrt(head_dim)");
    f.require("scale_attn_by_inverse_layer_idx", false,
              "strata scales every layer's attention scores alike");
    f.require("add_cross_attention", false, "strata's decoders have no cross-attention");
  } else {
    c.d_model = f.integer("hidden_size");
    c.n_layer = f.integer("num_hidden_layers");
    c.n_head = f.integer("num_attention_heads");
    c.n_kv_head = f.integer("num_key_value_heads", c.n_head);
    c.d_ff = f.integer("intermediate_size");
    c.max_seq_len = f.integer("max_position_embeddings", 2048);
    c.norm_eps = f.number("rms_norm_eps", 1e-6);
    c.rope_theta = f.number("rope_theta", 10000.0);
    c.tie_embeddings = f.boolean("tie_word_embeddings", false);
    const std::string act = f.text("hidden_act", "silu");
    STRATA_CHECK(act == "silu", source, ": \"hidden_act\" = \"", act,
                 "\" is not supported: strata's llama MLP is SwiGLU (\"silu\")");
    STRATA_CHECK(c.n_head > 0, source, ": \"num_attention_heads\" must be positive, got ",
                 c.n_head);
    // Heads may be wider or narrower than hidden_size / num_attention_heads (Qwen3: 128 at
    // hidden_size 1024 and 16 heads); the default is that quotient.
    if (f.find("head_dim")) {
      c.attn_head_dim = f.integer("head_dim");
      if (c.d_model % c.n_head == 0 && c.attn_head_dim == c.d_model / c.n_head)
        c.attn_head_dim = 0;  // the default width: keep configs and checkpoints as before
    }
    // The RoPE settings: "rope_scaling" (transformers 4) or "rope_parameters" (transformers 5,
    // which also carries rope_theta there). Plain RoPE ("default") and Llama 3's ("llama3") run.
    for (const char* key : {"rope_scaling", "rope_parameters"}) {
      const nlohmann::json* r = f.find(key);
      if (!r) continue;
      STRATA_CHECK(r->is_object(), source, ": \"", key, "\" must be an object, found ", r->dump());
      const Fields rf{*r, source};
      // Fields::text, not json::value: a "rope_type" that is not a string is named, not an
      // escaped nlohmann type_error (found by fuzz_hf_config).
      const std::string kind = rf.text("rope_type", rf.text("type", ""));
      if (kind == "llama3") {
        c.rope_scaling = RopeScaling::llama3;
        c.rope_factor = rf.number("factor", 8.0);
        c.rope_low_freq_factor = rf.number("low_freq_factor", 1.0);
        c.rope_high_freq_factor = rf.number("high_freq_factor", 4.0);
        c.rope_original_max_seq_len = rf.integer("original_max_position_embeddings", 8192);
      } else {
        STRATA_CHECK(kind == "default", source, ": \"", key, "\" = ", r->dump(),
                     " is not supported: strata implements plain RoPE (\"default\") and Llama "
                     "3's frequency scaling (\"llama3\"); use a model with one of them");
      }
      if (r->contains("rope_theta")) c.rope_theta = rf.number("rope_theta", 10000.0);
    }
    if (c.family == ModelFamily::qwen3 || c.family == ModelFamily::qwen3_moe) {
      f.require("use_sliding_window", false,
                "strata's attention is causal over the whole sequence (no sliding window)");
      if (const nlohmann::json* lt = f.find("layer_types")) {
        STRATA_CHECK(lt->is_array(), source, ": \"layer_types\" must be a list, found ",
                     lt->dump());
        for (const nlohmann::json& t : *lt)
          STRATA_CHECK(t == "full_attention", source, ": \"layer_types\" holds ", t.dump(),
                       ": strata's layers all use full causal attention");
      }
    }
    if (c.family == ModelFamily::qwen3_moe) {
      // Every layer sparse: decoder_sparse_step 1 and no mlp_only_layers (dense layers among the
      // sparse ones, which strata's families do not mix).
      const int64_t step = f.integer("decoder_sparse_step", 1);
      STRATA_CHECK(step == 1, source, ": \"decoder_sparse_step\" = ", step,
                   " is not supported: strata's qwen3_moe has the MoE FFN in every layer (1)");
      if (const nlohmann::json* dense = f.find("mlp_only_layers")) {
        STRATA_CHECK(dense->is_array() && dense->empty(), source,
                     ": \"mlp_only_layers\" = ", dense->dump(),
                     " is not supported: strata's qwen3_moe has the MoE FFN in every layer ([])");
      }
      // transformers 5 writes num_experts as num_local_experts (its attribute_map).
      c.moe.experts =
          f.find("num_experts") ? f.integer("num_experts") : f.integer("num_local_experts");
      c.moe.top_k = f.integer("num_experts_per_tok");
      const int64_t fe = f.integer("moe_intermediate_size");
      c.moe.expert_ffn = fe == c.d_ff ? 0 : fe;  // 0: d_ff, as the export writes it back
      c.moe.normalize_topk = f.boolean("norm_topk_prob", false);  // transformers' default
      c.moe.aux_loss_coeff = f.number("router_aux_loss_coef", 0.001);
    } else if (c.family == ModelFamily::mixtral) {
      // Mixtral's intermediate_size is each expert's width.
      c.moe.experts = f.integer("num_local_experts");
      c.moe.top_k = f.integer("num_experts_per_tok", 2);
      // (strata's d_ff is that width too: expert_ffn 0 means d_ff)
      c.moe.aux_loss_coeff = f.number("router_aux_loss_coef", 0.02);
      STRATA_CHECK(!f.find("sliding_window"), source, ": \"sliding_window\" = ",
                   f.find("sliding_window") ? f.find("sliding_window")->dump() : "",
                   " is not supported: strata's attention is causal over the whole sequence; "
                   "set it to null");
      STRATA_CHECK(f.number("router_jitter_noise", 0.0) == 0.0f, source,
                   ": \"router_jitter_noise\" is not supported: strata's router adds no noise");
    } else {
      f.require("mlp_bias", false, "strata's llama MLP has no biases");
    }
    f.require("attention_bias", false, "strata's llama and qwen3 attention has no biases");
  }
  try {
    c.finalize();
  } catch (const Error& e) {
    fail(source, " describes a model strata cannot build: ", e.what());
  }
  return c;
}

}  // namespace

ModelConfig model_from_config_json(const nlohmann::json& j, const std::string& source) {
  // The checks above name each key; a value of the wrong JSON type that one of them misses is
  // still one error naming the file, not an nlohmann exception.
  try {
    return model_from_config_fields(j, source);
  } catch (const nlohmann::json::exception& e) {
    fail(source, ": unexpected JSON (", e.what(), "); expected a Hugging Face config.json");
  }
}

}  // namespace strata::hf
