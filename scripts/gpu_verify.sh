#!/usr/bin/env bash
# The GPU checks, in one run on a fresh GPU machine (one H200 today, no network, no package
# access; ~10 minutes of device time in all, so it builds only what it runs). From the
# repository root (or anywhere: it cd's there):
#
#   bash scripts/gpu_verify.sh            # results in ./gpu-out
#   OUT=/some/dir bash scripts/gpu_verify.sh
#
# Before the device call, on the development machine: `bash scripts/gpu_carry.sh` puts the
# Debian 12 .debs of the libraries the GPU machine lacks into .gpu-carry/ (git-ignored), which
# travels as the device tool's `carry` (docs/GPU.md, "Running the GPU checks").
#
# Steps (each time-boxed, and all of them inside BUDGET_S, default 560 s, so that the device
# tool's 600 s limit never cuts the summary; a failing step does not stop the ones after it).
# The most important results come first: the build, then the training runs (the numbers this
# machine is borrowed for), then the test suites and the micro-benchmark.
#   deps          cmake, ninja and a C++ compiler must be there. Libraries (oneDNN, GTest,
#                 nlohmann_json, toml++, CLI11, SQLite3, Open MPI, pkg-config): the system's when
#                 it has them all; else the carried .debs, `dpkg -x`ed into DEPS_PREFIX
#                 (/tmp/strata-deps, never /) and used from there (scripts/gpu_deps.sh); else
#                 scripts/install_deps.sh (apt: only where there is package access). NCCL and
#                 cuBLASLt: the CUDA toolkit's, else the pip wheels' (nvidia-nccl-cu13,
#                 nvidia-cublas). Where each came from -> deps.txt, deps_origin.txt
#   configure     build-gpu/ (Release, STRATA_CUDA=ON); fails if CMake did not find nvcc
#   build         only strata_test_cuda, strata_test_nccl, nccl_hang, bench_cuda (when it is a
#                 target) and the strata CLI, with all cores
#   gpu_info      nvidia-smi, nvcc, NCCL and torch versions    -> gpu_info.txt
#   train_gpu     strata train, GPT-2 124M, bf16, flash attention, T=1024, synthetic data, on
#                 cuda: the largest micro-batch of PROBE_BATCHES (32 16 8 4 2 1) that runs 2
#                 steps, then TRAIN_STEPS (30) steps -> $OUT/train_gpu_metrics.jsonl; then
#                 CMP_STEPS (4) steps at micro-batch CMP_BATCH (1) on cuda and on the CPU (all
#                 cores), same seed: per-step losses must agree within LOSS_TOL (0.02 nats:
#                 bf16 accumulation-order noise is ~1e-3; a run whose updates do nothing is
#                 0.027 and 0.058 off at steps 3 and 4, measured on the CPU; docs/GPU.md)
#   torch_vs_gpu  bench/train_vs_torch_gpu.sh: PyTorch at its best on the same GPU, same model,
#                 same micro-batch, against the train_gpu run; tokens/s, ratio, MFU of each
#                 against the bf16 matmul rate measured in that run; "ok" when both sides ran
#   cuda_tests    strata_test_cuda, every test; any skip fails  -> gpu_tests.txt
#   offload_gpu   OFFLOAD_STEPS (8) steps of the same model without offload, with
#                 optim.offload = "cpu" and with train.activation_offload: tokens/s and the
#                 device arena per category of each (the saving and the slowdown)
#   groups_gpu    strata train under mpirun -np 1 on cuda, ZeRO-3: the process groups routed
#                 through NCCL (DeviceHostComm), host scalars over MPI
#   nccl_np1      strata_test_nccl under mpirun -np 1; any skip fails -> nccl_np1.txt
#   nccl_np2      the same with -np 2, only with >= 2 GPUs      -> nccl_np2.txt
#   nccl_timeout  a held all_reduce must end the rank with exit 124 and the one-line error
#   bench_cuda    the CUDA micro-benchmark (GEMM, flash attention) -> bench_cuda.txt
#   attention_vs_torch  PyTorch SDPA backends (FlashAttention-2, cuDNN, memory-efficient) on
#                 bench_cuda's attention shapes (skipped without torch) -> attention_vs_torch.txt
# What comes back: the device tool returns at most 8 files from $OUT, so $OUT holds only
#   summary.txt               the table (step, status, seconds) and the key numbers
#   results.txt               the train_gpu and torch_vs_gpu tables
#   train_gpu_metrics.jsonl   the 30-step strata run's metrics (one line a step)
#   torch_gpu.json            the PyTorch peer's JSON line (tokens/s, matmul rate, ...)
#   logs.tar.gz               every step's log (the names above), re-packed after each step
# The exit status is 1 when any step failed or timed out, else 0.
set -uo pipefail  # not -e: every step runs and is reported, whatever happened before it

cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-./gpu-out}
mkdir -p "$OUT" || exit 1
OUT=$(cd "$OUT" && pwd)
LOGS=$(mktemp -d "${TMPDIR:-/tmp}/gpu-verify.XXXXXX") || exit 1
BUILD=${BUILD:-build-gpu}
JOBS=$(nproc)
BUDGET_S=${BUDGET_S:-560}
T0=$SECONDS
# STEPS: the steps to run after the build (default: all), e.g. a second call on the still-warm
# machine for what the first one's budget cut: STEPS="nccl bench_cuda attention_vs_torch".
STEPS=${STEPS:-train_gpu torch_vs_gpu cuda_tests offload_gpu groups_gpu nccl bench_cuda attention_vs_torch}
want() { [[ " $STEPS " == *" $1 "* ]]; }
# What to build (those that are targets); overridable to try the script on a small build.
TARGETS=${TARGETS:-strata_test_cuda strata_test_nccl nccl_hang bench_cuda strata_cli}
# The benchmark's short mode by default (the device time is counted); BENCH_CUDA_ARGS= runs it full.
BENCH_CUDA_ARGS=${BENCH_CUDA_ARGS---quick}
DEPS_PREFIX=${DEPS_PREFIX:-/tmp/strata-deps}
CARRY_DEBS=${CARRY_DEBS:-.gpu-carry/debs}
PROBE_BATCHES=${PROBE_BATCHES:-32 16 8 4 2 1}
TRAIN_STEPS=${TRAIN_STEPS:-30}
CMP_BATCH=${CMP_BATCH:-1}
CMP_STEPS=${CMP_STEPS:-4}
OFFLOAD_STEPS=${OFFLOAD_STEPS:-8}
LOSS_TOL=${LOSS_TOL:-0.02}
MPIRUN=(mpirun --allow-run-as-root --oversubscribe --bind-to none --mca btl 'self,vader')

names=()
statuses=()
seconds=()
failed=0
notes=()   # key numbers for summary.txt

remaining() { echo $((BUDGET_S - (SECONDS - T0))); }

