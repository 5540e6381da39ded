#!/usr/bin/env bash
# Training throughput, strata vs PyTorch at its best today, same model, same shapes, 2 threads each.
#
#   bench/train_vs_torch.sh tiny|gpt2-124m [STEPS]
#   PRECISION=bf16 bench/train_vs_torch.sh gpt2-124m    # strata bf16 vs torch.autocast(bfloat16), every peer
#   ATTENTION=flash ...                                 # strata's model.attention (default: config)
#   SKIP_PYPI_TORCH=1 ...                               # only Debian's torch 1.13 as the peer
#   TORCH_PEERS="pypi-eager pypi-compile" ...           # a subset of the peers (default: all three)
#   STRATA_BIN=/path/to/strata STRATA_BENCH_GEMM=/path/to/bench_gemm ...  # default ./build/...
#   STRATA_CPU_ISA=avx2 ...      # strata at the AVX2 level, and every peer capped at AVX2 too
#                                # (ATEN_CPU_CAPABILITY, MKL_ENABLE_INSTRUCTIONS, ONEDNN_MAX_CPU_ISA,
#                                # OpenBLAS core Haswell): an AVX2 machine emulated on a newer one
#
# The peers, each the same model in bench/torch_train.py:
#   debian-1.13   Debian's python3-torch 1.13 (/usr/bin/python3): OpenMP OpenBLAS forced through
#                 LD_LIBRARY_PATH, manual attention, AdamW foreach (1.13 has no public SDPA, no
#                 fused CPU AdamW, no torch.compile)
#   pypi-eager    the newest torch from PyPI in the venv bench/torch_venv.sh makes
#                 (${STRATA_TORCH_VENV:-$HOME/.cache/strata/torch-venv}; created here when missing):
#                 F.scaled_dot_product_attention(is_causal=True), AdamW(fused=True) (foreach where
#                 fused does not run on CPU; the output says which), MKL and oneDNN
#   pypi-compile  the same under torch.compile (inductor); its compile runs in the warm-up steps
# All with OPENBLAS_L2_SIZE unset, glibc malloc that never returns memory (no mmap/trim churn) and
# OMP_NUM_THREADS=2. OPENBLAS_CORETYPE is unset too, except where Debian's OpenBLAS does not know
# this CPU model and falls back to its generic "Prescott" (SSE3) kernels: then the newest core
# the CPU's flags allow is named (Cooperlake with avx512_bf16, SkylakeX with avx512f, Haswell with
# avx2; DEBIAN_OPENBLAS_CORETYPE=<core> or =none overrides).
#
# Runs, one after the other (never concurrently):
#   1. bench/gemm_peak.py         each torch build's f32 GEMM GFLOP/s (the ceiling it works against)
#   2. $STRATA_BENCH_GEMM         strata's "f32 GEMM peak" line, if the binary exists
#                                 (skip with STRATA_GEMM_PEAK=<GFLOP/s> or STRATA_GEMM_PEAK=skip)
#   3. $STRATA_BIN train configs/$NAME.toml ... (synthetic data), reads metrics.jsonl
#   4. bench/torch_train.py       the peers: debian-1.13, pypi-eager, pypi-compile
# and prints tokens/s, step time, achieved GFLOP/s (FLOPs/token = 6N + 12*L*C*T, N without the
# position table) and the fraction of each GEMM peak, one "peer" line per peer with the
# strata/peer ratio, and "best peer: NAME X tok/s; strata / best = R" (the fastest peer that ran
# and trained soundly: a peer whose first loss differs from the others' or whose last is NaN is
# named and left out).
# Exit status: 0 when strata and at least one peer ran, 3 when the strata side could not run
# (the peers still reported), 1 on other errors (no peer ran).
set -euo pipefail

