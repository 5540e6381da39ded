#!/usr/bin/env bash
# Training throughput, strata vs PyTorch, same model, same shapes, 2 threads each.
#
#   bench/train_vs_torch.sh tiny|gpt2-124m [STEPS]
#   PRECISION=bf16 bench/train_vs_torch.sh gpt2-124m    # strata bf16 vs torch.autocast(bfloat16)
#   ATTENTION=flash ...                                 # strata's model.attention (default: config)
#
# Runs, one after the other (never concurrently):
#   1. bench/gemm_peak.py         torch f32 GEMM GFLOP/s (the ceiling PyTorch works against)
#   2. ./build/bench_gemm         strata's "f32 GEMM peak" line, if the binary exists
#                                 (skip with STRATA_GEMM_PEAK=<GFLOP/s> or STRATA_GEMM_PEAK=skip)
#   3. ./build/strata train configs/$NAME.toml ... (synthetic data), reads metrics.jsonl
#   4. bench/torch_train.py       the PyTorch peer, at its best: OpenMP OpenBLAS forced through
#                                 LD_LIBRARY_PATH, OPENBLAS_CORETYPE/OPENBLAS_L2_SIZE unset,
#                                 glibc malloc never returns memory (no mmap/trim churn)
# and prints tokens/s, step time, achieved GFLOP/s (FLOPs/token = 6N + 12*L*C*T, N without the
# position table) and the fraction of each GEMM peak, plus the strata/PyTorch ratio.
# Exit status: 0 when both sides ran, 3 when the strata side could not run (PyTorch still
# reported), 1 on other errors.
set -euo pipefail

NAME=${1:-}
STEPS=${2:-}
PRECISION=${PRECISION:-f32}
ATTENTION=${ATTENTION:-}
cd "$(dirname "$0")/.."
PY=/usr/bin/python3
THREADS=2
OPENBLAS_OMP_DIR=/usr/lib/x86_64-linux-gnu/openblas-openmp

case "$NAME" in
  tiny)
    TORCH_ARGS=(--family gpt2 --n-layer 4 --n-head 4 --d-model 256 --vocab 8192 --seq-len 256 --max-seq-len 256 --batch 8)
    STEPS=${STEPS:-20} ;;
  gpt2-124m)
    TORCH_ARGS=(--family gpt2 --n-layer 12 --n-head 12 --d-model 768 --vocab 50304 --seq-len 256 --max-seq-len 1024 --batch 4)
    STEPS=${STEPS:-8} ;;
  *)
    echo "usage: $0 tiny|gpt2-124m [STEPS]" >&2
    exit 1 ;;
esac
if ! [[ "$STEPS" =~ ^[0-9]+$ ]] || (( STEPS < 2 )); then
  echo "STEPS must be an integer >= 2 (got '$STEPS')" >&2
  exit 1
fi
# steps excluded from the PyTorch average (strata excludes "the first few" itself)
WARMUP=$(( STEPS >= 9 ? 3 : (STEPS / 3 > 0 ? STEPS / 3 : 1) ))

WORK="${TMPDIR:-/tmp}"
LOGDIR=$(mktemp -d "$WORK/train_vs_torch.XXXXXX")
trap 'rm -rf "$LOGDIR"' EXIT

# The PyTorch environment. Debian's torch links libblas.so.3/libopenblas.so.0 through
# update-alternatives; putting the openblas-openmp directory first pins the OpenMP build
# regardless of the alternatives (bench/torch_blas.py reports what was really loaded).
TORCH_ENV=(env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE
  "GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=68719476736"
  "OMP_NUM_THREADS=$THREADS")
