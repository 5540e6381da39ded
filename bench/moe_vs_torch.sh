#!/usr/bin/env bash
# MoE training throughput (issue 21, item 7): strata's mixtral family against a straightforward
# PyTorch Mixtral-style block (bench/torch_train.py --family mixtral: Hugging Face's
# MixtralSparseMoeBlock loop, expert by expert with index / index_add_), the same shapes, 2 threads
# each, and strata's dense llama of the same active FLOPs (d_ff = top_k x expert_ffn) beside them.
# The model is configs/mixtral-tiny.toml's (4 layers, d_model 256, 8 experts of width 256, top 2)
# on synthetic tokens, aux loss 0.02 in both, no z-loss.
#
#   bench/moe_vs_torch.sh [STEPS]       (default 30; the first 5 are warm-up)
#   TORCH_PEERS="pypi-eager debian-1.13" ...   a subset of the peers (default: all three)
# Needs build/strata (STRATA_BIN) and, for the PyPI peers, the venv of bench/torch_venv.sh (made
# there when missing).
#
# The peers, one after the other, each bench/torch_train.py at its best on its torch:
#   pypi-eager    the newest torch from PyPI (${STRATA_TORCH_VENV:-$HOME/.cache/strata/torch-venv}):
#                 F.scaled_dot_product_attention, AdamW(fused=True), MKL and oneDNN
#   pypi-compile  the same under torch.compile (inductor); its compile runs in the warm-up steps
#   debian-1.13   Debian's python3-torch 1.13 (/usr/bin/python3), eager: manual attention, AdamW
#                 foreach (1.13 has no public SDPA, no fused CPU AdamW, no torch.compile), its
#                 OpenMP OpenBLAS pinned through LD_LIBRARY_PATH and glibc malloc kept from
#                 returning memory, as bench/train_vs_torch.sh runs it (skipped, with a note, when
#                 /usr/bin/python3 has no torch: apt-get install python3-torch)
# GEMM peaks, measured in the same run: strata's is the one its trainer measures at start (the
# log's "GEMM ... at N GFLOP/s", the peak metrics.jsonl's mfu is a fraction of); each torch
# build's comes from bench/gemm_peak.py. Achieved GFLOP/s count the active parameters, 6 x N_active
# + 12 x L x C x T per token (the trainer's train_flops_per_token and torch_train.py's
# flops_per_token; the summary prints both, which should agree). That count takes the untied input
# embedding as 6 x V x C, though a lookup multiplies nothing (30% of this small model's count);
# a last line gives the fractions without it.
# Prints tokens/s, GFLOP/s and the fraction of the row's own GEMM peak and of the best peak measured
# (a peak measured under a passing load reads low) for strata, the dense model and each peer,
# strata / peer, and "best peer: NAME X tok/s; strata / best = R".
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${1:-30}
WARMUP=5
THREADS=2
STRATA=${STRATA_BIN:-build/strata}
VENV=${STRATA_TORCH_VENV:-$HOME/.cache/strata/torch-venv}
DEBIAN_PY=/usr/bin/python3
OPENBLAS_OMP_DIR=/usr/lib/x86_64-linux-gnu/openblas-openmp
TORCH_PEERS=${TORCH_PEERS:-pypi-eager pypi-compile debian-1.13}
for peer in $TORCH_PEERS; do
  case "$peer" in
    pypi-eager|pypi-compile|debian-1.13) ;;
    *) echo "TORCH_PEERS: unknown peer '$peer' (pypi-eager, pypi-compile, debian-1.13)" >&2; exit 1 ;;
  esac
done
read -ra peers <<< "$TORCH_PEERS"
want() { [[ " $TORCH_PEERS " == *" $1 "* ]]; }
export OMP_NUM_THREADS=$THREADS
work=$(mktemp -d "${TMPDIR:-/tmp}/strata_moe_bench.XXXXXX")
trap 'rm -rf "$work"' EXIT
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cores"