NAME=${1:-}
STEPS=${2:-}
PRECISION=${PRECISION:-f32}
ATTENTION=${ATTENTION:-}
cd "$(dirname "$0")/.."
PY=/usr/bin/python3
THREADS=2
OPENBLAS_OMP_DIR=/usr/lib/x86_64-linux-gnu/openblas-openmp
STRATA_BIN=${STRATA_BIN:-./build/strata}
STRATA_BENCH_GEMM=${STRATA_BENCH_GEMM:-./build/bench/bench_gemm}
TORCH_VENV=${STRATA_TORCH_VENV:-$HOME/.cache/strata/torch-venv}
VPY="$TORCH_VENV/bin/python"
TORCH_PEERS=${TORCH_PEERS:-debian-1.13 pypi-eager pypi-compile}
for peer in $TORCH_PEERS; do
  case "$peer" in
    debian-1.13|pypi-eager|pypi-compile) ;;
    *) echo "TORCH_PEERS: unknown peer '$peer' (debian-1.13, pypi-eager, pypi-compile)" >&2; exit 1 ;;
  esac
done

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
# torch.compile compiles on the first step; one more step is left out where there are enough
COMPILE_WARMUP=$(( WARMUP >= 2 ? WARMUP : (STEPS >= 4 ? 2 : 1) ))

WORK="${TMPDIR:-/tmp}"
LOGDIR=$(mktemp -d "$WORK/train_vs_torch.XXXXXX")
trap 'rm -rf "$LOGDIR"' EXIT

# The PyTorch environment. Debian's torch links libblas.so.3/libopenblas.so.0 through
# update-alternatives; putting the openblas-openmp directory first pins the OpenMP build
# regardless of the alternatives (bench/torch_blas.py reports what was really loaded).
TORCH_ENV=(env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE
  "GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=68719476736"
  "OMP_NUM_THREADS=$THREADS")
# The PyPI torch links MKL statically and carries its own libgomp: the same environment without
# the OpenBLAS directory.
VENV_ENV=("${TORCH_ENV[@]}")
if [[ -d "$OPENBLAS_OMP_DIR" ]]; then
  TORCH_ENV+=("LD_LIBRARY_PATH=$OPENBLAS_OMP_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
else
  echo "warning: $OPENBLAS_OMP_DIR not found; torch uses whatever libblas.so.3 resolves to" >&2
fi

want() { [[ " $TORCH_PEERS " == *" $1 "* ]]; }

# A forced strata level caps the peers at the same instruction set, so that the comparison is the
# one an AVX2 machine would see (PyTorch's ATen kernels and inductor's generated code follow
# ATEN_CPU_CAPABILITY, MKL its own variable, oneDNN ONEDNN_MAX_CPU_ISA, 1.13's oneDNN the DNNL_
# spelling).
PEER_ISA=
case "${STRATA_CPU_ISA:-}" in
  "") ;;
  avx2) PEER_ISA=avx2 caps=(avx2 AVX2 AVX2 Haswell) ;;
  avx512) PEER_ISA=avx512 caps=(avx512 AVX512 AVX512_CORE SkylakeX) ;;
  *) echo "-- STRATA_CPU_ISA=$STRATA_CPU_ISA: the peers run uncapped (only avx2 and avx512 cap them)" ;;
esac
if [[ -n "$PEER_ISA" ]]; then
  for e in "ATEN_CPU_CAPABILITY=${caps[0]}" "MKL_ENABLE_INSTRUCTIONS=${caps[1]}" \
           "ONEDNN_MAX_CPU_ISA=${caps[2]}" "DNNL_MAX_CPU_ISA=${caps[2]}"; do
    TORCH_ENV+=("$e"); VENV_ENV+=("$e")
  done
  DEBIAN_OPENBLAS_CORETYPE=${caps[3]}
  echo "-- STRATA_CPU_ISA=$STRATA_CPU_ISA: strata and every peer capped at $PEER_ISA"
fi

echo "== $NAME: $STEPS steps (PyTorch averages steps after $WARMUP, torch.compile after" \
     "$COMPILE_WARMUP), $THREADS threads, $PRECISION; peers: $TORCH_PEERS"

