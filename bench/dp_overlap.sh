#!/usr/bin/env bash
# Data parallelism on this machine: one rank vs two ranks (one thread each, same per-rank batch),
# and two ranks with the bucketed all-reduce overlapped with backward vs started after it.
# Prints tokens/s, the step split into compute / exposed communication / optimizer, the scaling
# efficiency, and the fraction of the all-reduce that stays exposed with overlap.
# Usage: bench/dp_overlap.sh [CONFIG] [STEPS]   (default configs/tiny.toml, 30 steps)
set -euo pipefail
cd "$(dirname "$0")/.."
config=${1:-configs/tiny.toml}
steps=${2:-30}
strata=./build/strata
[ -x "$strata" ] || { echo "build strata first (scripts/build.sh)"; exit 3; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=1 GLIBC_TUNABLES=glibc.malloc.hugetlb=1
mpirun=(mpirun --allow-run-as-root --oversubscribe --bind-to none --mca btl self,vader)
common=(--set data.source=synthetic --set train.steps="$steps" --set train.eval_every=0
        --set train.checkpoint_every=0 --set run.resume=none --set system.threads=1
        --set sample.max_new_tokens=0)

run() {  # name, ranks, extra args...
  local name=$1 ranks=$2
  shift 2
  "${mpirun[@]}" -np "$ranks" "$strata" train "$config" "${common[@]}" --set run.dir="$work/$name" "$@" \
    > "$work/$name.out" 2>&1 || { cat "$work/$name.out"; exit 1; }
}
run one 1
run overlap 2 --set parallel.overlap=true
run serial 2 --set parallel.overlap=false

python3 - "$work" "$steps" <<'PY'
import json, sys, statistics
work, steps = sys.argv[1], int(sys.argv[2])
def summary(name):
    rows = [json.loads(l) for l in open(f"{work}/{name}/metrics.jsonl")]
    rows = rows[max(2, len(rows) // 5):]  # skip warm-up steps
    med = lambda k: statistics.median(r[k] for r in rows)
    t = lambda k: statistics.median(r["time"][k] for r in rows)
    return dict(tps=med("tokens_per_s"), step=med("step_ms") / 1e3, compute=t("compute_s"),
                comm=t("comm_exposed_s"), optim=t("optimizer_s"))
one, ov, se = summary("one"), summary("overlap"), summary("serial")
print(f"{'run':<28}{'tokens/s':>10}{'step s':>9}{'compute':>9}{'exposed comm':>14}{'optimizer':>11}")
for name, s in [("1 rank", one), ("2 ranks, overlapped", ov), ("2 ranks, after backward", se)]:
    print(f"{name:<28}{s['tps']:>10.0f}{s['step']:>9.3f}{s['compute']:>9.3f}{s['comm']:>14.3f}{s['optim']:>11.3f}")
print(f"scaling 1 -> 2 ranks: {ov['tps'] / one['tps']:.2f}x (efficiency {ov['tps'] / one['tps'] / 2:.0%})")
if se["comm"] > 0:
    print(f"all-reduce exposed with overlap: {ov['comm']:.3f} s of {se['comm']:.3f} s "
          f"({ov['comm'] / se['comm']:.0%} exposed, {1 - ov['comm'] / se['comm']:.0%} hidden)")
PY
