#!/usr/bin/python3
"""strata <-> Hugging Face transformers, checked with transformers itself (torch, float32).

  1. export: a tiny model of each family trained 2 steps by `strata train` (on the KJV
     fixture, so the checkpoint carries a tokenizer) are exported with `strata export --hf`;
     AutoModelForCausalLM.from_pretrained loads them as GPT2LMHeadModel / LlamaForCausalLM, AutoTokenizer encodes the
     prompt as strata does, and their logits match strata's (`strata generate --logits-out`).
  2. import: a random transformers model of each family, saved with save_pretrained in shards
     (model.safetensors.index.json), is read by `strata import`; strata's logits match the
     model's, `strata generate` samples from the import and `strata train` resumes from it.
  3. layouts: the step-2 checkpoints are resumed under 2 ranks (llama: tp 2, gpt2: ZeRO-3 over
     dp 2) and saved after one step at lr 1e-30 (which leaves every weight bit unchanged); their
     exports hold exactly the single-process export's tensors.

Logits must agree to a relative error (max |diff| / max |logit|) of 1e-4 (--tolerance).

Families (--families, default gpt2,llama): gpt2, llama (Llama 2: plain RoPE), llama3 (Llama 3.x:
rope_scaling of type llama3, with an original context short enough that the tiny model's pairs
fall in all three frequency bands), qwen3 (per-head q/k RMSNorm, head_dim 16 apart from
d_model / n_head = 8; the import's random model ties its head, the export's does not), mixtral
(4 experts, top 2 with renormalised softmax weights; MixtralForCausalLM, transformers >= 4.36:
the same logits mean the same router choices, a token sent elsewhere would move them by far more
than the tolerance), qwen3_moe (qwen3's attention with 4 experts, top 2, norm_topk_prob;
Qwen3MoeForCausalLM, whose experts transformers 5 holds fused but saves and loads one by one).

Usage: PYTHON tests/train/check_hf_transformers.py STRATA_BINARY SOURCE_DIR [--families a,b]
       [--tolerance T]
Needs torch and transformers for this interpreter: scripts/install_deps.sh installs Debian's
python3-torch and transformers 4.46 from PyPI for /usr/bin/python3 (gpt2, llama); qwen3 needs
transformers >= 4.51, which needs a newer torch: bench/torch_venv.sh's venv with transformers
(scripts/hf_venv.sh). Without them it exits 77 (skip), or 1 when CI is set.
"""
import glob
import os
import shutil
import subprocess
import sys
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # local directories only, never the network
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
try:
    import numpy as np
    import torch
    import transformers
    from safetensors.numpy import load_file
    from transformers import (AutoModelForCausalLM, AutoTokenizer, GPT2Config, GPT2LMHeadModel,
                              LlamaConfig, LlamaForCausalLM)
    FAMILY_NAMES = sys.argv[sys.argv.index("--families") + 1].split(",") \
        if "--families" in sys.argv else ["gpt2", "llama"]
    if "qwen3" in FAMILY_NAMES:
        from transformers import Qwen3Config, Qwen3ForCausalLM
    if "mixtral" in FAMILY_NAMES:
        from transformers import MixtralConfig, MixtralForCausalLM
    if "qwen3_moe" in FAMILY_NAMES:
        from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM
except ImportError as e:
    msg = ("%s cannot import %s: scripts/install_deps.sh installs python3-torch (Debian) and "
           "transformers (pip) for /usr/bin/python3" % (sys.executable, e.name))
    if os.environ.get("CI"):
        print("FAILED: " + msg)
        sys.exit(1)
    print("skip: " + msg)
    sys.exit(77)

TOLERANCE = float(sys.argv[sys.argv.index("--tolerance") + 1]) if "--tolerance" in sys.argv \
    else 1e-4