# 0. The environments. Debian's OpenBLAS 0.3.21 picks its kernels from the CPU model and takes
# the generic SSE3 ones (core "Prescott") for models newer than it knows (Emerald Rapids, ...).
if want debian-1.13; then
  CORETYPE=${DEBIAN_OPENBLAS_CORETYPE:-auto}
  if [[ "$CORETYPE" == auto ]]; then
    CORETYPE=none
    core=$("${TORCH_ENV[@]}" "$PY" bench/torch_blas.py 2>/dev/null |
           sed -n 's/.*"openblas_core": *"\([^"]*\)".*/\1/p') || true
    if [[ "$core" == Prescott ]]; then
      flags=$(grep -m1 '^flags' /proc/cpuinfo || true)
      if [[ " $flags " == *" avx512_bf16 "* ]]; then CORETYPE=Cooperlake
      elif [[ " $flags " == *" avx512f "* ]]; then CORETYPE=SkylakeX
      elif [[ " $flags " == *" avx2 "* ]]; then CORETYPE=Haswell
      fi
      [[ "$CORETYPE" != none ]] && echo "-- Debian's OpenBLAS does not know this CPU (core Prescott," \
        "SSE3 kernels); OPENBLAS_CORETYPE=$CORETYPE for the debian-1.13 peer"
    fi
  fi
  [[ "$CORETYPE" != none ]] && TORCH_ENV+=("OPENBLAS_CORETYPE=$CORETYPE")
fi

HAVE_VENV=0
if want pypi-eager || want pypi-compile; then
  if [[ "${SKIP_PYPI_TORCH:-0}" == 1 ]]; then
    echo "-- SKIP_PYPI_TORCH=1: skipping the PyPI torch peers (pypi-eager, pypi-compile)"
  elif [[ -x "$VPY" ]] && "$VPY" -c "import torch" 2>/dev/null; then
    HAVE_VENV=1
  else
    echo "-- no PyPI torch in $TORCH_VENV: bench/torch_venv.sh makes it (~2.7 GB download, minutes)"
    if STRATA_TORCH_VENV="$TORCH_VENV" bash bench/torch_venv.sh > "$LOGDIR/venv.log" 2>&1; then
      tail -n 2 "$LOGDIR/venv.log"
      HAVE_VENV=1
    else
      echo "bench/torch_venv.sh failed; skipping the PyPI torch peers; its output ends with:"
      tail -n 8 "$LOGDIR/venv.log"
    fi
  fi
fi

# 1. torch GEMM peaks, one per torch build
if want debian-1.13; then
  echo "-- torch f32 GEMM peak, Debian's torch (bench/gemm_peak.py)"
  "${TORCH_ENV[@]}" "$PY" bench/gemm_peak.py --threads "$THREADS" --min-time 0.5 > "$LOGDIR/gemm-debian.json"
  cat "$LOGDIR/gemm-debian.json"
fi
if (( HAVE_VENV )); then
  echo "-- torch f32 GEMM peak, PyPI torch (bench/gemm_peak.py)"
  "${VENV_ENV[@]}" "$VPY" bench/gemm_peak.py --threads "$THREADS" --min-time 0.5 > "$LOGDIR/gemm-pypi.json"
  cat "$LOGDIR/gemm-pypi.json"
fi

# 2. strata GEMM peak
STRATA_PEAK=""
if [[ -n "${STRATA_GEMM_PEAK:-}" ]]; then
  [[ "$STRATA_GEMM_PEAK" != skip ]] && STRATA_PEAK=$STRATA_GEMM_PEAK
elif [[ -x "$STRATA_BENCH_GEMM" ]]; then
  echo "-- strata f32 GEMM peak ($STRATA_BENCH_GEMM)"
  if OMP_NUM_THREADS=$THREADS "$STRATA_BENCH_GEMM" > "$LOGDIR/bench_gemm.txt" 2>&1; then
    STRATA_PEAK=$(sed -n 's/^f32 GEMM peak: *\([0-9.][0-9.]*\).*/\1/p' "$LOGDIR/bench_gemm.txt" | tail -n1)
    grep '^f32 GEMM peak' "$LOGDIR/bench_gemm.txt" || echo "(no 'f32 GEMM peak' line in its output)"
  else
    echo "$STRATA_BENCH_GEMM failed; its output ends with:"; tail -n 5 "$LOGDIR/bench_gemm.txt"
  fi
fi

