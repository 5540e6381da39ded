#!/usr/bin/env python3
"""Writes the seed corpus of the fuzz targets (tests/fuzz/<target>/seed-*), all small real files.

  tests/fuzz/make_seeds.py [--strata BUILD/strata]

safetensors files come from the Python safetensors library (the reference writer), tokenizer.json
files from the Python tokenizers library (trained on tests/fixtures/kjv_excerpt.txt, GPT-2, Llama 3
and Qwen2 pipelines), token shards in llm.c's format (data/shard.h), TOML configs from configs/,
DeepSpeed JSON as tests/cli/test_cli.sh and tests/run/test_deepspeed_config.cc write it, the
checkpoint index.json and state.json of a 2-step `strata train` run (--strata; skipped without),
and config.json as transformers writes it for each family `strata import` reads. Multi-part inputs
join their parts with the separator line of fuzz_util.h. Files named regress-* are inputs that
found a bug; this script never touches them.
"""
import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SEP = b"\n%%\n"


def out(target, name, data):
    d = os.path.join(HERE, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(data)


def safetensors_seeds():
    import numpy as np
    from safetensors.numpy import save

    rng = np.random.default_rng(0)
    out("safetensors", "f32", save({"w": rng.standard_normal((3, 4)).astype(np.float32),
                                    "b": np.zeros(4, np.float32)}))
    out("safetensors", "f16-i64-meta", save({"h": rng.standard_normal((2, 2)).astype(np.float16),
                                             "ids": np.arange(5, dtype=np.int64)},
                                            metadata={"format": "pt", "note": "seed"}))
    out("safetensors", "empty-and-scalar", save({"e": np.zeros((0, 3), np.float32),
                                                 "s": np.array(1.5, np.float32)}))
    out("safetensors", "u16-i32", save({"t": np.arange(6, dtype=np.uint16).reshape(2, 3),
                                        "i": np.arange(3, dtype=np.int32)}))
    out("safetensors", "no-tensors", save({}))
    # bf16: numpy has no bfloat16; the header names it, the bytes are any 2-byte values.
    hdr = json.dumps({"x": {"dtype": "BF16", "shape": [2, 2], "data_offsets": [0, 8]}}).encode()
    hdr += b" " * (-len(hdr) % 8)
    out("safetensors", "bf16", struct.pack("<Q", len(hdr)) + hdr + bytes(range(8)))

    # A sharded model: the index and two shards (fuzz_safetensors_index.cc's file names).
    a = save({"model.embed.weight": rng.standard_normal((4, 2)).astype(np.float32)})
    b = save({"model.norm.weight": np.ones(2, np.float32),
              "lm_head.weight": rng.standard_normal((4, 2)).astype(np.float32)})
    index = {"metadata": {"total_size": 56},
             "weight_map": {"model.embed.weight": "model-00001-of-00003.safetensors",
                            "model.norm.weight": "model-00002-of-00003.safetensors",
                            "lm_head.weight": "model-00002-of-00003.safetensors"}}
    out("safetensors_index", "two-shards", json.dumps(index, indent=2).encode() + SEP + a + SEP + b)
    one = {"weight_map": {"model.embed.weight": "model-00001-of-00003.safetensors"}}
    out("safetensors_index", "one-shard", json.dumps(one).encode() + SEP + a)


def tokenizer_seeds():
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    text = open(os.path.join(ROOT, "tests/fixtures/kjv_excerpt.txt"), encoding="utf-8").read()
    docs = text.split("\n\n")[:400]
    llama3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+"
              r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
    sample = "In the beginning God created the heaven and the earth. 1234 <|endoftext|> na\u00efve \u00e9t\u00e9"
    for name, normalizer, pre in [
        ("gpt2", None, pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)),
        ("llama3", None, pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(llama3), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])),
        ("qwen2-nfc", normalizers.NFC(), pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(r"\p{N}| ?\p{L}+|\s+"), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])),
    ]:
        tok = Tokenizer(models.BPE(ignore_merges=name == "llama3"))
        if normalizer:
            tok.normalizer = normalizer
        tok.pre_tokenizer = pre
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>"],
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                      show_progress=False)
        tok.train_from_iterator(docs, trainer)
        tok.add_tokens(["<pad>"])
        j = tok.to_str(pretty=False).encode()
        out("tokenizer", name, j + SEP + sample.encode())
    out("tokenizer", "gpt2-no-text", j)


