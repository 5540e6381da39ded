#!/usr/bin/env bash
# Time validation of the performance model on this machine: calibrates it (`strata plan
# --calibrate`), trains short runs of small configs (1-2 ranks, at most one thread per core) and
# compares the measured step time with `strata plan ... --json` (given.step.step_s).
#
# A benchmark, not a test: on a shared 2-core machine timings are noisy. The measured time of a
# run is the median step_ms of metrics.jsonl over steps 3..STEPS (the first two warm up). Each
# config runs REPEATS times and the fastest median is kept, as the calibration keeps the fastest
# repetition of each kernel (other load only ever adds time); a config still more than 25% off
# runs up to RETRIES more times.
#
# Usage: bench/plan_time.sh [--build DIR] [--profile FILE] [--out FILE.md] [--only SUBSTRING]
#   --profile FILE  use this calibrated profile instead of calibrating now
# Environment: STEPS (default 6), REPEATS (default 2), RETRIES (default 2).
set -euo pipefail
BUILD=build
PROFILE=""
OUT=/tmp/plan_time_table.md
ONLY=""
while [ $# -gt 0 ]; do
  case "$1" in
    --build) BUILD=$2; shift 2 ;;
    --profile) PROFILE=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --only) ONLY=$2; shift 2 ;;
    *) echo "usage: $0 [--build DIR] [--profile FILE] [--out FILE.md] [--only SUBSTRING]" >&2; exit 2 ;;
  esac
