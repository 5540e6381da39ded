#!/usr/bin/env bash
# Context parallelism (issue 22, item 7): one long sequence per step (fixed global tokens: batch 1
# x T) on the machine's cores, trained by one process (cp = 1, every core a thread of it) and by
# cp ranks of cores / cp threads each, with the ring and with Ulysses. A small llama (2 layers,
# d_model 128, 8 heads, 4 kv heads) on synthetic tokens, so that attention dominates the step.
# Prints per run: step time, tokens/s, the step's loss (the runs must agree), activation bytes
# per rank (metrics' mem.activations), the exposed cp communication and the share of the
# transfers' flight time that the ring hid behind the block computation (metrics' context.*).
#
#   bench/cp.sh [T] [STEPS] [CPS]   (defaults 16384 6 "2 4"; the first 2 steps are warm-up)
#   LONG=1 bench/cp.sh 65536 1 2     the long-context check: T = 65536 at cp = 1 and cp = 2
set -euo pipefail
cd "$(dirname "$0")/.."
T=${1:-16384}
STEPS=${2:-6}
CPS=${3:-"2 4"}
WARMUP=$((STEPS > 2 ? 2 : 0))
STRATA=${STRATA_BIN:-build/strata}
CORES=$(getconf _NPROCESSORS_ONLN)
work=$(mktemp -d "${TMPDIR:-/tmp}/strata_cp.XXXXXX")
trap 'rm -rf "$work"' EXIT
export GLIBC_TUNABLES=glibc.malloc.hugetlb=1
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $CORES cores;" \
  "T = $T, batch 1, $STEPS steps ($WARMUP warm-up)"
run() {  # NAME CP IMPL
  local threads=$((CORES / $2 > 0 ? CORES / $2 : 1))
  OMP_NUM_THREADS=$threads mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$2" \
    "$STRATA" train configs/llama-tiny.toml --set data.source=synthetic \
    --set "train.steps=$STEPS" --set "run.dir=$work/$1" --set "system.threads=$threads" \
    --set run.resume=none --set train.eval_every=0 --set train.eval_batches=1 \
    --set train.checkpoint_every=0 \
    --set train.log_every=1 --set train.batch_size=1 --set "train.seq_len=$T" \
    --set "model.max_seq_len=$T" --set model.vocab_size=256 --set model.n_layer=2 \
    --set model.d_model=128 --set model.n_head=8 --set model.n_kv_head=4 \
    --set model.attention=flash --set sample.max_new_tokens=0 --set "parallel.cp=$2" \
    --set "parallel.cp_impl=$3" > "$work/$1.log" 2>&1 || { tail -5 "$work/$1.log"; exit 1; }
  python3 - "$work/$1/metrics.jsonl" "$WARMUP" "$1" "$2" "$threads" <<'PY'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1]) if l.strip() and '"step_ms"' in l]
timed = [r for r in recs if r["step"] > int(sys.argv[2])] or recs
secs = sum(r["step_ms"] / 1e3 for r in timed) / len(timed)
tps = sum(r["tokens_per_s"] for r in timed) / len(timed)
ctx = [r.get("context", {}) for r in timed]
flight = sum(c.get("flight_s", 0.0) for c in ctx)
exposed = sum(c.get("exposed_s", 0.0) for c in ctx)
hidden = max(0.0, 1 - exposed / flight) if flight > 0 else float("nan")
act = recs[-1]["mem"]["activations"] / 2**20
ws = recs[-1]["mem"]["workspace"] / 2**20
print(f"{sys.argv[3]:>14}  ranks {sys.argv[4]} x {sys.argv[5]} thr  step {secs:7.3f} s  "
      f"{tps:8.1f} tok/s  loss {recs[-1]['loss']:.5f}  activations {act:8.1f} MiB/rank  "
      f"workspace {ws:7.1f} MiB  cp comm exposed {exposed / len(timed):6.3f} s/step  "
      f"hidden {100 * hidden:5.1f}% of {flight / len(timed):6.3f} s in flight")
PY
}
run "cp1" 1 ring
for cp in $CPS; do
  run "cp${cp}_ring" "$cp" ring
  [ "${LONG:-0}" = 1 ] || run "cp${cp}_ulysses" "$cp" ulysses
done