write_summary() {
  {
    printf '%-13s  %-8s  %s\n' step seconds status
    for i in "${!names[@]}"; do
      printf '%-13s  %-8s  %s\n' "${names[$i]}" "${seconds[$i]}" "${statuses[$i]}"
    done
    [ ${#notes[@]} -gt 0 ] && printf '%s\n' "${notes[@]}"
    echo "elapsed: $((SECONDS - T0)) s of the ${BUDGET_S} s budget"
    if [ "$failed" -eq 0 ]; then echo "result: every step that exists passed"; else echo "result: FAILED"; fi
  } > "$OUT/summary.txt"
  # Every log, re-packed after each step: a run cut short still returns what it had.
  tar -czf "$OUT/logs.tar.gz.tmp" -C "$LOGS" . 2>/dev/null && mv -f "$OUT/logs.tar.gz.tmp" "$OUT/logs.tar.gz"
}

record() {  # name status seconds [failure: 1]
  names+=("$1")
  statuses+=("$2")
  seconds+=("$3")
  if [ "${4:-0}" = 1 ]; then failed=1; fi
  printf '%-13s %s (%s s)\n' "$1" "$2" "$3"
  write_summary
}

# run_step_rc NAME LIMIT LOG COMMAND...: runs COMMAND under `timeout` (LIMIT, cut to what is
# left of BUDGET_S), output to LOG; sets $rc, $step_status and $step_seconds.
run_step_rc() {
  local name=$1 limit=$2 log=$3
  shift 3
  local left
  left=$(( $(remaining) - 5 ))
  (( limit > left )) && limit=$left
  if (( limit < 10 )); then
    rc=125 step_seconds=0 step_status="NOT RUN (time budget of ${BUDGET_S} s spent)"
    echo "=== $name: not run, time budget spent"
    echo "not run: time budget of ${BUDGET_S} s spent" > "$log"
    return
  fi
  echo "=== $name (limit ${limit} s, log ${log#"$LOGS"/})"
  local start=$SECONDS
  timeout -k 10 "$limit" "$@" >"$log" 2>&1
  rc=$?
  step_seconds=$((SECONDS - start))
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    step_status="TIMEOUT after ${limit} s"
  elif [ "$rc" -ne 0 ]; then
    step_status="FAILED (exit $rc)"
  else
    step_status="ok"
  fi
  if [ "$rc" -ne 0 ]; then
    echo "--- last lines of ${log#"$LOGS"/}:"
    tail -n 15 "$log"
  fi
}

# Records the step just run; a check after the command may still turn "ok" into a failure.
finish_step() {  # name [extra failure text]
  if [ -n "${2:-}" ] && [ "$step_status" = ok ]; then step_status="FAILED ($2)"; fi
  if [ "$step_status" = ok ]; then
    record "$1" ok "$step_seconds"
  else
    record "$1" "$step_status" "$step_seconds" 1
  fi
}

# gtest prints "[  SKIPPED ] N tests, listed below:" when any test skipped.
skipped_tests() {  # log -> the number of skipped tests (0 when none)
  local n
  n=$(grep -Eo '\[  SKIPPED \] [0-9]+ tests?,' "$1" | grep -Eo '[0-9]+' | tail -n 1)
  echo "${n:-0}"
}

# --- deps
# shellcheck source=scripts/gpu_deps.sh
source scripts/gpu_deps.sh
export STRATA_BASE_LD_LIBRARY_PATH=${LD_LIBRARY_PATH-}  # what python/torch run with
py_base() {  # python3 without the carried libraries on the loader path (any python3: json only)
  env LD_LIBRARY_PATH="$STRATA_BASE_LD_LIBRARY_PATH" PATH="$DEPS_BASE_PATH" python3 "$@"
}
deps_start=$SECONDS
deps_log_file=$LOGS/deps.txt
deps_origin=""
{
  echo "deps: $(sed -n 's/^PRETTY_NAME=//p' /etc/os-release 2>/dev/null | tr -d '"'), glibc $(ldd --version 2>/dev/null | head -n 1 | awk '{print $NF}')"
  for t in cmake ninja c++ g++ nvcc dpkg-deb readelf python3; do
    p=$(command -v "$t") || p=missing
    [ "$t" = nvcc ] && [ "$p" = missing ] && [ -x /usr/local/cuda/bin/nvcc ] && p=/usr/local/cuda/bin/nvcc
    [ "$t" = cmake ] && [ "$p" != missing ] && p="$p ($(cmake --version | head -n 1))"
    echo "deps: $t: $p"
  done
} > "$deps_log_file" 2>&1
# Open MPI refuses root without these (the device machine runs commands as root).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
glibc=$(ldd --version 2>/dev/null | head -n 1 | awk '{print $NF}')
glibc_need=$(cat "${CARRY_DEBS%/debs}/GLIBC_NEEDED" 2>/dev/null)
if [ -n "$glibc" ] && [ -n "$glibc_need" ] &&
   [ "$(printf '%s\n%s\n' "$glibc_need" "$glibc" | sort -V | head -n 1)" != "$glibc_need" ]; then
  echo "deps: WARNING: glibc $glibc is older than the $glibc_need the carried Debian 12 files need" \
    "(some carried libraries will not load)" >> "$deps_log_file"
fi
have_tools() { command -v cmake >/dev/null && command -v ninja >/dev/null &&
               { command -v c++ >/dev/null || command -v g++ >/dev/null; }; }
missing=$(deps_missing)
# DEPS_FORCE_CARRY=1: the carried packages even where the system has everything (tests).
[ "${DEPS_FORCE_CARRY:-0}" = 1 ] && missing="${missing:-(DEPS_FORCE_CARRY=1)}"
echo "deps: the system lacks: ${missing:-nothing}" >> "$deps_log_file"
if have_tools && [ -z "$missing" ]; then
  deps_origin="system"
elif have_tools && compgen -G "$CARRY_DEBS/*.deb" >/dev/null; then
  {
    echo "deps: using the carried packages ($CARRY_DEBS) for: $missing"
    deps_extract "$CARRY_DEBS" "$DEPS_PREFIX" && deps_use_prefix "$DEPS_PREFIX"
  } >> "$deps_log_file" 2>&1 && deps_origin="carried ($DEPS_PREFIX; the system lacked: $missing)"
else
  echo "deps: no carried packages in $CARRY_DEBS: scripts/install_deps.sh (needs package access)" \
    >> "$deps_log_file"
  left=$(( $(remaining) - 300 ))
  (( left > 420 )) && left=420
  if (( left > 30 )); then
    timeout -k 10 "$left" bash scripts/install_deps.sh >> "$deps_log_file" 2>&1
    echo "deps: install_deps.sh exited $?" >> "$deps_log_file"
  fi
  if have_tools && [ -z "$(deps_missing)" ]; then deps_origin="installed (apt)"; fi
fi
deps_cuda_libs /usr/local/cuda >> "$deps_log_file" 2>&1
cat "$deps_log_file"
if [ -n "$deps_origin" ]; then
  record deps "ok ($deps_origin)" $((SECONDS - deps_start))
elif have_tools && compgen -G "$CARRY_DEBS/*.deb" >/dev/null; then
  record deps "FAILED (the carried packages could not be extracted or used: see deps.txt)" \
    $((SECONDS - deps_start)) 1
else
  echo "ERROR: the build tools or libraries are missing (${missing:-?}), there is no .gpu-carry/" \
       "(scripts/gpu_carry.sh on the development machine) and scripts/install_deps.sh could not" \
       "install them (no package access?). See deps.txt."
  record deps "FAILED (missing: ${missing:-build tools}; no carry, no package access?)" \
    $((SECONDS - deps_start)) 1
fi

# --- configure (afresh when the dependencies come from elsewhere than last time: the cache
# would keep the old paths)
if [ -f "$BUILD/CMakeCache.txt" ] && [ "$(cat "$BUILD/.strata-deps" 2>/dev/null)" != "$deps_origin" ]; then
  echo "configure: dependencies now from '$deps_origin': a fresh CMakeCache.txt"
  rm -f "$BUILD/CMakeCache.txt"
fi
mkdir -p "$BUILD" && echo "$deps_origin" > "$BUILD/.strata-deps"
run_step_rc configure 180 "$LOGS/configure.txt" \
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSTRATA_CUDA=ON "${DEPS_CMAKE_ARGS[@]}"
cuda_found=""
grep -q 'CUDA backend: nvcc' "$LOGS/configure.txt" 2>/dev/null && cuda_found=1
deps_report "$BUILD" > "$LOGS/deps_origin.txt" 2>&1 && cat "$LOGS/deps_origin.txt"
finish_step configure "$([ -z "$cuda_found" ] && echo 'CMake did not find nvcc: no CUDA backend')"

# --- build: only the targets this script runs
targets=()
all_targets=$(ninja -C "$BUILD" -t targets all 2>/dev/null | cut -d: -f1)
for t in $TARGETS; do
  grep -qx "$t" <<<"$all_targets" && targets+=("$t")
done
if [ ${#targets[@]} -eq 0 ]; then
  record build "FAILED (no targets: configure failed?)" 0 1
else
  echo "building: ${targets[*]} with $JOBS jobs"
  run_step_rc build 480 "$LOGS/build.txt" ninja -C "$BUILD" -j"$JOBS" "${targets[@]}"
  finish_step build
fi
has_target() { grep -qx "$1" <<<"$all_targets"; }
binary() {  # target -> its executable under $BUILD (first match)
  find "$BUILD" -maxdepth 4 -type f -name "$1" -perm -u+x 2>/dev/null | head -n 1
}

# --- gpu_info
nccl_h=$(sed -n 's/^NCCL_INCLUDE:[A-Z]*=//p' "$BUILD/CMakeCache.txt" 2>/dev/null)
nvcc_bin=$(sed -n 's/^CMAKE_CUDA_COMPILER:[A-Z]*=//p' "$BUILD/CMakeCache.txt" 2>/dev/null)
# shellcheck disable=SC2016  # expanded by the bash -c below, not here
gpu_info_commands='
nvidia-smi -L
nvidia-smi --format=csv --query-gpu=name,driver_version,memory.total,memory.used,temperature.gpu,power.draw,power.limit,clocks.sm,clocks.max.sm,compute_mode,mig.mode.current
nvidia-smi topo -m
"${NVCC:-/usr/local/cuda/bin/nvcc}" --version | tail -n 2
grep -E "#define NCCL_(MAJOR|MINOR|PATCH) " "${NCCL_H:-/usr/local/cuda/include}/nccl.h"
env LD_LIBRARY_PATH="$STRATA_BASE_LD_LIBRARY_PATH" python3 -c "import sys, torch; print(\"python\", sys.version.split()[0], sys.executable, \"torch\", torch.__version__, \"cuda\", torch.version.cuda, \"available\", torch.cuda.is_available())"
echo "cores: $(nproc)  memory: $(free -g 2>/dev/null | awk "/^Mem:/ {print \$2}") GiB  commit: $(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)"
'
run_step_rc gpu_info 60 "$LOGS/gpu_info.txt" env NCCL_H="$nccl_h" NVCC="$nvcc_bin" bash -c "$gpu_info_commands"
head -n 3 "$LOGS/gpu_info.txt"
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
finish_step gpu_info "$([ "${gpus:-0}" -eq 0 ] && echo 'nvidia-smi lists no GPU')"

STRATA=${STRATA:-$BUILD/strata}
if [ -d /dev/shm ] && [ -w /dev/shm ]; then RUNS=/dev/shm/strata-gpu-verify; else RUNS=$LOGS/runs; fi
rm -rf "$RUNS"; mkdir -p "$RUNS" "$LOGS/train_gpu"
touch "$OUT/results.txt"
micro_batch="" train_main="" train_status=""  # set by train_gpu, read by later steps

# The GPT-2 124M runs of train_gpu and offload_gpu.
oom_re='out of memory|cudaErrorMemoryAllocation|CUDA_ERROR_OUT_OF_MEMORY|memory limit|OOM'
# strata_train NAME LIMIT DEVICE BATCH STEPS [--set KEY=VALUE ...]: GPT-2 124M, bf16, flash,
# T=1024, synthetic data; log in train_gpu/NAME.log, metrics in $RUNS/NAME/metrics.jsonl. Sets rc
# (as run_step_rc).
strata_train() {
  local name=$1 limit=$2 device=$3 batch=$4 steps=$5 threads=() envs=()
  local extra=("${@:6}")
  [ "$device" = cpu ] && threads=(--set "system.threads=$JOBS") envs=("OMP_NUM_THREADS=$JOBS")
  rm -rf "${RUNS:?}/$name"
  run_step_rc "train_gpu/$name" "$limit" "$LOGS/train_gpu/$name.log" env "${envs[@]}" \
    "$STRATA" train configs/gpt2-124m.toml --set "system.device=$device" \
    --set train.precision=bf16 --set model.attention=flash --set train.seq_len=1024 \
    --set "train.batch_size=$batch" --set "train.steps=$steps" --set data.source=synthetic \
    --set "run.dir=$RUNS/$name" --set run.resume=none --set train.log_every=1 \
    --set train.eval_every=0 --set train.eval_batches=1 "${threads[@]}" "${extra[@]}"
  if [ -f "$RUNS/$name/metrics.jsonl" ]; then cp "$RUNS/$name/metrics.jsonl" "$LOGS/train_gpu/$name.metrics.jsonl"; fi
}
metrics_lines() { local n=0; [ -f "$1" ] && n=$(grep -c '"loss"' "$1"); echo "${n:-0}"; }

if want train_gpu; then
# --- train_gpu: strata train on the cuda device
train_start=$SECONDS
train_main=""    # metrics of the main run
micro_batch=""
train_status=""
train_fail=0
if [ ! -x "$STRATA" ]; then
  train_status="FAILED (the strata CLI was not built)"; train_fail=1
else
  for b in $PROBE_BATCHES; do
    strata_train "probe_b$b" 90 cuda "$b" 2
    if [ "$rc" -eq 0 ] && [ "$(metrics_lines "$RUNS/probe_b$b/metrics.jsonl")" -ge 2 ]; then
      micro_batch=$b; break
    fi
    log=$LOGS/train_gpu/probe_b$b.log
    if grep -q "unknown key 'system.device'" "$log"; then
      train_status="not built yet: strata train has no system.device (the trainer is not device-aware)"
      break
    elif ! grep -Eqi "$oom_re" "$log"; then
      train_status="FAILED (probe at micro-batch $b: $step_status, not out of memory; see train_gpu/probe_b$b.log)"
      train_fail=1; break
    fi
    echo "micro-batch $b does not fit; trying a smaller one"
  done
  rm -rf "$RUNS"/probe_b*
  if [ -n "$micro_batch" ]; then
    echo "micro-batch: $micro_batch (the largest of $PROBE_BATCHES that ran)"
    strata_train main 180 cuda "$micro_batch" "$TRAIN_STEPS"
    if [ "$rc" -eq 0 ] && [ -f "$RUNS/main/metrics.jsonl" ]; then
      train_main=$LOGS/train_gpu/main.metrics.jsonl
      cp "$train_main" "$OUT/train_gpu_metrics.jsonl"
    else
      train_status="FAILED (the $TRAIN_STEPS-step run at micro-batch $micro_batch: $step_status)"; train_fail=1
    fi
    # The same model and seed on cuda and on the CPU, CMP_STEPS steps at micro-batch CMP_BATCH.
    strata_train cmp_cuda 90 cuda "$CMP_BATCH" "$CMP_STEPS"
    strata_train cmp_cpu 150 cpu "$CMP_BATCH" "$CMP_STEPS"
    py_base - "$train_main" "$LOGS/train_gpu/cmp_cuda.metrics.jsonl" \
      "$LOGS/train_gpu/cmp_cpu.metrics.jsonl" "$LOSS_TOL" "$micro_batch" "$CMP_BATCH" \
      > "$LOGS/train_gpu.txt" 2>&1 <<'EOF'
import json, statistics, sys
main, gpu, cpu, tol, mb, cb = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), sys.argv[5], sys.argv[6]
def load(p):
    out = {}
    try:
        for line in open(p):
            line = line.strip()
            if line:
                r = json.loads(line)
                if "loss" in r and "step" in r:
                    out[r["step"]] = r
    except (OSError, ValueError):
        pass
    return out
m = load(main) if main else {}
if m:
    recs = [m[k] for k in sorted(m)]
    timed = recs[5:] or recs[-1:]
    tokens = timed[-1]["tokens_per_s"] * timed[-1]["step_ms"] / 1e3
    tps = tokens / (statistics.mean(r["step_ms"] for r in timed) / 1e3)
    mem = recs[-1].get("mem", {}).get("total")
    print("strata on cuda, GPT-2 124M, bf16, flash, T=1024, micro-batch %s: %d steps" % (mb, len(recs)))
    print("  tokens/s %.0f (mean step %.1f ms over steps %d..%d), median step %.1f ms, strata's mfu %.3f"
          % (tps, statistics.mean(r["step_ms"] for r in timed), timed[0]["step"], timed[-1]["step"],
             statistics.median(r["step_ms"] for r in timed), timed[-1].get("mfu", float("nan"))))
    print("  loss %.4f -> %.4f%s" % (recs[0]["loss"], recs[-1]["loss"],
          "" if mem is None else ", arena %.2f GiB" % (mem / 2 ** 30)))
    print("NOTE train_gpu: micro-batch %s, %.0f tokens/s" % (mb, tps))
g, c = load(gpu), load(cpu)
common = sorted(set(g) & set(c))
print()
print("cuda vs cpu, same seed, micro-batch %s, T=1024, bf16, flash (tolerance %.3f nats):" % (cb, tol))
print("%5s %10s %10s %9s" % ("step", "loss cpu", "loss cuda", "|diff|"))
worst = 0.0
for s in common:
    d = abs(g[s]["loss"] - c[s]["loss"])
    worst = max(worst, d)
    print("%5d %10.5f %10.5f %9.5f" % (s, c[s]["loss"], g[s]["loss"], d))
if len(common) < 2:
    print("FAIL: only %d common steps (cuda %d, cpu %d)" % (len(common), len(g), len(c)))
    print("NOTE loss_cmp: FAILED (%d common steps)" % len(common))
    sys.exit(2)
ok = worst <= tol
print("max |loss cuda - loss cpu| = %.5f over %d steps: %s" % (worst, len(common), "PASS" if ok else "FAIL"))
print("NOTE loss_cmp: max |diff| %.5f nats over %d steps (tolerance %.3f): %s" % (worst, len(common), tol, "PASS" if ok else "FAIL"))
sys.exit(0 if ok else 1)
EOF
    cmp_rc=$?
    cat "$LOGS/train_gpu.txt"
    if [ -z "$train_status" ]; then
      case $cmp_rc in
        0) train_status="ok" ;;
        1) train_status="FAILED (cuda and cpu losses differ by more than $LOSS_TOL nats)"; train_fail=1 ;;
        *) train_status="FAILED (the cuda/cpu comparison runs did not both finish)"; train_fail=1 ;;
      esac
    fi
  elif [ -z "$train_status" ]; then
    train_status="FAILED (no micro-batch of $PROBE_BATCHES fits)"; train_fail=1
  fi