# 3. strata
STRATA_TPS=""
STRATA_RC=0
RUN_DIR="$WORK/strata-bench"
if [[ ! -x "$STRATA_BIN" ]]; then
  echo "-- strata: $STRATA_BIN not found (build it: cmake --build build --target strata);" \
       "skipping the strata side"
  STRATA_RC=3
elif [[ ! -f "configs/$NAME.toml" ]]; then
  echo "-- strata: configs/$NAME.toml not found; skipping the strata side"
  STRATA_RC=3
else
  echo "-- strata train configs/$NAME.toml ($STRATA_BIN)"
  rm -rf "$RUN_DIR"
  if OMP_NUM_THREADS=$THREADS GLIBC_TUNABLES=glibc.malloc.hugetlb=1 "$STRATA_BIN" train \
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

# 4. The PyTorch peers, one after the other
PEERS_RAN=()
run_peer() {  # NAME LABEL -- command...
  local name=$1 label=$2
  shift 3
  echo "-- $name: $label (bench/torch_train.py ${TORCH_ARGS[*]})"
  if "$@" > "$LOGDIR/peer-$name.json" 2> "$LOGDIR/peer-$name.err"; then
    grep -h '^compile mode:' "$LOGDIR/peer-$name.err" || true
    PEERS_RAN+=("$name")
  else
    echo "$name failed; its output ends with:"; tail -n 8 "$LOGDIR/peer-$name.err"
  fi
}
COMMON=("${TORCH_ARGS[@]}" --steps "$STEPS" --threads "$THREADS" --precision "$PRECISION")
if want debian-1.13; then
  run_peer debian-1.13 "Debian's torch, eager" -- "${TORCH_ENV[@]}" "$PY" bench/torch_train.py \
    "${COMMON[@]}" --warmup-steps "$WARMUP" --mode eager
fi
if (( HAVE_VENV )) && want pypi-eager; then
  run_peer pypi-eager "PyPI torch, eager, SDPA, fused AdamW" -- "${VENV_ENV[@]}" "$VPY" \
    bench/torch_train.py "${COMMON[@]}" --warmup-steps "$WARMUP" --mode eager
fi
if (( HAVE_VENV )) && want pypi-compile; then
  run_peer pypi-compile "PyPI torch, torch.compile" -- "${VENV_ENV[@]}" "$VPY" \
    bench/torch_train.py "${COMMON[@]}" --warmup-steps "$COMPILE_WARMUP" --mode compile
