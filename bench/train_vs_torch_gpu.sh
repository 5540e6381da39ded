#!/usr/bin/env bash
# Training throughput on one GPU, strata vs PyTorch: GPT-2 124M (configs/gpt2-124m.toml: vocab
# 50304, 12 layers, d_model 768), T=1024, the same micro-batch, bf16, synthetic tokens.
#
#   bench/train_vs_torch_gpu.sh [STEPS]              # default 30 steps, micro-batch 16
#   BATCH=32 bench/train_vs_torch_gpu.sh 40
#   STRATA_METRICS=run/metrics.jsonl bench/...      # reuse a finished strata cuda run of the same
#                                                   # shapes (gpu_verify.sh's train_gpu) instead of
#                                                   # running strata again
# Environment: STRATA (the CLI; default ./build-gpu/strata, else ./build/strata), PY (a python3
# with torch and CUDA; default: python3, else /opt/torch/.venv/bin/python3), COMPILE=off (no
# torch.compile), RUN_DIR (strata's run folder; default under /dev/shm), WARMUP (steps left out of
# both averages; default 5), STRATA_BASE_LD_LIBRARY_PATH (the loader path PyTorch runs with; set
# by scripts/gpu_verify.sh so that torch never sees the carried Debian libraries).
#
# Runs, one after the other:
#   1. bench/torch_train_gpu.py: measures the bf16 matmul rate (8192^3, median of CUDA-event
#      timings) and trains the PyTorch peer at its best (autocast bf16, SDPA, fused AdamW, TF32,
#      torch.compile when it works)
#   2. strata train configs/gpt2-124m.toml --set system.device=cuda, bf16, flash attention
# and prints tokens/s of each (mean step time over the steps after WARMUP), the ratio
# strata/PyTorch, and the MFU of each against the measured matmul rate, with FLOPs/token =
# 6N + 12*L*C*T (N without the position table), then PASS/FAIL against the targets (strata
# faster than PyTorch; strata MFU >= 45%). The targets are results, not this script's status.
# Exit status: 0 when both sides ran; 3 when the strata side could not run (PyTorch still
# reported); 4 when there is no CUDA device (torch_train_gpu.py says so); 1 on other errors.
set -uo pipefail

STEPS=${1:-30}
BATCH=${BATCH:-16}
SEQ=1024
WARMUP=${WARMUP:-5}
COMPILE=${COMPILE:-auto}
cd "$(dirname "$0")/.." || exit 1
if ! [[ "$STEPS" =~ ^[0-9]+$ ]] || (( STEPS <= WARMUP )); then
  echo "STEPS must be an integer > WARMUP ($WARMUP), got '$STEPS'" >&2
  exit 1
fi

# Python with torch: PyTorch must not load the carried libraries (LD_LIBRARY_PATH of the deps).
TORCH_LD=${STRATA_BASE_LD_LIBRARY_PATH-${LD_LIBRARY_PATH-}}
py_env() { env LD_LIBRARY_PATH="$TORCH_LD" "$@"; }
if [[ -z "${PY:-}" ]]; then
  for p in python3 /opt/torch/.venv/bin/python3 /usr/bin/python3; do
    if command -v "$p" >/dev/null && py_env "$p" -c 'import torch' 2>/dev/null; then PY=$p; break; fi
  done
fi
if [[ -z "${PY:-}" ]]; then
  echo "no python3 with torch found (tried python3, /opt/torch/.venv/bin/python3, /usr/bin/python3)" >&2
  exit 1
fi
if [[ -z "${STRATA:-}" ]]; then
  STRATA=./build-gpu/strata
  [[ -x $STRATA ]] || STRATA=./build/strata