PROMPT = "And God said, Let there be light."
TOKENS = [5, 17, 250, 3, 99, 1, 42, 300, 7, 8, 19, 200, 64, 2]
FAMILIES = {
    "gpt2": ["--set", "model.family=gpt2"],
    "llama": ["--set", "model.family=llama", "--set", "model.n_kv_head=2",
              "--set", "model.rope_theta=50000"],
    # hd 8, theta 50000: wavelengths 6.3, 94, 1400, 21000 against 256 / 4 = 64 and 256 / 1.
    "llama3": ["--set", "model.family=llama", "--set", "model.n_kv_head=2",
               "--set", "model.rope_theta=50000", "--set", "model.rope_scaling=llama3",
               "--set", "model.rope_factor=8", "--set", "model.rope_low_freq_factor=1",
               "--set", "model.rope_high_freq_factor=4",
               "--set", "model.rope_original_max_seq_len=256"],
    "qwen3": ["--set", "model.family=qwen3", "--set", "model.n_kv_head=2",
              "--set", "model.head_dim=16", "--set", "model.rope_theta=1000000",
              "--set", "model.norm_eps=1e-6"],
    # 4 experts, 2 per token, each half the width of the dense MLP.
    "mixtral": ["--set", "model.family=mixtral", "--set", "model.n_kv_head=2",
                "--set", "model.rope_theta=50000", "--set", "model.moe.experts=4",
                "--set", "model.moe.top_k=2", "--set", "model.moe.expert_ffn=128"],
    # qwen3's heads (16 wide, apart from d_model / n_head = 8) and 4 experts, 2 per token.
    "qwen3_moe": ["--set", "model.family=qwen3_moe", "--set", "model.n_kv_head=2",
                  "--set", "model.head_dim=16", "--set", "model.rope_theta=1000000",
                  "--set", "model.norm_eps=1e-6", "--set", "model.moe.experts=4",
                  "--set", "model.moe.top_k=2", "--set", "model.moe.expert_ffn=96",
                  "--set", "model.moe.aux_loss_coeff=0.001"],
}
CLASSES = {"gpt2": GPT2LMHeadModel, "llama": LlamaForCausalLM, "llama3": LlamaForCausalLM}
if "qwen3" in FAMILY_NAMES:
    CLASSES["qwen3"] = Qwen3ForCausalLM
if "mixtral" in FAMILY_NAMES:
    CLASSES["mixtral"] = MixtralForCausalLM
if "qwen3_moe" in FAMILY_NAMES:
    CLASSES["qwen3_moe"] = Qwen3MoeForCausalLM
# transformers 4.56 renamed from_pretrained's torch_dtype to dtype.
DTYPE_KW = "dtype" if tuple(int(x) for x in transformers.__version__.split(".")[:2]) >= (4, 56) \
    else "torch_dtype"
results = {"passed": 0, "failed": 0}


def check(ok, what):
    results["passed" if ok else "failed"] += 1
    print(("ok: " if ok else "FAILED: ") + what, flush=True)


def run(strata, *args, mpi=0):
    cmd = ([strata] if not mpi else
           ["mpirun", "-np", str(mpi), "--allow-run-as-root", "--oversubscribe", "--mca", "btl",
            "self,vader", strata]) + list(args)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, encoding="utf-8",
                       errors="replace")
    if p.returncode != 0:
        print(p.stdout[-3000:])
        raise SystemExit("FAILED: %s exited %d" % (" ".join(cmd), p.returncode))
    return p.stdout


def relative_error(ours, theirs):
    return float(np.max(np.abs(ours - theirs)) / np.max(np.abs(theirs)))


def strata_logits(strata, ckpt, work, *source):
    out = os.path.join(work, "logits.safetensors")
    run(strata, "generate", ckpt, *source, "--logits-out", out)
    t = load_file(out)
    return t["tokens"].tolist(), t["logits"]


def hf_logits(model, tokens):
    with torch.no_grad():
        return model(torch.tensor([tokens], dtype=torch.long)).logits[0].double().numpy()


def run_args(src, family, data):
    """configs/tiny.toml made tiny, on the prepared fixture (so checkpoints carry its tokenizer)."""
    sets = ["model.n_layer=2", "model.d_model=32", "model.n_head=4", "model.vocab_size=320",
            "model.max_seq_len=32", "model.init_std=0.1", "train.batch_size=2",
            "train.seq_len=32", "train.eval_every=0", "train.eval_batches=1",
            "sample.max_new_tokens=0", "data.source=shards", "data.dir=" + data]
    args = [os.path.join(src, "configs", "tiny.toml")] + FAMILIES[family]
    for s in sets:
        args += ["--set", s]
    return args