fi
while IFS= read -r line; do notes+=("${line#NOTE }"); done < <(grep '^NOTE ' "$LOGS/train_gpu.txt" 2>/dev/null)
{ cat "$LOGS/train_gpu.txt" 2>/dev/null; echo; } > "$OUT/results.txt"
record train_gpu "$train_status" $((SECONDS - train_start)) "$train_fail"
rm -rf "$RUNS"/cmp_* 

fi

if want torch_vs_gpu; then
# --- torch_vs_gpu: PyTorch on the same GPU, same model and micro-batch, against the main run
bench_env=(env "BATCH=${micro_batch:-16}" "STRATA=$STRATA" "RUN_DIR=$RUNS/bench")
[ -n "$train_main" ] && bench_env+=("STRATA_METRICS=$train_main")
run_step_rc torch_vs_gpu 240 "$LOGS/torch_vs_gpu.txt" "${bench_env[@]}" \
  bash bench/train_vs_torch_gpu.sh "$TRAIN_STEPS"
grep -q '^{"tokens_per_s"' "$LOGS/torch_vs_gpu.txt" &&
  grep '^{"tokens_per_s"' "$LOGS/torch_vs_gpu.txt" | tail -n 1 > "$OUT/torch_gpu.json"
{ echo "== torch_vs_gpu"; sed -n '/^GPT-2 124M: N =/,$p' "$LOGS/torch_vs_gpu.txt"; } >> "$OUT/results.txt"
result=$(grep '^RESULT ' "$LOGS/torch_vs_gpu.txt" | tail -n 1)
[ -n "$result" ] && notes+=("torch_vs_gpu: ${result#RESULT }")
while IFS= read -r line; do notes+=("torch_vs_gpu: $line"); done < <(grep -E '^(strata / pytorch|target )' "$LOGS/torch_vs_gpu.txt")
case $rc in
  0) record torch_vs_gpu ok "$step_seconds" ;;
  3) if [ "${train_status#not built yet}" != "$train_status" ]; then
       record torch_vs_gpu "not built yet: PyTorch ran, the strata side needs the device-aware trainer" "$step_seconds"
     else
       record torch_vs_gpu "FAILED (the strata side did not run; PyTorch did)" "$step_seconds" 1
     fi ;;
  4) record torch_vs_gpu "FAILED (PyTorch sees no CUDA device)" "$step_seconds" 1 ;;
  *) finish_step torch_vs_gpu ;;
