#!/usr/bin/env bash
# Expert parallelism against data parallelism on the same ranks (issue 21, item 2): the mixtral
# of configs/mixtral-tiny.toml on synthetic tokens, NP ranks of one thread each, every rank the
# same micro-batch, parallel.ep = 1 (every rank holds all 8 experts) and then ep = EP (8 / EP
# experts a rank, tokens exchanged by all-to-all). Prints tokens/s of both, the ratio, and the
# share of the ep step spent waiting on the exchange (metrics' time.ep_comm_s).
#
#   bench/moe_ep.sh [NP] [EP] [STEPS]     (defaults 2 2 20; the first 5 steps are warm-up)
set -euo pipefail
cd "$(dirname "$0")/.."
NP=${1:-2}
EP=${2:-2}
STEPS=${3:-20}
WARMUP=5
STRATA=${STRATA_BIN:-build/strata}
work=$(mktemp -d "${TMPDIR:-/tmp}/strata_moe_ep.XXXXXX")
trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=1 GLIBC_TUNABLES=glibc.malloc.hugetlb=1
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(getconf _NPROCESSORS_ONLN) cores;" \
  "$NP ranks x 1 thread"
run() {  # NAME EP
  mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$NP" "$STRATA" train \
    configs/mixtral-tiny.toml --set data.source=synthetic --set "train.steps=$STEPS" \
    --set "run.dir=$work/$1" --set system.threads=1 --set run.resume=none \
    --set train.eval_every=0 --set train.checkpoint_every=0 --set train.log_every=1 \
    --set train.batch_size=4 --set "parallel.ep=$2" > "$work/$1.log" 2>&1
  python3 - "$work/$1/metrics.jsonl" "$WARMUP" <<'PY'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
timed = [r for r in recs if r.get("step", 0) > int(sys.argv[2]) and "tokens_per_s" in r]
secs = sum(r["step_ms"] / 1e3 for r in timed)
tokens = sum(r["tokens_per_s"] * r["step_ms"] / 1e3 for r in timed)
ep = sum(r["time"].get("ep_comm_s", 0.0) for r in timed)
print("%.1f %.4f %.3f" % (tokens / secs, recs[-1]["loss"], ep / secs))
PY
}
read -r dp_tps dp_loss _ < <(run dp 1)
read -r ep_tps ep_loss ep_share < <(run ep "$EP")
python3 - "$dp_tps" "$ep_tps" "$ep_share" "$dp_loss" "$ep_loss" "$EP" <<'PY'
import sys
dp, ep, share, dl, el, n = map(float, sys.argv[1:])
print(f"ep=1 (data parallel):  {dp:8.1f} tok/s   loss {dl:.4f}")
print(f"ep={int(n)}:                {ep:8.1f} tok/s   loss {el:.4f}   exchange waits {100*share:.1f}% of the step")
print(f"ep / dp throughput: {ep/dp:.3f}")
PY