def shard_seeds():
    def shard(version, tokens):
        header = struct.pack("<3i", 20240520, version, len(tokens)) + bytes(1024 - 12)
        return header + struct.pack("<%d%s" % (len(tokens), "H" if version == 1 else "I"), *tokens)
    out("shard", "v1", shard(1, [1, 2, 3, 50256, 0, 7]))
    out("shard", "v2", shard(2, [1, 99999, 65536, 3]))
    out("shard", "empty", shard(1, []))


def config_seeds():
    for f in sorted(os.listdir(os.path.join(ROOT, "configs"))):
        if f.endswith(".toml"):
            out("config", f[:-5], open(os.path.join(ROOT, "configs", f), "rb").read())
    tiny = open(os.path.join(ROOT, "configs/tiny.toml"), "rb").read()
    out("config", "tiny-with-set", tiny + SEP + b"model.n_layer=2\nrun.dir=runs/x\n"
        b"train.precision=\"bf16\"\noptim.lr=3e-4\nparallel.tp=1")


def deepspeed_seeds():
    seeds = {
        "cli": {"train_batch_size": 4, "train_micro_batch_size_per_gpu": 2, "gradient_clipping": 0.25,
                "optimizer": {"type": "AdamW", "params": {"lr": 0.002, "betas": [0.9, 0.99],
                                                          "weight_decay": 0.01}},
                "scheduler": {"type": "WarmupLR", "params": {"warmup_max_lr": 0.002,
                                                             "warmup_num_steps": 0}},
                "bf16": {"enabled": False}, "zero_optimization": {"stage": 0,
                                                                  "contiguous_gradients": True},
                "steps_per_print": 1, "wall_clock_breakdown": False},
        "auto": {"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
                 "gradient_accumulation_steps": "auto", "gradient_clipping": "auto",
                 "fp16": {"enabled": "auto"}, "bf16": {"enabled": "auto"},
                 "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto",
                                                           "eps": "auto", "weight_decay": "auto"}},
                 "zero_optimization": {"stage": 3, "stage3_prefetch_bucket_size": "auto",
                                       "reduce_bucket_size": "auto"}},
        "fp16-zero2-cosine": {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 5,
                              "fp16": {"enabled": True, "loss_scale": 0, "initial_scale_power": 12,
                                       "loss_scale_window": 500, "hysteresis": 2,
                                       "min_loss_scale": 1},
                              "zero_optimization": {"stage": 2, "offload_optimizer":
                                                    {"device": "cpu", "pin_memory": True}},
                              "scheduler": {"type": "WarmupCosineLR", "params": {
                                  "total_num_steps": 100, "warmup_num_steps": 10,
                                  "cos_min_ratio": 0.1}}},
        "decay": {"train_batch_size": 16, "gradient_accumulation_steps": 2,
                  "scheduler": {"type": "WarmupDecayLR", "params": {
                      "warmup_min_lr": 0, "warmup_max_lr": 0.001, "warmup_num_steps": 5,
                      "total_num_steps": 50}},
                  "optimizer": {"type": "Adam", "params": {"lr": 0.001, "eps": 1e-8}}},
        "bad": {"train_batch_size": 4, "optimizer": {"type": "Lamb"}, "fooo": 1},
        "batch": {"train_batch_size": 5, "train_micro_batch_size_per_gpu": 2},
    }
    for name, j in seeds.items():
        out("deepspeed", name, json.dumps(j, indent=1))


