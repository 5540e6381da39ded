// DeepSpeed JSON -> strata keys. Each section is a table of handlers, one per DeepSpeed key; a key
// without a handler is unknown. Errors are collected and reported together, so a file with three
// unsupported keys names all three at once. docs/DEEPSPEED.md is the user-facing table.
#include "run/deepspeed_config.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>

#include "core/error.h"
#include "core/json.h"

namespace strata {

namespace {

using json = nlohmann::json;

bool is_auto(const json& v) {
  return v.is_string() && v.get<std::string>() == "auto";
}

// Values for "section.key=value" overrides, in TOML syntax.
std::string toml_number(double v) {
  char buf[32];
  const auto res = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, res.ptr);
}

std::string toml_string(const std::string& s) {
  std::string out = "\"";
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

std::string join(const std::vector<std::string>& items, const std::string& sep) {
  std::string out;
  for (const std::string& s : items) out += (out.empty() ? "" : sep) + s;
  return out;
}

class Translator {
 public:
  using Handler = std::function<void(const std::string& key, const json& value)>;
  using Section = std::map<std::string, Handler>;

  explicit Translator(const std::string& source) { out_.source = source; }

  DeepSpeedConfig translate(const json& root);

 private:
  // ---- reading values: false for "auto" (keep strata's value); a wrong type is an error -----
  bool number(const std::string& key, const json& v, double& out) {
    if (is_auto(v)) return false;
    if (!v.is_number() || !std::isfinite(v.get<double>()))
      return type_error(key, v, "a finite number");
    out = v.get<double>();
    return true;
  }
  // Integers may be written as 5e8 in DeepSpeed files (bucket sizes): a float that is whole is
  // taken, anything else is an error.
  bool integer(const std::string& key, const json& v, int64_t& out) {
    if (is_auto(v)) return false;
    if (v.is_number_integer()) {
      out = v.get<int64_t>();
      return true;
    }
    if (v.is_number_float()) {
      const double d = v.get<double>();
      if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9e15) {
        out = static_cast<int64_t>(d);
        return true;
      }
    }
    return type_error(key, v, "an integer");
  }
  bool boolean(const std::string& key, const json& v, bool& out) {
    if (is_auto(v)) return false;
    if (!v.is_boolean()) return type_error(key, v, "true or false");
    out = v.get<bool>();
    return true;
  }
  bool string(const std::string& key, const json& v, std::string& out) {
    if (is_auto(v)) return false;
    if (!v.is_string()) return type_error(key, v, "a string");
    out = v.get<std::string>();
    return true;
  }
  bool type_error(const std::string& key, const json& v, const std::string& expected) {
    std::string shown = v.dump();
    if (shown.size() > 40) shown = shown.substr(0, 37) + "...";
    error(key, cat("expected ", expected, " (or \"auto\"), found ", v.type_name(), " ", shown));
    return false;
  }

  void set(const std::string& strata_key, const std::string& toml_value) {
    out_.overrides.push_back(strata_key + "=" + toml_value);
  }
  void warn(const std::string& key, const std::string& text) {
    out_.warnings.push_back(key + ": " + text);
  }
  void error(const std::string& key, const std::string& text) {
    errors_.push_back(key + ": " + text);
  }

  // Walks an object with `section`'s handlers; keys without one are unknown.
  void walk(const std::string& prefix, const json& object, const Section& section) {
    if (!object.is_object()) {
      error(prefix, cat("expected an object, found ", object.type_name()));
      return;
    }
    for (const auto& [name, value] : object.items()) {
      const std::string key = prefix.empty() ? name : prefix + "." + name;
      const auto h = section.find(name);
      if (h == section.end())
        error(key, "unknown key (not a DeepSpeed key strata knows; see docs/DEEPSPEED.md)");
      else
        h->second(key, value);
    }
  }

  // ---- small policies --------------------------------------------------------------------
  Handler map_bool(const std::string& strata_key) {
    return [this, strata_key](const std::string& key, const json& v) {
      bool b = false;
      if (boolean(key, v, b)) set(strata_key, b ? "true" : "false");
    };
  }
  Handler map_int(const std::string& strata_key, int64_t min) {
    return [this, strata_key, min](const std::string& key, const json& v) {
      int64_t i = 0;
      if (!integer(key, v, i)) return;
      if (i < min) return error(key, cat("must be at least ", min, ", got ", i));
      set(strata_key, std::to_string(i));
    };
  }
  Handler map_number(const std::string& strata_key) {
    return [this, strata_key](const std::string& key, const json& v) {
      double d = 0;
      if (number(key, v, d)) set(strata_key, toml_number(d));
    };
  }
  // Accepted: no effect in strata (the note is in the docs).
  static Handler accept() {
    return [](const std::string&, const json&) {};
  }
  // Accepted with a warning naming the key unless the value is "auto".
  Handler harmless(const std::string& note) {
    return [this, note](const std::string& key, const json& v) {
      if (!is_auto(v)) warn(key, note);
    };
  }
  // A boolean strata always has as `fine`: the other value is a warning (harmless) or an error.
  Handler flag(bool fine, bool fatal, const std::string& note) {
    return [this, fine, fatal, note](const std::string& key, const json& v) {
      bool b = false;
      if (!boolean(key, v, b) || b == fine) return;
      fatal ? error(key, note) : warn(key, note);
    };
  }
  // A feature section strata does not have: an error, naming the key and what to use instead.
  Handler unsupported(const std::string& note) {
    return [this, note](const std::string& key, const json&) { error(key, note); };
  }
  // A section with an "enabled" switch: enabled true is `fatal` (error) or a warning.
  Handler when_enabled(bool fatal, const std::string& note) {
    return [this, fatal, note](const std::string& key, const json& v) {
      if (!v.is_object()) return (void)error(key, cat("expected an object, found ", v.type_name()));
      const auto e = v.find("enabled");
      bool on = false;
      if (e != v.end() && !boolean(key + ".enabled", *e, on)) return;
      if (on) fatal ? error(key, note) : warn(key, note);
    };
  }

  void batch_key(const std::string& key, const json& v, int64_t& out, const char* strata_key) {
    int64_t i = 0;
    if (!integer(key, v, i)) return;
    if (i < 1) return error(key, cat("must be at least 1, got ", i));
    out = i;
    if (strata_key) set(strata_key, std::to_string(i));
  }

  void precision_section(const std::string& key, const json& v, bool fp16);
  void zero_section(const std::string& key, const json& v);
  void offload_optimizer(const std::string& key, const json& v);
  void optimizer_section(const std::string& key, const json& v);
  void scheduler_section(const std::string& key, const json& v);
  void finish_precision();

  DeepSpeedConfig out_;
  std::vector<std::string> errors_;
  std::vector<std::string> unknown_top_;
  int fp16_enabled_ = -1, bf16_enabled_ = -1;  // -1: not said
  int64_t reduce_bucket_ = 0, allgather_bucket_ = 0;
};

// ---- precision ---------------------------------------------------------------------------

void Translator::precision_section(const std::string& key, const json& v, bool fp16) {
  Section s;
  s["enabled"] = [this, fp16](const std::string& k, const json& x) {
    bool b = false;
    if (boolean(k, x, b)) (fp16 ? fp16_enabled_ : bf16_enabled_) = b ? 1 : 0;
  };
  if (fp16) {
    // LossScalerConfig has DeepSpeed's meaning for every one of these (optim/loss_scaler.h).
    s["loss_scale"] = map_number("fp16.loss_scale");
    s["initial_scale_power"] = map_int("fp16.initial_scale_power", 0);
    s["loss_scale_window"] = map_int("fp16.loss_scale_window", 1);
    s["hysteresis"] = map_int("fp16.hysteresis", 1);
    s["min_loss_scale"] = [this](const std::string& k, const json& x) {
      double m = 0;
      if (!number(k, x, m)) return;
      if (m <= 0)
        return error(k, cat(m,
                            " is not supported: strata's dynamic loss scale needs a positive "
                            "floor (DeepSpeed's default is 1)"));
      set("fp16.min_loss_scale", toml_number(m));
    };
    s["consecutive_hysteresis"] = map_bool("fp16.consecutive_hysteresis");
    s["auto_cast"] = flag(false, false,
                          "ignored: strata's mixed precision casts the GEMM inputs itself (there "
                          "are no model inputs to cast)");
    s["fp16_master_weights_and_grads"] =
        flag(false, true, "not supported: strata keeps f32 master weights and gradients");
  } else {
    s["immediate_grad_update"] =
        flag(false, false, "ignored: strata accumulates gradients in f32 and updates once a step");
  }
  walk(key, v, s);
}

void Translator::finish_precision() {
  if (fp16_enabled_ == 1 && bf16_enabled_ == 1)
    return error("fp16.enabled, bf16.enabled", "both are true; choose one (DeepSpeed's rule too)");
  // The file says which precision it trains in once either section says enabled: true or false;
  // neither enabled is f32, as in DeepSpeed.
  if (fp16_enabled_ == 1)
    set("train.precision", "\"fp16\"");
  else if (bf16_enabled_ == 1)
    set("train.precision", "\"bf16\"");
  else if (fp16_enabled_ == 0 || bf16_enabled_ == 0)
    set("train.precision", "\"f32\"");
}

// ---- ZeRO ----------------------------------------------------------------------------------

void Translator::offload_optimizer(const std::string& key, const json& v) {
  Section s;
  s["device"] = [this](const std::string& k, const json& x) {
    std::string device;
    if (!string(k, x, device)) return;
    if (device == "nvme" || device == "cpu" || device == "none") {
      set("optim.offload", toml_string(device));  // ZeRO-Offload's "cpu" is strata's too
    } else {
      error(k, cat("unknown device '", device, "' (expected \"none\", \"cpu\" or \"nvme\")"));
    }
  };
  s["nvme_path"] = [this](const std::string& k, const json& x) {
    std::string path;
    if (string(k, x, path)) set("optim.offload_dir", toml_string(path));
  };
  s["pin_memory"] = accept();
  s["fast_init"] = accept();
  s["buffer_count"] = harmless(
      "ignored: strata streams the state through two chunk buffers (optim.offload_chunk_mb)");
  s["ratio"] = [this](const std::string& k, const json& x) {
    double r = 0;
    if (number(k, x, r) && r != 1.0)
      error(k, "partial offload is not supported: strata offloads all of the optimizer state");
  };
  walk(key, v, s);
}

void Translator::zero_section(const std::string& key, const json& v) {
  Section s;
  s["stage"] = [this](const std::string& k, const json& x) {
    int64_t stage = 0;
    if (!integer(k, x, stage)) return;
    if (stage < 0 || stage > 3) return error(k, cat("ZeRO stage must be 0-3, got ", stage));
    set("parallel.zero", std::to_string(stage));
  };
  s["overlap_comm"] = map_bool("parallel.overlap");
  // Buckets are counted in elements in DeepSpeed and in MiB of f32 in strata; one size serves
  // strata's reduction and its all-gather (finish() decides).
  s["reduce_bucket_size"] = [this](const std::string& k, const json& x) {
    if (integer(k, x, reduce_bucket_) && reduce_bucket_ < 1)
      error(k, cat("must be positive, got ", reduce_bucket_));
  };
  s["allgather_bucket_size"] = [this](const std::string& k, const json& x) {
    if (integer(k, x, allgather_bucket_) && allgather_bucket_ < 1)
      error(k, cat("must be positive, got ", allgather_bucket_));
  };
  s["contiguous_gradients"] = accept();  // strata's gradients are always one flat buffer
  s["reduce_scatter"] = flag(true, false,
                             "ignored: strata reduce-scatters gradients at ZeRO-2/3 and "
                             "all-reduces them at ZeRO-0/1");
  s["allgather_partitions"] =
      flag(true, false, "ignored: strata all-gathers updated parameters bucket by bucket");
  s["offload_optimizer"] = [this](const std::string& k, const json& x) { offload_optimizer(k, x); };
  s["cpu_offload"] = [this](const std::string& k, const json& x) {
    bool b = false;
    if (boolean(k, x, b) && b) {
      set("optim.offload", "\"cpu\"");
      warn(k,
           "deprecated: use offload_optimizer.device = \"cpu\" (mapped to optim.offload = "
           "\"cpu\")");
    }
  };
  s["offload_param"] = [this](const std::string& k, const json& x) {
    const auto d = x.is_object() ? x.find("device") : x.end();
    if (x.is_object() && (d == x.end() || is_auto(*d) || *d == "none")) return;
    error(k,
          "parameter offload is not supported: strata offloads the optimizer state only "
          "(offload_optimizer.device = \"nvme\")");
  };
  const std::string tuning =
      "ignored: a DeepSpeed tuning knob with no strata equivalent (ZeRO-3 here gathers one bucket "
      "ahead; parallel.bucket_mb sizes the buckets)";
  for (const char* knob :
       {"stage3_prefetch_bucket_size", "stage3_param_persistence_threshold",
        "stage3_max_live_parameters", "stage3_max_reuse_distance", "sub_group_size",
        "round_robin_gradients", "elastic_checkpoint", "load_from_fp32_weights",
        "ignore_unused_parameters", "memory_efficient_linear", "use_multi_rank_bucket_allreduce",
        "log_trace_cache_warnings", "prefetch_bucket_size", "param_persistence_threshold",
        "max_live_parameters", "max_reuse_distance", "model_persistence_threshold"})
    s[knob] = harmless(tuning);
  for (const char* save :
       {"stage3_gather_16bit_weights_on_model_save", "stage3_gather_fp16_weights_on_model_save",
        "gather_16bit_weights_on_model_save"})
    s[save] = harmless(
        "ignored: strata's checkpoints always hold whole global tensors (any layout loads them)");
  s["zero_quantized_weights"] = flag(false, true, "not supported: strata does not quantize");
  s["zero_quantized_gradients"] = flag(false, true, "not supported: strata does not quantize");
  s["zero_hpz_partition_size"] = [this](const std::string& k, const json& x) {
    int64_t n = 0;
    if (integer(k, x, n) && n != 1) error(k, "hierarchical partitioning (ZeRO++) is not supported");
  };
  s["mics_shard_size"] = [this](const std::string& k, const json& x) {
    int64_t n = 0;
    if (integer(k, x, n) && n > 0) error(k, "MiCS sharding is not supported");
  };
  walk(key, v, s);
  if (reduce_bucket_ > 0 && allgather_bucket_ > 0 && reduce_bucket_ != allgather_bucket_)
    warn(key + ".allgather_bucket_size",
         cat(allgather_bucket_, " differs from reduce_bucket_size ", reduce_bucket_,
             ": strata uses one bucket size for both (reduce_bucket_size's)"));
  const int64_t elements = reduce_bucket_ > 0 ? reduce_bucket_ : allgather_bucket_;
  if (elements > 0) set("parallel.bucket_mb", toml_number(elements * 4.0 / (1 << 20)));
}

// ---- optimizer -----------------------------------------------------------------------------

void Translator::optimizer_section(const std::string& key, const json& v) {
  if (!v.is_object()) return error(key, cat("expected an object, found ", v.type_name()));
  std::string type = "adamw";
  if (const auto t = v.find("type"); t != v.end() && string(key + ".type", *t, type)) {
    type = lower(type);  // DeepSpeed compares optimizer names case-insensitively
    if (type != "adam" && type != "adamw")
      error(key + ".type", cat("'", t->get<std::string>(),
                               "' is not supported: strata's optimizer is AdamW (use \"AdamW\" "
                               "or \"Adam\")"));
  }
  double weight_decay = 0;
  bool adam_w_mode = true;
  Section params;
  params["lr"] = map_number("optim.lr");
  params["betas"] = [this](const std::string& k, const json& x) {
    if (is_auto(x)) return;
    if (!x.is_array() || x.size() != 2 || !x[0].is_number() || !x[1].is_number())
      return error(k, cat("expected [beta1, beta2], found ", x.dump()));
    set("optim.beta1", toml_number(x[0].get<double>()));
    set("optim.beta2", toml_number(x[1].get<double>()));
  };
  params["eps"] = map_number("optim.eps");
  params["weight_decay"] = [this, &weight_decay](const std::string& k, const json& x) {
    if (number(k, x, weight_decay)) set("optim.weight_decay", toml_number(weight_decay));
  };
  params["adam_w_mode"] = [this, &adam_w_mode](const std::string& k, const json& x) {
    if (boolean(k, x, adam_w_mode) && !adam_w_mode)
      error(k, "false (L2-regularised Adam) is not supported: strata's weight decay is decoupled");
  };
  params["bias_correction"] = flag(true, true, "false is not supported: strata's AdamW corrects");
  params["amsgrad"] = flag(false, true, "not supported: strata's AdamW has no AMSGrad");
  params["torch_adam"] = accept();  // an implementation choice in DeepSpeed
  params["fused"] = accept();
  Section s;
  s["type"] = accept();  // read above
  s["legacy_fusion"] = accept();
  s["adam_w_mode"] = harmless("ignored here, as by DeepSpeed: it is read from optimizer.params");
  s["params"] = [&](const std::string& k, const json& x) { walk(k, x, params); };
  walk(key, v, s);
  if (type == "adam" && weight_decay > 0 && adam_w_mode)
    warn(key + ".type",
         "\"Adam\" with weight_decay: DeepSpeed's Adam decouples weight decay by default "
         "(adam_w_mode), as strata's AdamW does; mapped as AdamW");
}

// ---- scheduler -----------------------------------------------------------------------------
//
// strata's schedule (optim/adamw.cc learning_rate): lr * (s+1)/W during warmup (s = 0-based step,
// W = optim.warmup_steps), then constant, or from lr to min_lr linearly or by a half cosine over
// the remaining train.steps - W steps. DeepSpeed's (runtime/lr_schedules.py), at iteration s:
//   WarmupLR:       min + (max - min) * g, g = log(s+1)/log(W) ("log", the default) or s/W
//                   ("linear") while s < W; max afterwards            -> decay = "constant"
//   WarmupDecayLR:  as WarmupLR, then min + (max - min) * (T - s)/(T - W) -> "linear", min_lr = min
//                   (strata's linear decay is the same line: 1 - (s - W)/(T - W))
//   WarmupCosineLR: ratios of the optimizer's lr; warmup from warmup_min_ratio, then
//                   cos_min_ratio + (1 - cos_min_ratio) * (1 + cos(pi * (s - W + 1)/(T - W)))/2
//                                                                     -> "cosine", min_lr =
//                                                                     lr*ratio
// Differences: strata warms up linearly from 0 (no warmup_min_lr / warmup_min_ratio start, no
// log shape: each warned about when the file asks for it); its warmup is one step ahead of
// DeepSpeed's linear one ((s+1)/W against s/W) and its cosine one step behind (s - W against
// s - W + 1): documented in docs/DEEPSPEED.md, not warned about.

void Translator::scheduler_section(const std::string& key, const json& v) {
  if (!v.is_object()) return error(key, cat("expected an object, found ", v.type_name()));
  std::string type;
  const auto t = v.find("type");
  if (t == v.end())
    return error(key + ".type", "missing: WarmupLR, WarmupDecayLR or WarmupCosineLR");
  if (is_auto(*t))
    return warn(key + ".type", "\"auto\": strata's schedule ([optim]) is kept, params ignored");
  if (!string(key + ".type", *t, type)) return;
  const bool plain = type == "WarmupLR", decay = type == "WarmupDecayLR",
             cosine = type == "WarmupCosineLR";
  if (!plain && !decay && !cosine)
    return error(key + ".type", cat("'", type,
                                    "' is not supported: strata's schedule is warmup then "
                                    "constant, linear or cosine (WarmupLR, WarmupDecayLR, "
                                    "WarmupCosineLR)"));
  set("optim.decay", plain ? "\"constant\"" : decay ? "\"linear\"" : "\"cosine\"");
  // DeepSpeed's defaults for params the file leaves out: the type chose DeepSpeed's schedule.
  double min_lr = 0, max_lr = 0.001, min_ratio = 0, cos_min_ratio = 0.0001;
  bool max_lr_given = true, min_lr_given = true, cos_ratio_given = true;
  int64_t warmup = 1000;
  std::string warmup_type = "log";
  Section p;
  p["warmup_num_steps"] = [&](const std::string& k, const json& x) {
    if (!integer(k, x, warmup))
      warmup = -1;  // "auto": keep optim.warmup_steps
    else if (warmup < 0)
      error(k, cat("must be 0 or more, got ", warmup));
  };
  p["warmup_type"] = [&](const std::string& k, const json& x) {
    if (string(k, x, warmup_type) && warmup_type != "log" && warmup_type != "linear")
      error(k, cat("unknown warmup_type '", warmup_type, "' (expected \"log\" or \"linear\")"));
  };
  p["total_num_steps"] = [&](const std::string& k, const json& x) {
    if (plain) return error(k, "not a WarmupLR parameter (WarmupDecayLR, WarmupCosineLR)");
    map_int("train.steps", 1)(k, x);
  };
  p["last_batch_iteration"] = [&](const std::string& k, const json& x) {
    int64_t it = 0;
    if (integer(k, x, it) && it != -1)
      error(k,
            "resuming a schedule by iteration is not supported: strata resumes it from the "
            "checkpoint (run.resume)");
  };
  if (plain || decay) {
    p["warmup_min_lr"] = [&](const std::string& k, const json& x) {
      min_lr_given = number(k, x, min_lr);
    };
    p["warmup_max_lr"] = [&](const std::string& k, const json& x) {
      max_lr_given = number(k, x, max_lr);
    };
  } else {
    p["warmup_min_ratio"] = [&](const std::string& k, const json& x) { number(k, x, min_ratio); };
    p["cos_min_ratio"] = [&](const std::string& k, const json& x) {
      cos_ratio_given = number(k, x, cos_min_ratio);
    };
  }
  Section s;
  s["type"] = accept();  // read above
  s["params"] = [&](const std::string& k, const json& x) { walk(k, x, p); };
  walk(key, v, s);

  const std::string params = key + ".params.";
  if (warmup >= 0) set("optim.warmup_steps", std::to_string(warmup));
  if (plain || decay) {
    if (max_lr_given) set("optim.lr", toml_number(max_lr));
    // WarmupDecayLR ends at warmup_min_lr; for WarmupLR min_lr is unused but kept consistent.
    if (min_lr_given) set("optim.min_lr", toml_number(min_lr));
    if (min_lr_given && min_lr > 0 && warmup != 0)
      warn(params + "warmup_min_lr",
           cat(min_lr,
               ": strata's warmup starts from 0 (lr / warmup_steps at the first step), "
               "not from warmup_min_lr; the decay does end at it"));
  } else {
    if (cos_ratio_given) out_.min_lr_ratio = cos_min_ratio;
    if (min_ratio > 0 && warmup != 0)
      warn(params + "warmup_min_ratio",
           cat(min_ratio, ": strata's warmup starts from 0, not from warmup_min_ratio * lr"));
  }
  if (warmup != 0 && warmup_type == "log")
    warn(params + "warmup_type",
         "\"log\" (DeepSpeed's default): strata warms up linearly, lr * (step+1) / warmup_steps");
}

// ---- the whole file ------------------------------------------------------------------------

DeepSpeedConfig Translator::translate(const json& root) {
  if (!root.is_object())
    fail(out_.source, ": a DeepSpeed config must be a JSON object, found ", root.type_name());
  DeepSpeedBatch& b = out_.batch;
  Section top;
  top["train_batch_size"] = [&](const std::string& k, const json& x) {
    batch_key(k, x, b.train_batch_size, nullptr);
  };
  top["train_micro_batch_size_per_gpu"] = [&](const std::string& k, const json& x) {
    batch_key(k, x, b.micro_batch, "train.batch_size");
  };
  top["gradient_accumulation_steps"] = [&](const std::string& k, const json& x) {
    batch_key(k, x, b.grad_accum, "train.grad_accum");
  };
  top["fp16"] = [this](const std::string& k, const json& x) { precision_section(k, x, true); };
  top["bf16"] = [this](const std::string& k, const json& x) { precision_section(k, x, false); };
  top["bfloat16"] = top["bf16"];  // DeepSpeed's older name
  top["gradient_clipping"] = map_number("optim.grad_clip");
  top["zero_optimization"] = [this](const std::string& k, const json& x) { zero_section(k, x); };
  top["optimizer"] = [this](const std::string& k, const json& x) { optimizer_section(k, x); };
  top["scheduler"] = [this](const std::string& k, const json& x) { scheduler_section(k, x); };
  top["steps_per_print"] = map_int("train.log_every", 1);
  top["wall_clock_breakdown"] = accept();  // metrics.jsonl always has "time" per step
  top["memory_breakdown"] = accept();      // ... and "mem" per category
  top["zero_allow_untested_optimizer"] = accept();
  top["zero_force_ds_cpu_optimizer"] = accept();
  top["communication_data_type"] = [this](const std::string& k, const json& x) {
    std::string t;
    if (!string(k, x, t)) return;
    if (t == "fp32" || t == "float32")
      set("parallel.grad_reduce_dtype", "\"f32\"");
    else if (t == "bf16" || t == "bfloat16")
      set("parallel.grad_reduce_dtype", "\"bf16\"");
    else
      error(k, cat("'", t, "' is not supported (strata reduces gradients in fp32 or bf16)"));
  };
  top["prescale_gradients"] =
      flag(false, false, "ignored: strata averages gradients in the reduction itself");
  top["gradient_predivide_factor"] = [this](const std::string& k, const json& x) {
    double f = 0;
    if (number(k, x, f) && f != 1.0)
      warn(k, "ignored: strata averages gradients in the reduction itself");
  };
  top["sparse_gradients"] = flag(false, true, "not supported: strata's gradients are dense");
  top["data_types"] = [this](const std::string& k, const json& x) {
    Section s;
    s["grad_accum_dtype"] = [this](const std::string& kk, const json& xx) {
      std::string t;
      if (string(kk, xx, t) && t != "fp32" && t != "float32")
        error(kk, cat("'", t, "' is not supported: strata accumulates gradients in fp32"));
    };
    walk(k, x, s);
  };
  top["tensorboard"] = [this](const std::string& k, const json& x) {
    Section s;
    s["enabled"] = map_bool("track.tensorboard");
    s["output_path"] = harmless("ignored: strata writes TensorBoard files to RUN_DIR/tensorboard");
    s["job_name"] = harmless("ignored: strata writes TensorBoard files to RUN_DIR/tensorboard");
    walk(k, x, s);
  };
  const std::string monitors =
      "not supported: metrics go to RUN_DIR/metrics.jsonl and TensorBoard (track.tensorboard)";
  for (const char* m : {"wandb", "comet", "csv_monitor"}) top[m] = when_enabled(false, monitors);
  top["flops_profiler"] = when_enabled(
      false, "not supported: metrics.jsonl reports MFU and a time breakdown for every step");
  top["activation_checkpointing"] = harmless(
      "not mapped: in DeepSpeed it configures the checkpointing API that model code calls; "
      "strata recomputes activations with train.recompute");
  top["aio"] = harmless("ignored: NVMe I/O tuning; strata's is optim.offload_chunk_mb");
  top["checkpoint"] = harmless(
      "ignored: strata's checkpoints are layout independent (universal) and validated by "
      "checksums");
  top["nebula"] = when_enabled(false,
                               "ignored: strata checkpoints asynchronously itself "
                               "(train.async_checkpoint)");
  top["compile"] = when_enabled(false, "ignored: strata is compiled C++ already");
  top["dump_state"] = harmless("ignored");
  top["amp"] = when_enabled(true, "not supported: use bf16 or fp16");
  top["elasticity"] = when_enabled(true,
                                   "not supported: strata launch --elastic restarts on "
                                   "fewer ranks and keeps the global batch");
  top["pipeline"] = unsupported(
      "not mapped: pipeline parallelism is parallel.pp, "
      "parallel.schedule and parallel.micro_batches in the TOML");
  top["tensor_parallel"] = unsupported("not mapped: tensor parallelism is parallel.tp in the TOML");
  top["sequence_parallel_size"] =
      unsupported("not supported: strata's sequence parallelism is Megatron's (parallel.sp, tp)");
  for (const char* feature :
       {"sparse_attention", "curriculum_learning", "data_efficiency", "compression_training",
        "quantize_training", "weight_quantization", "progressive_layer_drop", "eigenvalue",
        "hybrid_engine", "autotuning", "moe"})
    top[feature] = unsupported("not supported: strata has no such feature");

  // nlohmann::json keeps keys sorted, so "optimizer" is read before "scheduler", whose lr wins
  // (as in DeepSpeed, where the scheduler sets the optimizer's lr).
  for (const auto& [name, value] : root.items()) {
    if (top.count(name))
      top[name](name, value);
    else
      unknown_top_.push_back("'" + name + "'");
  }
  finish_precision();
  // An lr without a floor: the TOML's floor follows it (deepspeed_config.h).
  bool lr = false, min_lr = false;
  for (const std::string& o : out_.overrides) {
    lr = lr || o.rfind("optim.lr=", 0) == 0;
    min_lr = min_lr || o.rfind("optim.min_lr=", 0) == 0;
  }
  out_.toml_min_lr_ratio = lr && !min_lr && out_.min_lr_ratio < 0;
  if (!unknown_top_.empty())
    errors_.push_back(cat("unknown top-level key", unknown_top_.size() > 1 ? "s " : " ",
                          join(unknown_top_, ", "),
                          " (not DeepSpeed keys strata knows; see docs/DEEPSPEED.md)"));
  if (errors_.size() == 1) fail(out_.source, ": ", errors_[0]);
  if (errors_.size() > 1)
    fail(out_.source, ": ", errors_.size(), " problems with DeepSpeed keys:\n  ",
         join(errors_, "\n  "));
  return out_;
}

}  // namespace

DeepSpeedConfig translate_deepspeed(const json& ds, const std::string& source) {
  return Translator(source).translate(ds);
}

DeepSpeedConfig read_deepspeed(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot read DeepSpeed config '", path, "': ", std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  json ds;
  try {
    ds = parse_json(text.str(), path);
  } catch (const json::parse_error& e) {
    fail(path, ": JSON syntax error: ", e.what());
  }
  return translate_deepspeed(ds, path);
}

}  // namespace strata