fi
WORK=$(mktemp -d "${TMPDIR:-/tmp}/train_vs_torch_gpu.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
if [[ -z "${RUN_DIR:-}" ]]; then
  if [[ -d /dev/shm && -w /dev/shm ]]; then RUN_DIR=/dev/shm/strata-bench-gpu; else RUN_DIR=$WORK/run; fi
fi

echo "== GPT-2 124M on the GPU: T=$SEQ, micro-batch $BATCH, $STEPS steps (averages after $WARMUP), bf16"

# 1. PyTorch (and the matmul rate)
echo "-- PyTorch: $PY bench/torch_train_gpu.py (compile: $COMPILE)"
py_env "$PY" bench/torch_train_gpu.py --batch "$BATCH" --seq-len "$SEQ" --steps "$STEPS" \
  --warmup-steps "$WARMUP" --compile "$COMPILE" > "$WORK/torch.json" 2> "$WORK/torch.err"
torch_rc=$?
tail -n 5 "$WORK/torch.err"
cat "$WORK/torch.json"
if (( torch_rc == 4 )); then
  echo "no CUDA device: nothing to compare"
  exit 4
elif (( torch_rc != 0 )); then
  echo "PyTorch side failed (exit $torch_rc)"
fi

# 2. strata
strata_rc=0
METRICS=${STRATA_METRICS:-}
if [[ -n "$METRICS" ]]; then
  echo "-- strata: reusing $METRICS"
  [[ -f "$METRICS" ]] || { echo "strata: $METRICS not found"; strata_rc=3; }
elif [[ ! -x "$STRATA" ]]; then
  echo "-- strata: $STRATA not found (build the strata_cli target); skipping the strata side"
  strata_rc=3
else
  echo "-- strata: $STRATA train configs/gpt2-124m.toml --set system.device=cuda"
  rm -rf "$RUN_DIR"
  if "$STRATA" train configs/gpt2-124m.toml --set system.device=cuda --set train.precision=bf16 \
      --set model.attention=flash --set "train.seq_len=$SEQ" --set "train.batch_size=$BATCH" \
      --set "train.steps=$STEPS" --set data.source=synthetic --set "run.dir=$RUN_DIR" \
      --set run.resume=none --set train.log_every=1 --set train.eval_every=0 \
      --set train.eval_batches=1 > "$WORK/strata.log" 2>&1; then
    METRICS=$RUN_DIR/metrics.jsonl
  else
    echo "strata failed; its output ends with:"; tail -n 15 "$WORK/strata.log"
    strata_rc=3
  fi
fi

# 3. Summary
py_env "$PY" - "$WORK/torch.json" "${METRICS:-}" "$WARMUP" "$BATCH" "$SEQ" <<'EOF'
import json, sys
torch_path, metrics, warmup, batch, seq = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
try:
    t = json.loads(open(torch_path).read().strip().splitlines()[-1])
except (OSError, ValueError, IndexError):
    t = {}
if "tokens_per_s" not in t:
    t = None
s_tps = s_steps = s_mfu_own = None
if metrics:
    recs = []
    try:
        for line in open(metrics):
            line = line.strip()
            if line:
                r = json.loads(line)
                if "step_ms" in r and "tokens_per_s" in r:
                    recs.append(r)
    except (OSError, ValueError) as e:
        print("cannot read %s: %s" % (metrics, e))
    timed = recs[warmup:] or recs[-1:]
    if timed:
        tokens = timed[-1]["tokens_per_s"] * timed[-1]["step_ms"] / 1e3
        if abs(tokens - batch * seq) > 0.5:
            print("note: the strata run has %.0f tokens a step, this comparison %d" % (tokens, batch * seq))
        s_tps = tokens / (sum(r["step_ms"] for r in timed) / len(timed) / 1e3)
        s_steps = len(timed)
        s_mfu_own = timed[-1].get("mfu")
# FLOPs per token: 6N + 12*L*C*T, N without the position table (GPT-2 124M, vocab 50304).
L, C, V, P = 12, 768, 50304, 1024
n_nopos = V * C + L * (4 * C + 3 * C * C + 3 * C + C * C + C + 4 * C * C + 4 * C + 4 * C * C + C) + 2 * C
fpt = 6 * n_nopos + 12 * L * C * seq
if t and t.get("flops_per_token") and t["flops_per_token"] != fpt:
    print("note: PyTorch counts %d FLOPs/token, this summary %d" % (t["flops_per_token"], fpt))
mm = (t or {}).get("mm") or {}
peak = mm.get("tflops_median")
print()
print("GPT-2 124M: N = %.2fM parameters without the position table, %.1f MFLOP/token "
      "(6N + 12*L*C*T, T=%d), micro-batch %d" % (n_nopos / 1e6, fpt / 1e6, seq, batch))
if peak:
    print("measured bf16 matmul: %.1f TFLOP/s (%dx%dx%d, median of %d, CUDA events; best %.1f)"
          % (peak, mm["size"], mm["size"], mm["size"], mm["iters"], mm["tflops_best"]))
else:
    print("measured bf16 matmul: n/a (PyTorch side did not run)")
print("%-8s %12s %10s %9s %8s  %s" % ("", "tokens/s", "step ms", "TFLOP/s", "MFU", "notes"))
def row(name, tps, note):
    tf = tps * fpt / 1e12
    mfu = "%.1f%%" % (100 * tf / peak) if peak else "n/a"
    print("%-8s %12.0f %10.1f %9.1f %8s  %s" % (name, tps, batch * seq / tps * 1e3, tf, mfu, note))
if s_tps:
    row("strata", s_tps, "%d steps timed%s" % (s_steps, "" if s_mfu_own is None else
                                              ", strata's own mfu %.3f" % s_mfu_own))
else:
    print("%-8s %12s" % ("strata", "n/a"))
if t:
    row("pytorch", t["tokens_per_s"], "%s, %s, compile %s s" % (t.get("compile"), t.get("optimizer"),
                                                                 t.get("compile_s")))
else:
    print("%-8s %12s" % ("pytorch", "n/a"))
if s_tps and t:
    ratio = s_tps / t["tokens_per_s"]
    print("strata / pytorch = %.2fx" % ratio)
    print("target strata faster than PyTorch: %s" % ("PASS" if ratio > 1 else "FAIL"))
if s_tps and peak:
    mfu = s_tps * fpt / 1e12 / peak
    print("target strata MFU >= 45%%: %s (%.1f%%)" % ("PASS" if mfu >= 0.45 else "FAIL", 100 * mfu))
print("RESULT " + json.dumps({"strata_tokens_per_s": round(s_tps, 1) if s_tps else None,
                              "pytorch_tokens_per_s": t["tokens_per_s"] if t else None,
                              "mm_tflops": peak, "flops_per_token": fpt, "batch": batch}))
EOF
if (( torch_rc != 0 )); then exit 1; fi
exit "$strata_rc"
