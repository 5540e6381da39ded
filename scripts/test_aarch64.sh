#!/usr/bin/env bash
# Cross-compiles the layers core, kernels, io, comm, model and optim for 64-bit Arm (aarch64) with
# Debian's cross toolchain (cmake/aarch64-linux-gnu.cmake), and runs their test binaries
# (strata_test_core, _kernels, _model, _optim) under qemu-aarch64-static on CPU models that stand
# for the Arm servers there are. Each kernel level (src/kernels/cpu/isa.h) is Highway code for one
# target, and each target is run at least once:
#   run        qemu -cpu                              level (Highway target)  like
#   neon       cortex-a72                             neon (NEON)             Graviton2, Neoverse N1
#   sve2-128   max,sve128=on                          sve2 (SVE2_128)         Graviton4, Grace, N2/V2
#   sve-256    max,sve256=on  + STRATA_CPU_ISA=sve    sve (SVE_256)           Graviton3, Neoverse V1
#   a64fx      a64fx (SVE, no SVE2, 512-bit)          sve (SVE)               Fugaku's A64FX
#   sve2-512   max,sve512=on                          sve2 (SVE2)             -
#   sve2-2048  max,sve2048=on                         sve2 (SVE2)             the architecture's largest
#   neon-on-sve2  max,sve512=on + STRATA_CPU_ISA=neon neon (NEON)             the forced lower level
# qemu 7.2: `sveN=on` makes N bits the largest vector length, and sve-default-vector-length=-1
# gives the process that length (qemu's default is 512 bits at most, as Linux's).
#
# qemu's SVE is slow (helper calls per instruction: the flash attention tests take ~15x NEON's
# time at 512 bits), so the CI set (the table below: ~7 min of qemu on a busy 2-core machine)
# runs the kernel suite whole on neon only and the optim suite whole where it runs, and the quick
# depth of the others; `--set full` runs every suite whole on every CPU model (hours at 512 bits
# and more; whole at sve2-128 the kernel suite takes ~4.5 min).
# The quick depth leaves out, as gtest filters (QUICK_SKIP below; all of them run natively on
# x86 in .ci/run):
#   kernels  the flash attention tests that sweep shapes (FlashAttention*.MatchesNaive*,
#            .MatchesF32Kernel*, .DeterministicAcrossThreadCounts, .ComparisonRejectsWrongResults,
#            .LevelKernelMatchesThePortableKernel): 60-170 s each at neon, minutes at SVE 512.
#            Flash attention still runs there through the model suite's
#            FlashAttentionGivesTheSameLossAndGradients and FlashMatchesNaive tests. And the
#            GEMM thread-count runs of the raw libraries (GemmTest.ResultDoesNotDependOnThread-
#            Count/Dnnl*, /OpenBlas: oneDNN's reference GEMM takes ~4 min of it at 512 bits);
#            /Dispatch, the GEMM the model runs (tiled OpenBLAS on aarch64), stays.
#   model    the bitwise-equality runs of whole training steps (guarded backend, activation and
#            host offload, recomputation, optimizer backend, bf16 copy, generation, seeded
#            sampling): up to 110 s each at neon and 10-110 s at SVE 512; each compares two paths
#            of the same kernels on one machine. And FamilyGradients (~700 forward passes of
#            finite differences: over 300 s at SVE 256, where the whole rest of the quick model
#            suite takes about 30 s); it checks how each block wires kernels that the kernel
#            suite checks at every level. The numerics against PyTorch (TorchReference.*) and the decoder tests stay.
# Always left out under emulation (ALWAYS_SKIP): core Trace.OffSpanIsCheap, which asserts
# wall-clock costs (a span that records nothing < 20 ns; ~30 ns under qemu's translation).
# Prints one line per run and suite and a closing "N passed, N failed" line (runs, not test
# cases); exits non-zero on any failure.
#
# Usage: scripts/test_aarch64.sh [--no-install] [--build-only] [--jobs N] [--set ci|full]
#                                [--runs "neon sve2-128"] [--suites "core kernels"]
# Environment: STRATA_AARCH64_EXTRA_ROOT (default /opt/strata-aarch64, see below),
#              BUILD_DIR (default build-arm64), NICE (e.g. "nice -n 10" on a shared machine).
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR=${BUILD_DIR:-build-arm64}
EXTRA_ROOT=${STRATA_AARCH64_EXTRA_ROOT:-/opt/strata-aarch64}
JOBS=$(nproc)
INSTALL=1
BUILD_ONLY=0
SET=ci
ONLY_RUNS=""
ONLY_SUITES=""
while [ $# -gt 0 ]; do
  case "$1" in
    --no-install) INSTALL=0 ;;
    --build-only) BUILD_ONLY=1 ;;
    --jobs) JOBS=$2; shift ;;
    --set) SET=$2; shift ;;
    --runs) ONLY_RUNS=$2; shift ;;
    --suites) ONLY_SUITES=$2; shift ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
  shift