if [[ -d "$OPENBLAS_OMP_DIR" ]]; then
  TORCH_ENV+=("LD_LIBRARY_PATH=$OPENBLAS_OMP_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
else
  echo "warning: $OPENBLAS_OMP_DIR not found; torch uses whatever libblas.so.3 resolves to" >&2
fi

echo "== $NAME: $STEPS steps (PyTorch averages steps after $WARMUP), $THREADS threads, $PRECISION"

# 1. torch GEMM peak
echo "-- torch f32 GEMM peak (bench/gemm_peak.py)"
"${TORCH_ENV[@]}" "$PY" bench/gemm_peak.py --threads "$THREADS" --min-time 0.5 > "$LOGDIR/gemm.json"
cat "$LOGDIR/gemm.json"

# 2. strata GEMM peak
STRATA_PEAK=""
if [[ -n "${STRATA_GEMM_PEAK:-}" ]]; then
  [[ "$STRATA_GEMM_PEAK" != skip ]] && STRATA_PEAK=$STRATA_GEMM_PEAK
elif [[ -x ./build/bench_gemm ]]; then
  echo "-- strata f32 GEMM peak (./build/bench_gemm)"
  if OMP_NUM_THREADS=$THREADS ./build/bench_gemm > "$LOGDIR/bench_gemm.txt" 2>&1; then
    STRATA_PEAK=$(sed -n 's/^f32 GEMM peak: *\([0-9.][0-9.]*\).*/\1/p' "$LOGDIR/bench_gemm.txt" | tail -n1)
    grep '^f32 GEMM peak' "$LOGDIR/bench_gemm.txt" || echo "(no 'f32 GEMM peak' line in its output)"
  else
    echo "./build/bench_gemm failed; its output ends with:"; tail -n 5 "$LOGDIR/bench_gemm.txt"
  fi
fi

# 3. strata
STRATA_TPS=""
STRATA_RC=0
RUN_DIR="$WORK/strata-bench"
if [[ ! -x ./build/strata ]]; then
  echo "-- strata: ./build/strata not found (build it: cmake --build build --target strata);" \
       "skipping the strata side"
  STRATA_RC=3
elif [[ ! -f "configs/$NAME.toml" ]]; then
  echo "-- strata: configs/$NAME.toml not found; skipping the strata side"
  STRATA_RC=3
else
  echo "-- strata train configs/$NAME.toml"
  rm -rf "$RUN_DIR"
  if OMP_NUM_THREADS=$THREADS GLIBC_TUNABLES=glibc.malloc.hugetlb=1 ./build/strata train \
      "configs/$NAME.toml" --set data.source=synthetic --set "train.steps=$STEPS" \
      --set "run.dir=$RUN_DIR" --set "system.threads=$THREADS" --set run.resume=none \
      --set "train.precision=$PRECISION" ${ATTENTION:+--set "model.attention=$ATTENTION"} \
      > "$LOGDIR/strata.log" 2>&1; then
    # Averaged like the PyTorch side: the tokens of a step over the mean step time of the steps
    # after the warm-up ones.
    STRATA_TPS=$("$PY" - "$RUN_DIR/metrics.jsonl" "$WARMUP" <<'EOF' || true
import json, sys
recs = []
try:
    for line in open(sys.argv[1]):
        line = line.strip()
        if line:
            rec = json.loads(line)
            if "tokens_per_s" in rec and "step_ms" in rec:
                recs.append(rec)
except (OSError, ValueError) as e:
    sys.exit("cannot read %s: %s" % (sys.argv[1], e))
timed = recs[int(sys.argv[2]):] or recs[-1:]
if not timed:
    sys.exit("no record with tokens_per_s in %s" % sys.argv[1])
tokens = timed[-1]["tokens_per_s"] * timed[-1]["step_ms"] / 1e3
print(tokens / (sum(r["step_ms"] for r in timed) / len(timed) / 1e3))
EOF
)
    if [[ -z "$STRATA_TPS" ]]; then
      echo "strata ran but no tokens_per_s was found in $RUN_DIR/metrics.jsonl"; STRATA_RC=3
    fi
  else
    echo "strata failed (exit $?); its output ends with:"; tail -n 15 "$LOGDIR/strata.log"
    STRATA_RC=3
  fi
fi

# 4. PyTorch
echo "-- PyTorch (bench/torch_train.py ${TORCH_ARGS[*]})"
"${TORCH_ENV[@]}" "$PY" bench/torch_train.py "${TORCH_ARGS[@]}" --steps "$STEPS" \
  --warmup-steps "$WARMUP" --threads "$THREADS" --precision "$PRECISION" > "$LOGDIR/torch.json"

# Summary
"$PY" - "$LOGDIR/torch.json" "$LOGDIR/gemm.json" "${STRATA_TPS:-}" "${STRATA_PEAK:-}" "$NAME" <<'EOF'
import json, sys
torch_rec = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
gemm = json.loads(open(sys.argv[2]).read().strip().splitlines()[-1])
strata_tps = float(sys.argv[3]) if sys.argv[3] else None
strata_peak = float(sys.argv[4]) if sys.argv[4] else None
fpt = torch_rec["flops_per_token"]
torch_peak = gemm["gemm_gflops"]
blas = torch_rec.get("blas", {})
print()
print("config %s: N=%.2fM params (no position table), %.1f MFLOP/token" % (
    sys.argv[5], torch_rec["n_params_no_pos"] / 1e6, fpt / 1e6))
print("torch BLAS: %s [%s threading]" % (blas.get("openblas_config", ", ".join(blas.get("libraries", []))),
                                       blas.get("openblas_parallel", "?")))
print("GEMM peaks: torch %.1f GFLOP/s%s" % (torch_peak, "" if strata_peak is None
                                          else ", strata bench_gemm %.1f GFLOP/s" % strata_peak))
hdr = "%-8s %12s %10s %9s %12s" % ("", "tokens/s", "step ms", "GFLOP/s", "%torch-peak")
if strata_peak:
    hdr += " %13s" % "%strata-peak"
print(hdr)
tok_per_step = torch_rec["tokens_per_s"] * torch_rec["step_ms"] / 1e3
def row(name, tps):
    g = tps * fpt * 1e-9
    s = "%-8s %12.1f %10.1f %9.1f %11.1f%%" % (name, tps, tok_per_step / tps * 1e3, g, 100 * g / torch_peak)
    if strata_peak:
        s += " %12.1f%%" % (100 * g / strata_peak)
    print(s)
if strata_tps:
    row("strata", strata_tps)
else:
    print("%-8s %12s" % ("strata", "n/a"))
row("pytorch", torch_rec["tokens_per_s"])
if strata_tps:
    print("strata / pytorch = %.2fx" % (strata_tps / torch_rec["tokens_per_s"]))
print("pytorch: %s" % json.dumps({k: torch_rec[k] for k in ("tokens_per_s", "step_ms", "steps_timed",
                                                             "step_ms_min", "loss_first", "loss_last")}))
EOF
exit "$STRATA_RC"