esac

fi

if want cuda_tests; then
# --- cuda_tests: every GPU test must run (a skip here means the test could not see the GPU)
bin=$(binary strata_test_cuda)
if [ -z "$bin" ]; then
  record cuda_tests "FAILED (strata_test_cuda not built)" 0 1
else
  run_step_rc cuda_tests 180 "$LOGS/gpu_tests.txt" "$bin" --gtest_color=no
  n=$(skipped_tests "$LOGS/gpu_tests.txt")
  finish_step cuda_tests "$([ "$n" -gt 0 ] && echo "$n tests skipped")"
fi

fi

if want offload_gpu; then
# --- offload_gpu: ZeRO-Offload and activation offload against the same run without them (GPT-2
# 124M, bf16, T=1024, OFFLOAD_STEPS steps at the main run's micro-batch, at most 16): tokens/s
# over the steps after the first two, and the device arena per category (metrics.jsonl "mem").
offload_start=$SECONDS
offload_batch=${micro_batch:-8}
(( offload_batch > 16 )) && offload_batch=16
strata_train off_none 90 cuda "$offload_batch" "$OFFLOAD_STEPS"
strata_train off_optim 120 cuda "$offload_batch" "$OFFLOAD_STEPS" --set optim.offload=cpu
strata_train off_acts 90 cuda "$offload_batch" "$OFFLOAD_STEPS" --set train.activation_offload=true
py_base - "$LOGS/train_gpu" "$offload_batch" > "$LOGS/offload_gpu.txt" 2>&1 <<'EOF'
import json, statistics, sys
d, mb = sys.argv[1], sys.argv[2]
def load(name):
    try:
        return [json.loads(l) for l in open("%s/%s.metrics.jsonl" % (d, name)) if '"loss"' in l]
    except OSError:
        return []