# The environments of the two torch builds. PyPI's links MKL statically and carries its own
# libgomp; Debian's links libblas.so.3 through update-alternatives, so the OpenMP OpenBLAS comes
# first, and where Debian's OpenBLAS 0.3.21 does not know the CPU model (it falls back to the
# SSE3 kernels of core "Prescott") the newest core the CPU's flags allow is named.
HAVE_VENV=0
if want pypi-eager || want pypi-compile; then
  [ -x "$VENV/bin/python" ] || bench/torch_venv.sh
  HAVE_VENV=1
fi
DEBIAN_ENV=(env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE
  "GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=68719476736")
[[ -d "$OPENBLAS_OMP_DIR" ]] &&
  DEBIAN_ENV+=("LD_LIBRARY_PATH=$OPENBLAS_OMP_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
HAVE_DEBIAN=0
if want debian-1.13; then
  if "$DEBIAN_PY" -c "import torch" 2>/dev/null; then
    HAVE_DEBIAN=1
    core=$("${DEBIAN_ENV[@]}" "$DEBIAN_PY" bench/torch_blas.py 2>/dev/null |
           sed -n 's/.*"openblas_core": *"\([^"]*\)".*/\1/p') || true
    if [[ "$core" == Prescott ]]; then
      flags=$(grep -m1 '^flags' /proc/cpuinfo || true)
      for pair in avx512_bf16:Cooperlake avx512f:SkylakeX avx2:Haswell; do
        if [[ " $flags " == *" ${pair%%:*} "* ]]; then
          DEBIAN_ENV+=("OPENBLAS_CORETYPE=${pair#*:}")
          echo "-- Debian's OpenBLAS does not know this CPU; OPENBLAS_CORETYPE=${pair#*:}"
          break
        fi
      done
    fi
  else
    echo "-- debian-1.13: $DEBIAN_PY has no torch (apt-get install python3-torch); skipped"
  fi
fi

# 1. The torch builds' f32 GEMM peaks (strata's comes from its own runs below).
if (( HAVE_VENV )); then
  "$VENV/bin/python" bench/gemm_peak.py --threads "$THREADS" --min-time 0.5 > "$work/gemm-pypi.json"
fi
if (( HAVE_DEBIAN )); then
  "${DEBIAN_ENV[@]}" "$DEBIAN_PY" bench/gemm_peak.py --threads "$THREADS" --min-time 0.5 \
    > "$work/gemm-debian.json"
fi

# 2. strata. Prints "tokens/s last_loss fraction_of_peak peak_GFLOP/s flops_per_token best_tokens/s":
# tokens/s is the tokens of a step over the mean step time of the steps after the warm-up; the
# fraction is those tokens/s times the model FLOPs per token over the peak its trainer measured at
# start (each record's mfu / tokens_per_s is that ratio); best is the fastest timed step's.
strata_run() {  # CONFIG NAME [--set ...]
  local config=$1 name=$2
  shift 2
  "$STRATA" train "$config" --set data.source=synthetic --set "train.steps=$STEPS" \
    --set "run.dir=$work/$name" --set "system.threads=$THREADS" --set run.resume=none \
    --set train.eval_every=0 --set train.checkpoint_every=0 --set train.log_every=1 "$@" \
    > "$work/$name.log" 2>&1
  local peak
  peak=$(sed -n 's/.* at \([0-9][0-9]*\) GFLOP\/s.*/\1/p' "$work/$name.log" | head -n1)
  python3 - "$work/$name/metrics.jsonl" "$WARMUP" "${peak:-0}" <<'PY'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
timed = [r for r in recs if r.get("step", 0) > int(sys.argv[2]) and "tokens_per_s" in r]
tokens = sum(r["tokens_per_s"] * r["step_ms"] / 1e3 for r in timed)
tps = tokens / sum(r["step_ms"] / 1e3 for r in timed)
frac = tps * sum(r["mfu"] / r["tokens_per_s"] for r in timed) / len(timed)
peak = float(sys.argv[3])
print("%.1f %.4f %.4f %.0f %.0f %.1f" % (tps, recs[-1]["loss"], frac, peak, frac * peak * 1e9 / tps,
                                        max(r["tokens_per_s"] for r in timed)))
PY
}
read -r moe_tps moe_loss moe_frac moe_peak moe_fpt moe_best \
  < <(strata_run configs/mixtral-tiny.toml moe --set model.moe.z_loss_coeff=0)
read -r dense_tps _ dense_frac dense_peak _ dense_best \
  < <(strata_run configs/llama-tiny.toml dense --set model.d_ff=512)
for name in moe dense; do
  if ! grep -q '"tokens_per_s"' "$work/$name/metrics.jsonl" 2>/dev/null; then
    echo "strata ($name) did not train; its output ends with:"
    tail -n 15 "$work/$name.log"
    exit 3
  fi
done

# 3. The PyTorch peers.
torch_run() {  # NAME MODE -- python [env...]
  local name=$1 mode=$2
  shift 3
  "$@" bench/torch_train.py --family mixtral --n-layer 4 --n-head 4 --n-kv-head 2 \
    --d-model 256 --vocab 8192 --seq-len 256 --batch 8 --experts 8 --top-k 2 --expert-ffn 256 \
    --aux-coeff 0.02 --steps "$STEPS" --warmup-steps "$WARMUP" --threads "$THREADS" \
    --mode "$mode" 2>"$work/peer-$name.err" | tail -1 > "$work/peer-$name.json" || {
    echo "-- $name failed; its output ends with:"
    tail -n 5 "$work/peer-$name.err"
  }
}
if (( HAVE_VENV )); then
  want pypi-eager && torch_run pypi-eager eager -- "$VENV/bin/python"
  want pypi-compile && torch_run pypi-compile compile -- "$VENV/bin/python"
fi
(( HAVE_DEBIAN )) && torch_run debian-1.13 eager -- "${DEBIAN_ENV[@]}" "$DEBIAN_PY"

python3 - "$work" "$moe_tps" "$moe_loss" "$moe_frac" "$moe_peak" "$moe_fpt" "$dense_tps" \
  "$dense_frac" "$dense_peak" "$moe_best" "$dense_best" "${peers[@]}" <<'PY'
import json, os, sys
work = sys.argv[1]
moe, moe_loss, moe_frac, peak, moe_fpt, dense, dense_frac, dense_peak, moe_best, dense_best = (
    float(v) for v in sys.argv[2:12])

def last_json(path):
    try:
        return json.loads(open(path).read().strip().splitlines()[-1])
    except (OSError, ValueError, IndexError):
        return None

peers = {p: last_json(os.path.join(work, "peer-%s.json" % p)) for p in sys.argv[12:]}
tokens_per_step = 8 * 256  # --batch x --seq-len, configs/mixtral-tiny.toml's
gemm = {b: last_json(os.path.join(work, "gemm-%s.json" % b)) for b in ("pypi", "debian")}
torch_fpt = next((r["flops_per_token"] for r in peers.values() if r), None)
print("f32 GEMM peaks, 2 threads, this run: strata %.0f GFLOP/s (its trainer, at start; %.0f in "
      "the dense run)%s" % (peak, dense_peak, "".join("; torch %s %.1f GFLOP/s (bench/gemm_peak.py, %s)" % (
        next((r["torch"] for p, r in peers.items() if r and p.startswith(b)), b),
        g["gemm_gflops"], "MKL" if g.get("blas", {}).get("mkl") else
        "OpenBLAS core %s" % g.get("blas", {}).get("openblas_core", "?"))
        for b, g in gemm.items() if g)))
print("model FLOPs per token, active parameters: strata %.2f M (metrics: mfu x peak / tokens/s), "
      "torch_train.py %s" % (moe_fpt / 1e6, "%.2f M" % (torch_fpt / 1e6) if torch_fpt else "n/a"))
# One ceiling for every row too: a peak measured under a passing load reads low, and the best of
# them is the nearest to what the machine can do.
best_peak = max([peak, dense_peak] + [g["gemm_gflops"] for g in gemm.values() if g])
print("(own peak: the f32 GEMM peak of the row's own library; best peak: the best of them, "
      "%.1f GFLOP/s)" % best_peak)
print("(best step: tokens/s of the fastest timed step, the least touched by other load)")
print("%-19s %9s %8s %9s %9s %10s %10s %10s" % (
    "", "tokens/s", "GFLOP/s", "%own-peak", "%best-peak", "strata/it", "best step", "strata/it"))
print("%-19s %9.1f %8.1f %8.1f%% %9.1f%% %10s %10.1f %10s  (last loss %.4f)" % (
    "strata mixtral", moe, moe_frac * peak, 100 * moe_frac, 100 * moe_frac * peak / best_peak,
    "", moe_best, "", moe_loss))
print("%-19s %9.1f %8.1f %8.1f%% %9.1f%% %10s %10.1f %10s  (d_ff 512, the same active FLOPs; MoE "
      "step / dense step = %.2f, best steps %.2f)" % (
          "strata dense llama", dense, dense_frac * dense_peak, 100 * dense_frac,
          100 * dense_frac * dense_peak / best_peak, "", dense_best, "", dense / moe,
          dense_best / moe_best))
best = best_step = None
for name, r in peers.items():
    if not r or "tokens_per_s" not in r:
        print("%-19s did not run" % name)
        continue
    g = gemm["debian" if name.startswith("debian") else "pypi"]
    own = g["gemm_gflops"] if g else None
    note = "torch %s, %s, attention %s, AdamW %s, last loss %s" % (
        r["torch"], r["mode"], r["attn"], r["optimizer"], r["loss_last"])
    if r.get("compile_fallback"):
        note += "; compile fell back: %s" % r["compile_fallback"]
    r_best = tokens_per_step / (r["step_ms_min"] / 1e3)
    print("%-19s %9.1f %8.1f %9s %9.1f%% %9.2fx %10.1f %9.2fx  (%s)" % (
        name, r["tokens_per_s"], r["gflops"],
        "%.1f%%" % (100 * r["gflops"] / own) if own else "n/a", 100 * r["gflops"] / best_peak,
        moe / r["tokens_per_s"], r_best, moe_best / r_best, note))
    if best is None or r["tokens_per_s"] > best[1]:
        best = (name, r["tokens_per_s"])
    if best_step is None or r_best > best_step[1]:
        best_step = (name, r_best)
# The count (the trainer's MFU and torch_train.py alike) takes the untied input embedding as
# 6 x vocab x d_model FLOPs per token, though a lookup multiplies nothing: with it left out, the
# work actually done, every GFLOP/s above scales by the same factor.
emb = 6 * 8192 * 256  # --vocab x --d-model of the peers, configs/mixtral-tiny.toml's
fpt = torch_fpt or moe_fpt
scale = (fpt - emb) / fpt
print("without the input embedding's %.1f M FLOPs/token (a lookup): x %.2f, strata mixtral %.1f "
      "GFLOP/s = %.1f%% of the best peak%s" % (
          emb / 1e6, scale, moe_frac * peak * scale, 100 * moe_frac * peak * scale / best_peak,
          ", the best peer %.1f%%" % (100 * best[1] * fpt * 1e-9 * scale / best_peak)
          if best else ""))
if best:
    print("best peer: %s %.1f tok/s; strata / best = %.2fx (by best step: %s, %.2fx)" % (
        best[0], best[1], moe / best[1], best_step[0], moe_best / best_step[1]))
else:
    print("no PyTorch peer ran")
    sys.exit(1)
PY
