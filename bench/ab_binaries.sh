#!/usr/bin/env bash
# Two strata binaries' training speed, side by side: each round runs both at once, each pinned to
# its own core with one thread, and swaps the cores the next round, so that neither binary keeps
# the faster core or the quieter minute. Prints each round's median step time of steps FIRST..
# (metrics.jsonl step_ms) and the ratio new/old, then the median ratio over the rounds. For "no
# behaviour change" checks of a refactor: old main's binary against this build's.
#
#   bench/ab_binaries.sh OLD_STRATA NEW_STRATA [CONFIG] [ROUNDS] [STEPS] [FIRST]
#   bench/ab_binaries.sh /work/wt-old/build/strata build/strata configs/gpt2-124m.toml 4 7 3
# Needs 2 cores (taskset -c 0 and -c 1) and python3.
set -euo pipefail
old=$1 new=$2 config=${3:-configs/gpt2-124m.toml} rounds=${4:-4} steps=${5:-7} first=${6:-3}
work=$(mktemp -d /tmp/strata_ab.XXXXXX)
trap 'rm -rf "$work"' EXIT
median_step() {  # median_step RUN_DIR: the median step_ms of steps >= FIRST
  python3 - "$1/metrics.jsonl" "$first" <<'PY'
import json, statistics, sys
ms = [r["step_ms"] for r in map(json.loads, open(sys.argv[1])) if r.get("step", 0) >= int(sys.argv[2])]
print(f"{statistics.median(ms):.1f}")
PY
}
run() {  # run BINARY CORE RUN_DIR
  OMP_NUM_THREADS=1 taskset -c "$2" "$1" train "$config" --set system.threads=1 \
    --set "train.steps=$steps" --set "run.dir=$3" --set train.checkpoint_every=0 \
    --set sample.max_new_tokens=0 >"$3.log" 2>&1
}
ratios=()
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'); config $config," \
     "steps $first-$steps, 1 thread each"
for r in $(seq 1 "$rounds"); do
  a=$(( r % 2 )) b=$(( (r + 1) % 2 ))
  run "$old" "$a" "$work/old$r" & p1=$!
  run "$new" "$b" "$work/new$r" & p2=$!
  wait "$p1" || { cat "$work/old$r.log"; exit 1; }
  wait "$p2" || { cat "$work/new$r.log"; exit 1; }
  o=$(median_step "$work/old$r") n=$(median_step "$work/new$r")
  ratio=$(python3 -c "print(f'{$n / $o:.3f}')")
  ratios+=("$ratio")
  echo "round $r: old on core $a ${o} ms, new on core $b ${n} ms: new/old $ratio"
done
python3 -c "import statistics, sys; print('median new/old', f'{statistics.median(map(float, sys.argv[1:])):.3f}')" "${ratios[@]}"
