#!/usr/bin/env bash
# Cross-compiles the layers core, kernels, io, comm, model and optim for 64-bit Arm (aarch64) with
# Debian's cross toolchain, and runs their test binaries (strata_test_core, _kernels, _model,
# _optim) under qemu-aarch64-static on several CPU models:
#   neon      -cpu cortex-a72              Armv8.0 with NEON (Advanced SIMD), no SVE
#   sve128    -cpu max,sve128=on           SVE (and SVE2) with 128-bit vectors
#   sve512    -cpu max,sve512=on           SVE (and SVE2) with 512-bit vectors
#   sve2048   -cpu max,sve2048=on          SVE (and SVE2) with 2048-bit vectors (the largest)
# (qemu 7.2: `-cpu max,sveN=on` enables vector length N bits and, as the largest one, makes the
# lengths below it that the architecture requires available too; the kernel picks the largest.)
# Once the kernels select their ISA at run time (STRATA_CPU_ISA), the kernel suite also runs
# with STRATA_CPU_ISA=neon (and sve where the binary knows it) on an SVE CPU model.
# Prints one line per run and a closing "N passed, N failed" line; exits non-zero on any failure.
#
# Usage: scripts/test_aarch64.sh [--no-install] [--build-only] [--jobs N] [--runs "neon sve128"]
#                                [--suites "core kernels"] [--filter-set NAME]
# Environment: STRATA_AARCH64_EXTRA_ROOT (default /opt/strata-aarch64, see below),
#              BUILD_DIR (default build-arm64), NICE (e.g. "nice -n 10" while developing).
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR=${BUILD_DIR:-build-arm64}
EXTRA_ROOT=${STRATA_AARCH64_EXTRA_ROOT:-/opt/strata-aarch64}
JOBS=$(nproc)
INSTALL=1
BUILD_ONLY=0
RUNS="neon sve128 sve512 sve2048"
SUITES="core kernels model optim"
while [ $# -gt 0 ]; do
  case "$1" in
    --no-install) INSTALL=0 ;;
    --build-only) BUILD_ONLY=1 ;;
    --jobs) JOBS=$2; shift ;;
    --runs) RUNS=$2; shift ;;
    --suites) SUITES=$2; shift ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
  shift
done
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
#   libdnnl2:arm64          oneDNN (the GEMM backend of the kernels)
#   libgtest-dev:arm64      googletest's arm64 static libraries (headers: the shared googletest)
#   libhwy-dev:arm64        Google Highway (the portable kernels)
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
apt_packages=(g++-aarch64-linux-gnu qemu-user-static libdnnl2:arm64 libgtest-dev:arm64
              libhwy-dev:arm64 nlohmann-json3-dev libtomlplusplus-dev googletest cmake ninja-build)
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
targets=()
for s in $SUITES; do targets+=("strata_test_$s"); done
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
cpu_of() {
  case "$1" in
    neon) echo cortex-a72 ;;
    sve*) echo "max,${1}=on" ;;
    *) echo "unknown run $1" >&2; exit 2 ;;
  esac
}
# Tests left out under emulation (each runs natively in the x86 CI), per suite, as gtest
# filters:
#   core  Trace.OffSpanIsCheap: asserts wall-clock costs (a span that records nothing < 20 ns);
#         under qemu's binary translation one takes ~30 ns, which says nothing about Arm.
declare -A FILTER=(
  [core]='-Trace.OffSpanIsCheap'
)

passed=0; failed=0; summary=()
run_one() {  # run_one NAME CPU SUITE [ENV=VALUE...]
  local name=$1 cpu=$2 suite=$3; shift 3
  local bin="$BUILD_DIR/tests/strata_test_$suite" log="$BUILD_DIR/qemu-logs/$name-$suite.log"
  local filter=${FILTER[$suite]:-*}
  mkdir -p "$BUILD_DIR/qemu-logs"
  local t; t=$(now)
  local rc=0
  env "$@" "${QEMU[@]}" -cpu "$cpu" "$bin" --gtest_filter="$filter" --gtest_brief=1 \
    >"$log" 2>&1 || rc=$?
  local counts; counts=$(grep -E '^\[  PASSED  \]|^\[  FAILED  \] [0-9]+ test' "$log" |
                         tr '\n' ' ' | sed 's/\[  //g; s/  \]//g')
  local line="aarch64 $name ($cpu${*:+, $*}) strata_test_$suite: "
  if [ $rc -eq 0 ]; then
    passed=$((passed + 1)); line+="ok"
  else
    failed=$((failed + 1)); line+="FAILED (exit $rc)"
    grep -E '^\[  FAILED  \]' "$log" | sed 's/^/    /' || tail -20 "$log" | sed 's/^/    /'
  fi
  line+=" - ${counts:-no gtest summary} - $(elapsed "$t") s"
  echo "$line"
  summary+=("$line")
}
for run in $RUNS; do
  cpu=$(cpu_of "$run")
  for s in $SUITES; do run_one "$run" "$cpu" "$s"; done
done
# The kernels' run-time ISA choice (STRATA_CPU_ISA, once the kernels have it): NEON on an SVE CPU.
if [[ " $SUITES " == *" kernels "* ]] && grep -aq STRATA_CPU_ISA "$BUILD_DIR/tests/strata_test_kernels"; then
  for run in $RUNS; do
    case "$run" in sve*) run_one "$run" "$(cpu_of "$run")" kernels STRATA_CPU_ISA=neon; break ;; esac
  done
fi

echo
echo "aarch64 summary:"
printf '  %s\n' "${summary[@]}"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