rows, base = [], None
for name, what in (("off_none", "no offload"), ("off_optim", "optim.offload = cpu"),
                   ("off_acts", "train.activation_offload")):
    r = load(name)
    if len(r) < 3:
        rows.append("%-26s did not run (see train_gpu/%s.log)" % (what, name))
        continue
    timed = r[2:]
    tps = statistics.mean(x["tokens_per_s"] for x in timed)
    mem = r[-1]["mem"]
    gib = lambda k: mem.get(k, 0) / 2 ** 30
    if base is None and name == "off_none":
        base = tps
    rel = "" if base is None else " (%.3fx)" % (tps / base)
    rows.append("%-26s %9.0f tok/s%-10s arena %6.2f GiB: activations %5.2f, master+optimizer %5.2f" %
                (what, tps, rel, gib("total"), gib("activations"), gib("master") + gib("optimizer")))
print("offloads on cuda, GPT-2 124M, bf16, T=1024, micro-batch %s:" % mb)
for row in rows:
    print("  " + row)
print("NOTE offload_gpu: " + "; ".join(x.split(" arena")[0].strip() for x in rows))
sys.exit(0 if all("did not run" not in x for x in rows) else 1)
EOF
off_rc=$?
cat "$LOGS/offload_gpu.txt"
{ echo "== offload_gpu"; cat "$LOGS/offload_gpu.txt"; echo; } >> "$OUT/results.txt"
while IFS= read -r line; do notes+=("${line#NOTE }"); done < <(grep '^NOTE ' "$LOGS/offload_gpu.txt")
if [ "$off_rc" -eq 0 ]; then
  record offload_gpu ok $((SECONDS - offload_start))
