#!/usr/bin/env bash
# Loss curves of f32, bf16 and fp16 on real text (configs/tiny.toml: the King James Bible), the
# same seed and data order, one after another; prints the training loss (mean of each 25-step
# window) and the validation loss every 50 steps side by side.
#   bench/precision_curves.sh [STEPS=300]
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${1:-300}
OUT=${OUT:-/tmp/precision_curves}
mkdir -p "$OUT"
for p in f32 bf16 fp16; do
  echo "-- $p"
  OMP_NUM_THREADS=2 GLIBC_TUNABLES=glibc.malloc.hugetlb=1 ./build/strata train configs/tiny.toml \
    --set train.precision=$p --set train.steps=$STEPS --set train.eval_every=50 \
    --set train.checkpoint_every=0 --set sample.max_new_tokens=0 --set run.resume=none \
    --set run.dir="$OUT/$p" > "$OUT/$p.log" 2>&1
done
/usr/bin/env python3 - "$OUT" "$STEPS" <<'PY'
import json, sys
out, steps = sys.argv[1], int(sys.argv[2])
runs = {p: [json.loads(l) for l in open(f"{out}/{p}/metrics.jsonl")] for p in ("f32", "bf16", "fp16")}
print(f"{'steps':>9} | {'train f32':>9} {'bf16':>7} {'fp16':>7} | {'val f32':>8} {'bf16':>7} {'fp16':>7} | fp16 scale, skipped")
for end in range(25, steps + 1, 25):
    tr = {p: sum(r["loss"] for r in m[end - 25:end]) / 25 for p, m in runs.items()}
    va = {p: m[end - 1].get("val_loss") for p, m in runs.items()}
    v = " ".join(f"{va[p]:7.3f}" if va[p] is not None else "      -" for p in ("f32", "bf16", "fp16"))
    last = runs["fp16"][end - 1]
    print(f"{end-24:>4}-{end:<4} | {tr['f32']:9.3f} {tr['bf16']:7.3f} {tr['fp16']:7.3f} | {v} | "
          f"{last.get('loss_scale', 0):.0f}, {last.get('skipped_steps', 0)}")
for p, m in runs.items():
    tps = sorted(r["tokens_per_s"] for r in m[5:])
    print(f"{p}: median {tps[len(tps)//2]:.0f} tokens/s (this machine was shared; see PERFORMANCE.md for quiet numbers)")
PY