done
# Paths as given (relative to where the script was started), then work from the repository.
STRATA=$(realpath "$BUILD/strata")
[ -n "$PROFILE" ] && PROFILE=$(realpath "$PROFILE")
OUT=$(realpath -m "$OUT")
cd "$(dirname "$0")/.."
STEPS=${STEPS:-6}
REPEATS=${REPEATS:-2}
RETRIES=${RETRIES:-2}
WORK=$(mktemp -d /tmp/plan_time.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
export OMP_NUM_THREADS=1 GLIBC_TUNABLES=glibc.malloc.hugetlb=1

if [ -z "$PROFILE" ]; then
  PROFILE=$WORK/calibrated.toml
  echo "== calibrating: $STRATA plan --calibrate --out $PROFILE"
  "$STRATA" plan --calibrate --out "$PROFILE"
  cp "$PROFILE" "${OUT%.md}.toml"
  echo "(kept as ${OUT%.md}.toml)"
fi

# name | ranks | config | --set overrides (space-separated key=value)
CASES=(
  "gpt2 tiny, 1 rank x 2 threads|1|configs/tiny.toml|system.threads=2 train.batch_size=4"
  "gpt2 tiny, 1 rank x 1 thread|1|configs/tiny.toml|system.threads=1 train.batch_size=4"
  "gpt2 tiny, fp16, 1 rank x 2 threads|1|configs/tiny.toml|system.threads=2 train.batch_size=4 train.precision=fp16"
  "gpt2 tiny, bf16, 1 rank x 2 threads|1|configs/tiny.toml|system.threads=2 train.batch_size=4 train.precision=bf16"
  "gpt2 tiny, recompute full, 1 rank x 2 threads|1|configs/tiny.toml|system.threads=2 train.batch_size=4 train.recompute=full"
  "gpt2 tiny, dp 2|2|configs/tiny.toml|system.threads=1 train.batch_size=4"
  "gpt2 tiny, dp 2 zero 2|2|configs/tiny.toml|system.threads=1 train.batch_size=4 parallel.zero=2"
  "gpt2 tiny, dp 2 zero 3|2|configs/tiny.toml|system.threads=1 train.batch_size=4 parallel.zero=3"
  "gpt2 tiny, tp 2|2|configs/tiny.toml|system.threads=1 train.batch_size=4 parallel.tp=2"
  "gpt2 tiny, pp 2 1f1b, 4 micro-batches|2|configs/tiny.toml|system.threads=1 train.batch_size=2 parallel.pp=2 train.grad_accum=4"
  "llama tiny, flash, 1 rank x 2 threads|1|configs/llama-tiny.toml|system.threads=2 train.batch_size=4 model.attention=flash"
  "llama tiny, tp 2 sp bf16|2|configs/llama-tiny.toml|system.threads=1 train.batch_size=4 parallel.tp=2 parallel.sp=true train.precision=bf16"
  "gpt2 8L C512, pp 2 interleaved v2, 4 micro-batches|2|configs/oom-demo.toml|system.threads=1 system.memory_limit_mb=0 train.batch_size=2 parallel.pp=2 parallel.vpp=2 parallel.schedule=interleaved train.grad_accum=4"
  # Mixture of Experts (configs/mixtral-tiny.toml: 8 experts, top 2): one process, then the
  # experts split over ep ranks and the tokens exchanged by all-to-all.
  "mixtral tiny, 1 rank x 2 threads|1|configs/mixtral-tiny.toml|system.threads=2 train.batch_size=4"
  "mixtral tiny, 1 rank x 1 thread|1|configs/mixtral-tiny.toml|system.threads=1 train.batch_size=4"
  "mixtral tiny, dp 2 ep 1|2|configs/mixtral-tiny.toml|system.threads=1 train.batch_size=4"
  "mixtral tiny, dp 2 = ep 2|2|configs/mixtral-tiny.toml|system.threads=1 train.batch_size=4 parallel.ep=2"
  "mixtral tiny, dp 4 = ep 4 (4 ranks on 2 cores)|4|configs/mixtral-tiny.toml|system.threads=1 train.batch_size=2 parallel.ep=4"
  "mixtral tiny, dp 4, ep 2 (4 ranks on 2 cores)|4|configs/mixtral-tiny.toml|system.threads=1 train.batch_size=2 parallel.ep=2"
)

# Median step_ms of steps 3.. of a run directory.
measured_ms() {
  python3 - "$1/metrics.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
ms = [r["step_ms"] for r in rows if "step_ms" in r][2:]
print("%.1f" % statistics.median(ms))
PY
}

train() {  # ranks config dir sets...
  local np=$1 cfg=$2 dir=$3
  shift 3
  local args=(train "$cfg" --set data.source=synthetic --set "run.dir=$dir" --set run.resume=none
              --set "train.steps=$STEPS" --set train.eval_every=0 --set train.eval_batches=1
              --set sample.max_new_tokens=0 --set train.log_every=1 --set train.checkpoint_every=0)
  for s in "$@"; do args+=(--set "$s"); done
  if [ "$np" = 1 ]; then
    "$STRATA" "${args[@]}" >"$dir.log" 2>&1
  else
    mpirun --allow-run-as-root --oversubscribe --mca btl self,vader -x OMP_NUM_THREADS \
      -x GLIBC_TUNABLES -np "$np" "$STRATA" "${args[@]}" >"$dir.log" 2>&1
  fi
}

predicted_ms() {  # ranks config sets...
  local np=$1 cfg=$2
  shift 2
  local args=(plan "$cfg" --gpus "$np" --cluster "$PROFILE" --no-search --json)
  for s in "$@"; do args+=(--set "$s"); done
  "$STRATA" "${args[@]}" | python3 -c \
    'import json,sys; print("%.1f" % (1e3 * json.load(sys.stdin)["given"]["step"]["step_s"]))'
}

TABLE="| config | ranks | predicted ms | measured ms | error % |
|---|---|---|---|---|"
worst=0
i=0
for c in "${CASES[@]}"; do
  IFS='|' read -r name np cfg sets <<<"$c"
  if [ -n "$ONLY" ] && [[ "$name" != *"$ONLY"* ]]; then continue; fi
  read -r -a setv <<<"$sets"
  pred=$(predicted_ms "$np" "$cfg" "${setv[@]}")
  best=""
  for attempt in $(seq 1 $((REPEATS + RETRIES))); do
    i=$((i + 1))
    dir=$WORK/run$i
    if ! train "$np" "$cfg" "$dir" "${setv[@]}"; then
      echo "FAILED: $name (log: $dir.log)"; tail -5 "$dir.log"; exit 1
    fi
    m=$(measured_ms "$dir")
    best=$(python3 -c "print(min(float('$m'), float('${best:-1e30}')))")
    err=$(python3 -c "print('%.1f' % (100 * ($pred - $best) / $best))")
    echo "$name: predicted $pred ms, measured $m ms (best $best), error $err%"
    if [ "$attempt" -ge "$REPEATS" ] &&
      python3 -c "import sys; sys.exit(0 if abs($err) <= 25 else 1)"; then break; fi
  done
  TABLE+="
| $name | $np | $pred | $best | $err |"
  worst=$(python3 -c "print(max($worst, abs($err)))")
done
echo
echo "$TABLE"
echo "worst error: $worst%"
{
  echo "Measured $(date '+%Y-%m-%d %H:%M') on $(getconf _NPROCESSORS_ONLN) cores; profile: $PROFILE"
  echo
  echo "$TABLE"
  echo
  echo "worst error: $worst%"
} >"$OUT"
echo "wrote $OUT"
