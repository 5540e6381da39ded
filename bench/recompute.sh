#!/usr/bin/env bash
# Activation recomputation: step time and activation memory for none / selective / full on the
# same model and batch, run one after another (never concurrently), with the ratio to "none".
# Expected: selective costs a few percent (it reruns only attention's scores and softmax), full
# about one extra forward (~33% of a forward+backward step).
#   bench/recompute.sh [CONFIG=configs/gpt2-124m.toml] [STEPS=6] [extra --set overrides...]
set -euo pipefail
cd "$(dirname "$0")/.."
CONFIG=${1:-configs/gpt2-124m.toml}
STEPS=${2:-6}
shift $(( $# > 2 ? 2 : $# ))
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
for mode in none selective full; do
  OMP_NUM_THREADS=2 GLIBC_TUNABLES=glibc.malloc.hugetlb=1 ./build/strata train "$CONFIG" \
    --set data.source=synthetic --set train.steps=$STEPS --set train.eval_every=0 \
    --set train.checkpoint_every=0 --set sample.max_new_tokens=0 --set run.resume=none \
    --set train.recompute=$mode --set run.dir="$OUT/$mode" "$@" > "$OUT/$mode.log" 2>&1
done
/usr/bin/env python3 - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
rows = {}
for mode in ("none", "selective", "full"):
    m = [json.loads(l) for l in open(f"{out}/{mode}/metrics.jsonl")]
    steady = m[len(m) // 2:]
    rows[mode] = (sum(r["step_ms"] for r in steady) / len(steady),
                  m[-1]["mem"]["activations"] / 2**20, m[-1]["mem"]["workspace"] / 2**20)
base = rows["none"][0]
print(f"{'recompute':10} {'step ms':>9} {'vs none':>8} {'activations MB':>15} {'workspace MB':>13}")
for mode, (ms, act, ws) in rows.items():
    print(f"{mode:10} {ms:9.0f} {ms / base:7.3f}x {act:15.1f} {ws:13.1f}")
PY