def checkpoint_seeds(strata):
    if not strata:
        print("no --strata: checkpoint seeds left as they are", file=sys.stderr)
        return
    with tempfile.TemporaryDirectory() as tmp:
        run = os.path.join(tmp, "run")
        sets = ["model.n_layer=1", "model.d_model=16", "model.n_head=2", "model.vocab_size=64",
                "model.max_seq_len=16", "train.seq_len=16", "train.batch_size=2", "train.steps=2",
                "train.eval_every=0", "data.source=synthetic", "run.dir=" + run, "system.threads=1"]
        cmd = [strata, "train", os.path.join(ROOT, "configs/tiny.toml")]
        for s in sets:
            cmd += ["--set", s]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        ckpt = os.path.join(run, "ckpt", open(os.path.join(run, "ckpt/latest")).read().strip())
        out("checkpoint_index", "tiny-run", open(os.path.join(ckpt, "index.json"), "rb").read())
        out("checkpoint_state", "tiny-run", open(os.path.join(ckpt, "state.json"), "rb").read())


def hf_config_seeds():
    common = {"initializer_range": 0.02, "tie_word_embeddings": False, "torch_dtype": "float32",
              "use_cache": True, "bos_token_id": 1, "eos_token_id": 2}
    llama = dict(common, architectures=["LlamaForCausalLM"], model_type="llama", vocab_size=320,
                 hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-5,
                 rope_theta=500000.0, hidden_act="silu", attention_bias=False, mlp_bias=False,
                 attention_dropout=0.0, pretraining_tp=1,
                 rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                               "high_freq_factor": 4.0, "original_max_position_embeddings": 32})
    seeds = {
        "gpt2": {"activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"],
                 "attn_pdrop": 0.0, "bos_token_id": 290, "embd_pdrop": 0.0, "eos_token_id": 290,
                 "initializer_range": 0.02, "layer_norm_epsilon": 1e-05, "model_type": "gpt2",
                 "n_embd": 32, "n_head": 4, "n_inner": 128, "n_layer": 2, "n_positions": 16,
                 "resid_pdrop": 0.0, "scale_attn_weights": True, "tie_word_embeddings": True,
                 "torch_dtype": "float32", "use_cache": True, "vocab_size": 320},
        "llama3": llama,
        "qwen3": dict(llama, architectures=["Qwen3ForCausalLM"], model_type="qwen3", head_dim=16,
                      use_sliding_window=False, sliding_window=None, max_window_layers=2,
                      rope_scaling=None, layer_types=["full_attention", "full_attention"]),
        "mixtral": dict(llama, architectures=["MixtralForCausalLM"], model_type="mixtral",
                        num_local_experts=4, num_experts_per_tok=2, router_aux_loss_coef=0.02,
                        output_router_logits=False, router_jitter_noise=0.0, sliding_window=None,
                        rope_scaling=None),
        "qwen3-moe": dict(llama, architectures=["Qwen3MoeForCausalLM"], model_type="qwen3_moe",
                          moe_intermediate_size=32, num_experts=4, num_experts_per_tok=2,
                          norm_topk_prob=True, router_aux_loss_coef=0.001, decoder_sparse_step=1,
                          mlp_only_layers=[], use_sliding_window=False, sliding_window=None,
                          rope_scaling=None, head_dim=8),
        "mistral-unsupported": dict(llama, architectures=["MistralForCausalLM"],
                                    model_type="mistral", sliding_window=4096, rope_scaling=None),
        "transformers5-rope-parameters": dict(
            llama, rope_scaling=None, rope_parameters={"rope_type": "default", "rope_theta": 1e6}),
    }
    for name, j in seeds.items():
        out("hf_config", name, json.dumps(j, indent=2))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--strata", help="a built strata binary (for the checkpoint seeds)")
    args = ap.parse_args()
    safetensors_seeds()
    tokenizer_seeds()
    shard_seeds()
    config_seeds()
    deepspeed_seeds()
    checkpoint_seeds(args.strata)
    hf_config_seeds()


if __name__ == "__main__":
    main()
