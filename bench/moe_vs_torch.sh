#!/usr/bin/env bash
# MoE training throughput (issue 21, item 7): strata's mixtral family against a straightforward
# PyTorch Mixtral-style block (bench/torch_train.py --family mixtral: Hugging Face's
# MixtralSparseMoeBlock loop, expert by expert with index / index_add_), the same shapes, 2 threads
# each, and strata's dense llama of the same active FLOPs (d_ff = top_k x expert_ffn) beside them.
# The model is configs/mixtral-tiny.toml's (4 layers, d_model 256, 8 experts of width 256, top 2)
# on synthetic tokens, aux loss 0.02 in both, no z-loss.
#
#   bench/moe_vs_torch.sh [STEPS]       (default 30; the first 5 are warm-up)
# Needs build/strata and the venv of bench/torch_venv.sh (made there when missing).
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${1:-30}
WARMUP=5
STRATA=${STRATA_BIN:-build/strata}
VENV=${STRATA_TORCH_VENV:-$HOME/.cache/strata/torch-venv}
[ -x "$VENV/bin/python" ] || bench/torch_venv.sh
export OMP_NUM_THREADS=2
work=$(mktemp -d "${TMPDIR:-/tmp}/strata_moe_bench.XXXXXX")
trap 'rm -rf "$work"' EXIT
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cores"

strata_tps() {  # CONFIG NAME [--set ...]: the mean tokens/s of the steps after the warm-up
  local config=$1 name=$2
  shift 2
  "$STRATA" train "$config" --set data.source=synthetic --set "train.steps=$STEPS" \
    --set "run.dir=$work/$name" --set system.threads=2 --set run.resume=none \
    --set train.eval_every=0 --set train.checkpoint_every=0 --set train.log_every=1 "$@" \
    > "$work/$name.log" 2>&1
  python3 - "$work/$name/metrics.jsonl" "$WARMUP" <<'PY'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
timed = [r for r in recs if r.get("step", 0) > int(sys.argv[2]) and "tokens_per_s" in r]
tokens = sum(r["tokens_per_s"] * r["step_ms"] / 1e3 for r in timed)
print("%.1f %.4f" % (tokens / sum(r["step_ms"] / 1e3 for r in timed), recs[-1]["loss"]))
PY
}

read -r moe_tps moe_loss < <(strata_tps configs/mixtral-tiny.toml moe --set model.moe.z_loss_coeff=0)
read -r dense_tps dense_loss < <(strata_tps configs/llama-tiny.toml dense --set model.d_ff=512)
torch_run() {
  "$VENV/bin/python" bench/torch_train.py --family mixtral --n-layer 4 --n-head 4 --n-kv-head 2 \
    --d-model 256 --vocab 8192 --seq-len 256 --batch 8 --experts 8 --top-k 2 --expert-ffn 256 \
    --aux-coeff 0.02 --steps "$STEPS" --warmup-steps "$WARMUP" --threads 2 --mode "$1" \
    2>"$work/torch_$1.err" | tail -1
}
eager=$(torch_run eager)
compiled=$(torch_run compile || echo '{}')
python3 - "$moe_tps" "$dense_tps" "$eager" "$compiled" "$moe_loss" <<'PY'
import json, sys
moe, dense = float(sys.argv[1]), float(sys.argv[2])
peers = {"torch eager": json.loads(sys.argv[3]), "torch.compile": json.loads(sys.argv[4] or "{}")}
print("strata mixtral      %9.1f tok/s (last loss %s)" % (moe, sys.argv[5]))
print("strata dense llama  %9.1f tok/s (d_ff 512: the same active FLOPs); MoE / dense = %.2f"
      % (dense, moe / dense))
best = None
for name, r in peers.items():
    if "tokens_per_s" not in r:
        print("%-19s did not run" % name)
        continue
    print("%-19s %9.1f tok/s (torch %s, %s); strata / it = %.2fx"
          % (name, r["tokens_per_s"], r["torch"], r["mode"], moe / r["tokens_per_s"]))
    if best is None or r["tokens_per_s"] > best[1]:
        best = (name, r["tokens_per_s"])
if best:
    print("best peer: %s %.1f tok/s; strata / best = %.2fx" % (best[0], best[1], moe / best[1]))
PY