else
  record offload_gpu "FAILED (an offload run did not finish; see offload_gpu.txt)" \
    $((SECONDS - offload_start)) 1
fi

fi

if want groups_gpu; then
# --- groups_gpu: the trainer as one rank of an MPI job on the GPU: its process groups routed
# through NCCL (DeviceHostComm), ZeRO-3 sharding and gathers on NCCL, host scalars over MPI.
run_step_rc groups_gpu 90 "$LOGS/groups_gpu.txt" env OMP_NUM_THREADS=4 "${MPIRUN[@]}" -np 1 \
  "$STRATA" train configs/tiny.toml --set system.device=cuda --set model.attention=flash \
  --set train.precision=bf16 --set parallel.zero=3 --set train.steps=6 \
  --set data.source=synthetic --set "run.dir=$RUNS/groups" --set run.resume=none \
  --set train.eval_every=3
finish_step groups_gpu "$(grep -q 'training done' "$LOGS/groups_gpu.txt" || echo 'no "training done" line')"
rm -rf "$RUNS"

fi

if want nccl; then
# --- NCCL
bin=$(binary strata_test_nccl)
if [ -z "$bin" ]; then
  record nccl_np1 "FAILED (strata_test_nccl not built)" 0 1
else
  run_step_rc nccl_np1 120 "$LOGS/nccl_np1.txt" env OMP_NUM_THREADS=1 NCCL_DEBUG=WARN \
    "${MPIRUN[@]}" -np 1 "$bin" --gtest_color=no
  n=$(skipped_tests "$LOGS/nccl_np1.txt")
  finish_step nccl_np1 "$([ "$n" -gt 0 ] && echo "$n tests skipped")"
  if [ "${gpus:-0}" -ge 2 ]; then
    run_step_rc nccl_np2 120 "$LOGS/nccl_np2.txt" env OMP_NUM_THREADS=1 NCCL_DEBUG=WARN \
      "${MPIRUN[@]}" -np 2 "$bin" --gtest_color=no
    n=$(skipped_tests "$LOGS/nccl_np2.txt")
    finish_step nccl_np2 "$([ "$n" -gt 0 ] && echo "$n tests skipped")"
  else
    record nccl_np2 "skipped: needs 2 GPUs (NCCL puts one rank per device), found ${gpus:-0}" 0
  fi