def train(strata, src, work, family, data):
    run_dir = os.path.join(work, "run_" + family)
    run(strata, "train", *run_args(src, family, data), "--set", "train.steps=2",
        "--set", "run.dir=" + run_dir)
    return run_dir


def check_export(strata, work, family, run_dir):
    hf_dir = os.path.join(work, "hf_" + family)
    run(strata, "export", run_dir, "--hf", hf_dir)
    model = AutoModelForCausalLM.from_pretrained(hf_dir, **{DTYPE_KW: torch.float32}).eval()
    check(type(model) is CLASSES[family] and model.dtype == torch.float32,
          "%s export: AutoModelForCausalLM loads it as %s" % (family, type(model).__name__))
    tokens, ours = strata_logits(strata, run_dir, work, "--prompt", PROMPT)
    hf_tokens = AutoTokenizer.from_pretrained(hf_dir)(PROMPT)["input_ids"]
    check(hf_tokens == tokens, "%s export: AutoTokenizer encodes the prompt as strata (%d tokens)"
          % (family, len(tokens)))
    theirs = hf_logits(model, tokens)
    err = relative_error(ours, theirs)
    check(err <= TOLERANCE, "%s export: logits max relative error %.2e (strata -> transformers; "
          "max |logit| %.3f)" % (family, err, np.max(np.abs(theirs))))
    return hf_dir