fi
if (( ${#PEERS_RAN[@]} == 0 )); then
  echo "no PyTorch peer ran"
  exit 1
fi

# Summary
"$PY" - "$LOGDIR" "${STRATA_TPS:-}" "${STRATA_PEAK:-}" "$NAME" "$PRECISION" "${PEERS_RAN[@]}" <<'EOF'
import json, os, sys
logdir, strata_tps, strata_peak, name, precision = sys.argv[1:6]
peers = sys.argv[6:]
strata_tps = float(strata_tps) if strata_tps else None
strata_peak = float(strata_peak) if strata_peak else None

def last_json(path):
    try:
        return json.loads(open(path).read().strip().splitlines()[-1])
    except (OSError, ValueError, IndexError):
        return None

recs = {p: last_json(os.path.join(logdir, "peer-%s.json" % p)) for p in peers}
recs = {p: r for p, r in recs.items() if r}
gemm = {b: last_json(os.path.join(logdir, "gemm-%s.json" % b)) for b in ("debian", "pypi")}
build = lambda p: "debian" if p.startswith("debian") else "pypi"
any_rec = next(iter(recs.values()))
fpt = any_rec["flops_per_token"]
tok_per_step = round(any_rec["tokens_per_s"] * any_rec["step_ms"] / 1e3)
print()
print("config %s (%s): N=%.2fM params (no position table), %.1f MFLOP/token, %d tokens/step" % (
    name, precision, any_rec["n_params_no_pos"] / 1e6, fpt / 1e6, tok_per_step))
peaks = {}
for b, label in (("debian", "Debian"), ("pypi", "PyPI")):
    g = gemm[b]
    if not g:
        continue
    peaks[b] = g["gemm_gflops"]
    blas = g.get("blas", {})
    version = next((r["torch"] for p, r in recs.items() if build(p) == b), "?")
    if "openblas_config" in blas:
        lib = "%s, core %s [%s threading]" % (blas["openblas_config"], blas.get("openblas_core", "?"),
                                             blas.get("openblas_parallel", "?"))
    else:
        lib = "MKL (static)" if blas.get("mkl") else ", ".join(blas.get("libraries", [])) or "?"
    if blas.get("mkldnn"):
        lib += ", oneDNN"
    print("torch %s (%s): %s; f32 GEMM peak %.1f GFLOP/s" % (version, label, lib, g["gemm_gflops"]))
if strata_peak:
    print("strata bench_gemm: f32 GEMM peak %.1f GFLOP/s" % strata_peak)
best_torch_peak = max(peaks.values()) if peaks else None
hdr = "%-13s %10s %9s %8s %9s" % ("", "tokens/s", "step ms", "GFLOP/s", "%own-peak")
if best_torch_peak:
    hdr += " %12s" % "%torch-peak"
if strata_peak:
    hdr += " %13s" % "%strata-peak"
print("(%%own-peak: of the f32 GEMM peak of the row's own library; %%torch-peak: of the best torch"
      " f32 GEMM peak%s)" % (", %strata-peak: of bench_gemm's" if strata_peak else ""))
print(hdr)
def row(label, tps, own):
    g = tps * fpt * 1e-9
    s = "%-13s %10.1f %9.1f %8.1f" % (label, tps, tok_per_step / tps * 1e3, g)
    s += (" %8.1f%%" % (100 * g / own)) if own else " %9s" % "n/a"
    if best_torch_peak:
        s += " %11.1f%%" % (100 * g / best_torch_peak)
    if strata_peak:
        s += " %12.1f%%" % (100 * g / strata_peak)
    print(s)
if strata_tps:
    row("strata", strata_tps, strata_peak)
else:
    print("%-13s %10s" % ("strata", "n/a"))
for p, r in recs.items():
    row(p, r["tokens_per_s"], peaks.get(build(p)))
print()
for p, r in recs.items():
    how = "torch %s, %s, attention %s, AdamW %s%s" % (
        r["torch"], r.get("mode", "eager"), r.get("attn", "?"), r.get("optimizer", "?"),
        "" if r.get("mode_requested", "eager") == r.get("mode", "eager")
        else " (compile fell back: %s)" % r.get("compile_fallback"))
    print("peer %-13s %10.1f tok/s; strata / %s = %s   [%s]" % (
        p, r["tokens_per_s"], p,
        "%.2fx" % (strata_tps / r["tokens_per_s"]) if strata_tps else "n/a", how))
# A peer whose losses are not those of the others (the same model, seed and data: every sound peer
# starts at the same loss) or not finite trained something else: its speed is shown, never the best.
import math, statistics
firsts = [r["loss_first"] for r in recs.values() if isinstance(r.get("loss_first"), float)]
ref_first = statistics.median(firsts) if firsts else None
def sound(r):
    lf, ll = r.get("loss_first"), r.get("loss_last")
    if not isinstance(lf, float) or not isinstance(ll, float) or not math.isfinite(ll):
        return False
    return ref_first is None or abs(lf - ref_first) <= 1e-3 * abs(ref_first)
for p, r in recs.items():
    if not sound(r):
        print("peer %s is left out of the best: losses %s -> %s, the others start at %s" % (
            p, r.get("loss_first"), r.get("loss_last"), ref_first))
valid = [p for p in recs if sound(recs[p])] or list(recs)
best = max(valid, key=lambda p: recs[p]["tokens_per_s"])
print("best peer: %s %.1f tok/s; strata / best = %s" % (
    best, recs[best]["tokens_per_s"],
    "%.2fx" % (strata_tps / recs[best]["tokens_per_s"]) if strata_tps else "n/a"))
keys = ("tokens_per_s", "step_ms", "steps_timed", "step_ms_min", "first_step_ms", "loss_first",
        "loss_last", "mode", "attn", "optimizer", "torch")
for p, r in recs.items():
    print("%s: %s" % (p, json.dumps({k: r[k] for k in keys if k in r})))
EOF
exit "$STRATA_RC"