fi
if has_target nccl_hang && [ -z "$(binary nccl_hang)" ]; then
  record nccl_timeout "FAILED (nccl_hang not built)" 0 1
elif has_target nccl_hang; then
  # ctest runs it through tests/comm/expect_exit.sh (exit 124 within 20 s, the exact line).
  run_step_rc nccl_timeout 60 "$LOGS/nccl_timeout.txt" \
    ctest --test-dir "$BUILD" -R '^nccl_timeout$' -V --no-tests=error
  skipped=""
  grep -q 'NCCL timeout test skipped' "$LOGS/nccl_timeout.txt" && skipped="skipped: saw no GPU"
  finish_step nccl_timeout "$skipped"
fi

fi

if want bench_cuda; then
# --- bench_cuda
if has_target bench_cuda; then
  bin=$(binary bench_cuda)
  if [ -z "$bin" ]; then
    record bench_cuda "FAILED (bench_cuda not built)" 0 1
  else
    # shellcheck disable=SC2086  # BENCH_CUDA_ARGS is a list of flags
    run_step_rc bench_cuda 120 "$LOGS/bench_cuda.txt" "$bin" $BENCH_CUDA_ARGS
    skipped=""
    grep -q 'skipped: no GPU' "$LOGS/bench_cuda.txt" && skipped="skipped: saw no GPU"
    finish_step bench_cuda "$skipped"
  fi
else
  record bench_cuda "not built yet: bench_cuda is not a CMake target (bench/CMakeLists.txt)" 0
fi

fi

if want attention_vs_torch; then
# --- attention_vs_torch: PyTorch's fused attention (FlashAttention-2, cuDNN, memory-efficient
# SDPA backends) on bench_cuda's attention shapes, to set beside its mma rows. Without torch or
# CUDA the script says so and exits 0: recorded as skipped, not as a failure (torch is optional).
run_step_rc attention_vs_torch 120 "$LOGS/attention_vs_torch.txt" \
  python3 bench/attention_vs_torch_gpu.py --quick
if [ "$step_status" = ok ] && grep -q '^attention_vs_torch_gpu: skipped' "$LOGS/attention_vs_torch.txt"; then
  record attention_vs_torch "ok ($(head -n 1 "$LOGS/attention_vs_torch.txt" | cut -c25-))" "$step_seconds"
else
  finish_step attention_vs_torch
fi

fi

# --- summary
write_summary
cat "$OUT/summary.txt"
echo "results in $OUT: $(find "$OUT" -maxdepth 1 -type f -printf '%f ')(logs.tar.gz: every step's log)"
rm -rf "$LOGS"
exit "$failed"