def random_model(family):
    torch.manual_seed({"gpt2": 1234, "llama": 5678, "llama3": 4321, "qwen3": 8765,
                       "mixtral": 2468, "qwen3_moe": 1357}[family])
    if family == "mixtral":
        config = MixtralConfig(vocab_size=320, hidden_size=32, intermediate_size=40,
                               num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                               num_local_experts=4, num_experts_per_tok=2,
                               max_position_embeddings=48, rms_norm_eps=1e-6, rope_theta=50000.0,
                               tie_word_embeddings=False, initializer_range=0.1)
    elif family == "qwen3_moe":
        # intermediate_size is the width of dense (mlp_only) layers, of which there are none.
        config = Qwen3MoeConfig(vocab_size=320, hidden_size=32, intermediate_size=80,
                                num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                head_dim=16, num_experts=4, num_experts_per_tok=2,
                                moe_intermediate_size=24, norm_topk_prob=True,
                                max_position_embeddings=48, rms_norm_eps=1e-6,
                                rope_theta=1000000.0, tie_word_embeddings=False,
                                initializer_range=0.1, use_sliding_window=False)
    elif family == "qwen3":
        config = Qwen3Config(vocab_size=320, hidden_size=32, intermediate_size=80,
                             num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                             head_dim=16, max_position_embeddings=48, rms_norm_eps=1e-6,
                             rope_theta=1000000.0, tie_word_embeddings=True,
                             initializer_range=0.1, use_sliding_window=False)
    elif family == "llama3":
        config = LlamaConfig(vocab_size=320, hidden_size=32, intermediate_size=80,
                             num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                             max_position_embeddings=48, rms_norm_eps=1e-6, rope_theta=50000.0,
                             rope_scaling={"rope_type": "llama3", "factor": 8.0,
                                           "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                           "original_max_position_embeddings": 16},
                             tie_word_embeddings=False, initializer_range=0.1)
    elif family == "gpt2":
        config = GPT2Config(vocab_size=320, n_positions=48, n_embd=32, n_layer=2, n_head=4,
                            activation_function="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0,
                            attn_pdrop=0.0, initializer_range=0.1)
    else:
        config = LlamaConfig(vocab_size=320, hidden_size=32, intermediate_size=80,
                             num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                             max_position_embeddings=48, rms_norm_eps=1e-6, rope_theta=50000.0,
                             tie_word_embeddings=False, initializer_range=0.1)
    model = CLASSES[family](config).eval()
    with torch.no_grad():  # norms and biases away from their 1 / 0 initial values
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return model


def check_import(strata, work, family, tokenizer):
    model = random_model(family)
    hf_dir = os.path.join(work, "saved_" + family)
    model.save_pretrained(hf_dir, max_shard_size="40KB", safe_serialization=True)
    shutil.copy(tokenizer, os.path.join(hf_dir, "tokenizer.json"))
    shards = glob.glob(os.path.join(hf_dir, "model-*-of-*.safetensors"))
    check(os.path.exists(os.path.join(hf_dir, "model.safetensors.index.json")) and len(shards) > 1,
          "%s: save_pretrained wrote %d shards and an index" % (family, len(shards)))
    ckpt = os.path.join(work, "imported_" + family)
    run(strata, "import", hf_dir, "--out", ckpt)
    tokens, ours = strata_logits(strata, ckpt, work, "--tokens", ",".join(map(str, TOKENS)))
    theirs = hf_logits(model, TOKENS)
    err = relative_error(ours, theirs)
    check(tokens == TOKENS and err <= TOLERANCE,
          "%s import: logits max relative error %.2e (transformers -> strata; max |logit| %.3f)"
          % (family, err, np.max(np.abs(theirs))))
    out = run(strata, "generate", ckpt, "--prompt", "And God", "--max-new-tokens", "4")
    check(out.startswith("And God"), "%s import: strata generate samples from it" % family)
    out = run(strata, "train", os.path.join(ckpt, "config.toml"), "--set", "run.resume=" + ckpt,
              "--set", "run.dir=" + os.path.join(work, "finetune_" + family),
              "--set", "train.steps=1", "--set", "train.seq_len=16", "--set", "train.batch_size=2",
              "--set", "train.eval_batches=1")
    check("resumed from" in out, "%s import: strata train resumes from it (%s)" % (
        family, next((l for l in out.splitlines() if "resumed from" in l), "no resume line")))


def check_layout(strata, src, work, family, run_dir, reference_dir, layout, data):
    other = os.path.join(work, "layout_" + family)
    run(strata, "train", *run_args(src, family, data), "--set", "train.steps=3",
        "--set", "optim.lr=1e-30", "--set", "optim.min_lr=0", "--set", "system.threads=1",
        "--set", "run.resume=" + os.path.join(run_dir, "ckpt"), "--set", "run.dir=" + other,
        *layout, mpi=2)
    out_dir = os.path.join(work, "hf_layout_" + family)
    run(strata, "export", other, "--hf", out_dir)
    ours, ref = (load_file(os.path.join(d, "model.safetensors")) for d in (out_dir, reference_dir))
    same = sorted(ours) == sorted(ref) and all(np.array_equal(ours[k], ref[k]) for k in ref)
    check(same, "%s: saved under %s, the export holds the single-process export's %d tensors, "
          "bit for bit" % (family, " ".join(layout[1::2]), len(ref)))


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    strata, src = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    torch.set_num_threads(2)
    print("torch %s, transformers %s" % (torch.__version__, transformers.__version__))
    work = tempfile.mkdtemp(prefix="strata_hf_")
    try:
        data = os.path.join(work, "data")
        run(strata, "prepare", "--text", os.path.join(src, "tests", "fixtures", "kjv_excerpt.txt"),
            "--out", data, "--vocab", "300")
        layouts = {"llama": ["--set", "parallel.tp=2"], "llama3": ["--set", "parallel.pp=2"],
                   "qwen3": ["--set", "parallel.tp=2"],
                   "mixtral": ["--set", "parallel.dp=2", "--set", "parallel.zero=3"],
                   "qwen3_moe": ["--set", "parallel.dp=2", "--set", "parallel.zero=3"],
                   "gpt2": ["--set", "parallel.dp=2", "--set", "parallel.zero=3"]}
        for family in FAMILY_NAMES:
            run_dir = train(strata, src, work, family, data)
            hf_dir = check_export(strata, work, family, run_dir)
            check_import(strata, work, family, os.path.join(data, "tokenizer.json"))
            check_layout(strata, src, work, family, run_dir, hf_dir, layouts[family], data)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("%d passed, %d failed" % (results["passed"], results["failed"]))
    return 0 if results["failed"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