done
case "$SET" in ci|full) ;; *) echo "--set: ci or full, not $SET" >&2; exit 2 ;; esac
NICE=${NICE:-}

now() { date +%s; }
elapsed() { echo $(( $(now) - $1 )); }
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
apt_updated=0
apt_update_once() {
  if [ "$apt_updated" -eq 0 ]; then
    $SUDO apt-get -o DPkg::Lock::Timeout=900 update -qq
    apt_updated=1
  fi
}

# --- 1. Packages ------------------------------------------------------------------------------
# Installed with dpkg (multiarch, next to the amd64 packages of scripts/install_deps.sh):
#   g++-aarch64-linux-gnu   the cross compiler, binutils, and the arm64 libc/libstdc++/libgomp
#                           under /usr/aarch64-linux-gnu (crossbuild-essential-arm64 adds only
#                           dpkg-cross, ~40 Perl packages and a host Perl upgrade: not needed)
#   qemu-user-static        runs the arm64 test binaries
#   libdnnl2:arm64          oneDNN (the GEMM of the bf16 path, and of the f32 one if forced)
#   libopenblas0-openmp:arm64  OpenBLAS (the f32 GEMM on aarch64; loaded at run time, no -dev)
#   libgtest-dev:arm64      googletest's arm64 static libraries (headers: the shared googletest)
#   libhwy-dev:arm64        Google Highway (the portable kernels)
#   libxxhash-dev:arm64     xxHash (the io layer's checksums)
# Architecture-independent, shared with the host build: nlohmann-json3-dev, libtomlplusplus-dev
# (header-only), googletest.
#
# Unpacked (dpkg-deb -x) into $EXTRA_ROOT instead, because dpkg cannot install them next to the
# amd64 packages that the host build needs:
#   libdnnl-dev:arm64       Multi-Arch: same, but its /usr/include/oneapi/dnnl/dnnl_config.h
#                           differs from amd64's (DNNL_GPU_RUNTIME NONE vs OCL): dpkg refuses
#                           ("trying to overwrite shared ... dnnl_config.h").
#   libopenmpi-dev:arm64 and its runtime closure: libopenmpi3 needs libpmix2 which needs
#                           libmunge2, and libmunge2 is not Multi-Arch, so libmunge2:arm64
#                           replaces libmunge2:amd64 and apt would remove the host's Open MPI,
#                           PMIx, munge and SLURM; libopenmpi-dev:arm64 itself also needs
#                           openmpi-bin:arm64 and gfortran-12:arm64, which would remove the
#                           host's gcc, g++ and build-essential. The other libraries of the
#                           closure (hwloc, libevent, ucx, libfabric, rdma-core, libnl, numa,
#                           udev, zlib) are unpacked too rather than installed: as Multi-Arch:
#                           same packages they would force upgrades of their amd64 versions
#                           (systemd's libudev1, zlib1g) in lockstep.
# Only linking and loading libmpi.so matters here: the four suites do not call MPI.
apt_packages=(g++-aarch64-linux-gnu qemu-user-static libdnnl2:arm64 libopenblas0-openmp:arm64
              libgtest-dev:arm64 libhwy-dev:arm64 libxxhash-dev:arm64 nlohmann-json3-dev
              libtomlplusplus-dev googletest cmake ninja-build)
unpacked_packages=(libdnnl-dev libopenmpi-dev libopenmpi3 libpmix2 libmunge2 libhwloc15 libudev1
                   libevent-core-2.1-7 libevent-pthreads-2.1-7 libfabric1 libibverbs1 librdmacm1
                   libnl-3-200 libnl-route-3-200 libucx0 libnuma1 zlib1g)

install_packages() {
  local t0; t0=$(now)
  if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    $SUDO dpkg --add-architecture arm64
    apt_updated=0
    apt_update_once
  fi
  local missing=() p
  for p in "${apt_packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "installing: ${missing[*]}"
    apt_update_once
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get -o DPkg::Lock::Timeout=900 install -y -qq \
      --no-install-recommends "${missing[@]}" >/dev/null
  fi
  # The unpacked packages, at the versions of the current package lists: a stamp names them.
  local want=()
  candidates() {
    apt-cache policy "${unpacked_packages[@]/%/:arm64}" 2>/dev/null |
      awk '/^[^ ].*:$/ {p = substr($0, 1, length($0) - 1)}
           /Candidate:/ && $2 != "(none)" {print p "=" $2}'
  }
  mapfile -t want < <(candidates)
  if [ ${#want[@]} -ne ${#unpacked_packages[@]} ]; then
    apt_update_once
    mapfile -t want < <(candidates)
    [ ${#want[@]} -eq ${#unpacked_packages[@]} ] ||
      { echo "arm64 packages missing: have only ${want[*]}" >&2; exit 1; }
  fi
  local stamp="$EXTRA_ROOT/.strata-packages"
  if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "${want[*]}" ]; then
    echo "unpacking into $EXTRA_ROOT: ${unpacked_packages[*]}"
    local tmp; tmp=$(mktemp -d)
    chmod 755 "$tmp"  # apt's _apt user downloads into it
    (cd "$tmp" && apt-get -o DPkg::Lock::Timeout=900 download -qq "${want[@]}" 2>/dev/null ||
       { apt_update_once; apt-get download -qq "${want[@]}"; })
    $SUDO rm -rf "$EXTRA_ROOT"
    $SUDO mkdir -p "$EXTRA_ROOT"
    for p in "$tmp"/*.deb; do $SUDO dpkg-deb -x "$p" "$EXTRA_ROOT"; done
    # One library folder, as on a merged-/usr system (zlib, libnl, libudev ship in /lib).
    if [ -d "$EXTRA_ROOT/lib/aarch64-linux-gnu" ]; then
      $SUDO cp -a "$EXTRA_ROOT/lib/aarch64-linux-gnu/." "$EXTRA_ROOT/usr/lib/aarch64-linux-gnu/"
      $SUDO rm -rf "$EXTRA_ROOT/lib"
      $SUDO ln -s usr/lib "$EXTRA_ROOT/lib"
    fi
    # Development links to libraries that dpkg installed (libdnnl.so -> libdnnl.so.2).
    local link
    while IFS= read -r link; do
      local target; target=$(readlink "$link")
      [ -e "/usr/lib/aarch64-linux-gnu/$target" ] &&
        $SUDO ln -sfn "/usr/lib/aarch64-linux-gnu/$target" "$link"
    done < <(find "$EXTRA_ROOT/usr/lib/aarch64-linux-gnu" -maxdepth 1 -xtype l)
    echo "${want[*]}" | $SUDO tee "$stamp" >/dev/null
    rm -rf "$tmp"
  fi
  echo "aarch64: packages ready in $(elapsed "$t0") s"
}
[ "$INSTALL" -eq 1 ] && install_packages

# --- 2. Build ---------------------------------------------------------------------------------
t0=$(now)
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_TOOLCHAIN_FILE="$PWD/cmake/aarch64-linux-gnu.cmake" \
  -DSTRATA_AARCH64_EXTRA_ROOT="$EXTRA_ROOT" \
  -DSTRATA_NATIVE=OFF -DSTRATA_CUDA=OFF -DSTRATA_LAYERS_ONLY=ON >/dev/null
SUITES=${ONLY_SUITES:-core kernels model optim}
targets=()
for s in $SUITES; do targets+=("strata_test_$s"); done
targets+=(strata_cpu_levels)  # the kernel levels each emulated CPU runs
$NICE cmake --build "$BUILD_DIR" -j"$JOBS" --target "${targets[@]}"
echo "aarch64: built ${targets[*]} in $(elapsed "$t0") s (-j$JOBS)"
[ "$BUILD_ONLY" -eq 1 ] && exit 0

# --- 3. Run under qemu ------------------------------------------------------------------------
# The guest's library path starts with the cross toolchain's libc: -L makes the program's loader
# /usr/aarch64-linux-gnu/lib/ld-linux-aarch64.so.1 (libc6-arm64-cross 2.36-8cross1), but that
# loader searches /lib/aarch64-linux-gnu first, where libc6:arm64 (2.36-9+deb12u14, a dependency
# of libdnnl2:arm64) is: a loader and libc.so.6 from different builds hang in the first
# pthread_create. Then the unpacked packages, then the multiarch folder.
GUEST_LIBS=/usr/aarch64-linux-gnu/lib:$EXTRA_ROOT/usr/lib/aarch64-linux-gnu:/usr/lib/aarch64-linux-gnu
QEMU=(qemu-aarch64-static -L /usr/aarch64-linux-gnu -E "LD_LIBRARY_PATH=$GUEST_LIBS")
export OMP_NUM_THREADS=2
MAXVL=sve-default-vector-length=-1

# name | qemu -cpu | STRATA_CPU_ISA (- for the best level) | suites (suite:full runs it whole)
ci_runs=(
  "neon|cortex-a72|-|core kernels:full model optim:full"
  "sve2-128|max,sve128=on,$MAXVL|-|core kernels model optim:full"
  "sve-256|max,sve256=on,$MAXVL|sve|kernels model"
  "a64fx|a64fx|-|kernels"
  "sve2-512|max,sve512=on,$MAXVL|-|kernels"
  "sve2-2048|max,sve2048=on,$MAXVL|-|kernels optim:full"
  "neon-on-sve2|max,sve512=on,$MAXVL|neon|kernels"
)
runs=()
for r in "${ci_runs[@]}"; do
  if [ "$SET" = full ]; then
    IFS='|' read -r name cpu isa _ <<<"$r"
    r="$name|$cpu|$isa|core:full kernels:full model:full optim:full"
  fi
  runs+=("$r")
done

ALWAYS_SKIP_core='Trace.OffSpanIsCheap'
QUICK_SKIP_kernels='FlashAttention.MatchesNaiveForwardBackwardAndLse:FlashAttention.DeterministicAcrossThreadCounts:FlashAttentionBf16.MatchesF32KernelOnTheSameBf16Inputs:FlashAttentionBf16.DeterministicAcrossThreadCounts:FlashAttentionBf16.ComparisonRejectsWrongResults:FlashAttentionBf16.LevelKernelMatchesThePortableKernel:Backends/GemmTest.ResultDoesNotDependOnThreadCount/Dnnl*:Backends/GemmTest.ResultDoesNotDependOnThreadCount/OpenBlas'
QUICK_SKIP_model='ActivationOffload.BitwiseTheGradientsOfKeepingEverything:ActivationOffload.DeviceHoldsTwoLayersAndTheBlockOutputs:Recompute.GradientsAreBitwiseIdentical:HostOffloadBackend.*:Backend.GuardedRunIsBitwiseThePlainCpuRun:Backend.GenerateOnTheGuardedBackend:OptimBackend.GuardedStepsAreBitwiseThePlainCpuSteps:Bf16Copy.OptimizerWrittenCopyEqualsTheModelsOwnConversion:Families/DecoderFamilies.SeededSamplingIsDeterministic/*:FamilyGradients.*'
filter_for() {  # filter_for SUITE DEPTH
  local skip always quick
  always="ALWAYS_SKIP_$1"; quick="QUICK_SKIP_$1"
  skip=${!always:-}
  if [ "$2" = quick ] && [ -n "${!quick:-}" ]; then skip=${skip:+$skip:}${!quick}; fi
  if [ -n "$skip" ]; then echo "-$skip"; else echo "*"; fi
}

passed=0; failed=0; summary=()
run_one() {  # run_one NAME CPU ISA SUITE DEPTH
  local name=$1 cpu=$2 isa=$3 suite=$4 depth=$5
  local bin="$BUILD_DIR/tests/strata_test_$suite" log="$BUILD_DIR/qemu-logs/$name-$suite.log"
  local filter; filter=$(filter_for "$suite" "$depth")
  local envs=()
  [ "$isa" != - ] && envs+=(-E "STRATA_CPU_ISA=$isa")
  mkdir -p "$BUILD_DIR/qemu-logs"
  local t rc=0; t=$(now)
  $NICE "${QEMU[@]}" "${envs[@]}" -cpu "$cpu" "$bin" --gtest_filter="$filter" --gtest_brief=1 \
    >"$log" 2>&1 || rc=$?
  local level; level=$(grep -m1 -o 'kernel level: [a-z0-9]*' "$log" | cut -d' ' -f3 || true)
  local counts; counts=$(grep -E '^\[  PASSED  \]|^\[  FAILED  \] [0-9]+ test' "$log" |
                         sed 's/\[  //; s/  \]//; s/\.$//' | tr '\n' ' ' | sed 's/ *$//')
  local line; line=$(printf 'aarch64 %-12s %-9s %-5s' "$name" "$suite" "$depth")
  if [ $rc -eq 0 ]; then
    passed=$((passed + 1)); line+=" ok    "
  else
    failed=$((failed + 1)); line+=" FAILED (exit $rc)"
  fi
  line+=" ${counts:-no gtest summary}; ${level:+level $level, }$(elapsed "$t") s (-cpu $cpu)"
  [ "$isa" != - ] && line+=" STRATA_CPU_ISA=$isa"
  echo "$line"
  if [ $rc -ne 0 ]; then
    grep -E '^\[  FAILED  \]|Failure|Expected|Which is|actual|signal' "$log" | head -40 | sed 's/^/    /'
    tail -5 "$log" | sed 's/^/    /'
  fi
  summary+=("$line")
}

t_all=$(now)
for r in "${runs[@]}"; do
  IFS='|' read -r name cpu isa suites <<<"$r"
  [ -n "$ONLY_RUNS" ] && [[ " $ONLY_RUNS " != *" $name "* ]] && continue
  # What this CPU model runs, best first (strata_cpu_levels), and the level the run asks for.
  levels=$("${QEMU[@]}" -cpu "$cpu" "$BUILD_DIR/tests/strata_cpu_levels" | tr '\n' ' ')
  echo "aarch64 $name: -cpu $cpu runs kernel levels: ${levels% }"
  if [ "$isa" != - ] && [[ " $levels " != *" $isa "* ]]; then
    echo "aarch64 $name: FAILED: level $isa is not among them"; failed=$((failed + 1)); continue
  fi
  for sd in $suites; do
    suite=${sd%%:*}; depth=quick; [[ "$sd" == *:full ]] && depth=full
    [[ " $SUITES " == *" $suite "* ]] || continue
    run_one "$name" "$cpu" "$isa" "$suite" "$depth"
  done
done

echo
echo "aarch64 summary ($SET set, $(elapsed "$t_all") s under qemu; logs in $BUILD_DIR/qemu-logs):"
printf '  %s\n' "${summary[@]}"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
