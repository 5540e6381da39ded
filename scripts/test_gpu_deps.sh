#!/usr/bin/env bash
# Checks, on the Debian 12 development machine, that a build and an MPI run need nothing of the
# carried dependencies but the prefix gpu_verify.sh makes from .gpu-carry/ (scripts/gpu_carry.sh).
#
#   bash scripts/test_gpu_deps.sh [BUILD_DIR]        # as root; default BUILD_DIR build-depstest
#
# The packages are installed here, and other people use them, so they cannot be removed: the
# script re-runs itself in a private mount namespace (unshare -m; nothing changes outside it)
# where every file that the carried packages installed on this machine, and every file of the
# interconnect packages the GPU machine lacks (libfabric, UCX, verbs, PSM, netlink, hwloc's
# plugins), is hidden behind /dev/null: a compiler, linker or loader that reached for the
# system's copy would read an empty file and fail. In there it
#   1. extracts .gpu-carry/debs into a fresh prefix (scripts/gpu_deps.sh: deps_extract,
#      deps_use_prefix with the carried MPI, deps_cuda_libs),
#   2. configures BUILD_DIR against it and prints where CMake found each dependency (every one
#      of the carried ones must be in the prefix),
#   3. builds strata_test_comm (MPI, gtest, nlohmann_json) and strata_test_track (SQLite3,
#      toml++), checks with ldd that their libraries resolve into the prefix,
#   4. runs strata_test_comm on 2 ranks under the prefix's mpirun with LD_DEBUG=files and
#      fails if any process (mpirun, the ranks) loaded a shared object from outside the prefix
#      other than glibc, the GCC runtime, zlib and libraries no carried package has (listed),
#   5. runs it again without mpirun (an MPI singleton, as `strata train` starts),
#   6. with DEPS_TEST_VERIFY=1 (slow: a full build), runs scripts/gpu_verify.sh itself in there.
# What it does not show: that the GPU machine's own libraries (Ubuntu's, if that is what it
# runs) work with the carried Debian 12 ones; that the CUDA, NCCL and cuBLASLt parts build
# there (here they come from /usr/local/cuda).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build-depstest}
PREFIX=${DEPS_TEST_PREFIX:-/tmp/strata-deps-test}
MASKED_EXTRA=(libfabric1 libucx0 libibverbs1 ibverbs-providers libpsm2-2 libpsm-infinipath1
              librdmacm1 libnl-3-200 libnl-route-3-200 libhwloc-plugins libefa1)

if [ "${DEPS_TEST_INSIDE:-}" != 1 ]; then
  [ "$(id -u)" -eq 0 ] || { echo "test_gpu_deps.sh: needs root (mount namespace)" >&2; exit 1; }
  compgen -G ".gpu-carry/debs/*.deb" >/dev/null ||
    { echo "no .gpu-carry/debs: run scripts/gpu_carry.sh first" >&2; exit 1; }
  DEPS_TEST_INSIDE=1 exec unshare -m --propagation private bash "$0" "$BUILD"
fi

# --- inside the namespace: hide the system's copies
pkgs=()
for deb in .gpu-carry/debs/*.deb; do pkgs+=("$(dpkg-deb -f "$deb" Package)"); done
pkgs+=("${MASKED_EXTRA[@]}")
masked=0
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || continue
  while IFS= read -r f; do
    if [ ! -f "$f" ] || [ -L "$f" ]; then continue; fi
    mount --bind /dev/null "$f" && masked=$((masked + 1))
  done < <(dpkg -L "$p")
done
echo "== hidden: $masked files of ${#pkgs[@]} packages (the carried ones and ${MASKED_EXTRA[*]})"
command -v mpirun >/dev/null && ! mpirun --version >/dev/null 2>&1 &&
  echo "   (the system's mpirun is unusable in here: $(command -v mpirun))"

# --- 1. the prefix
# shellcheck source=scripts/gpu_deps.sh
source scripts/gpu_deps.sh
DEPS_MPI=carried
deps_extract .gpu-carry/debs "$PREFIX"
deps_use_prefix "$PREFIX"
deps_cuda_libs /usr/local/cuda
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-/work} CCACHE_DIR=${CCACHE_DIR:-/work/.ccache}
launcher=()
command -v ccache >/dev/null &&
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)

# --- 2. configure
echo "== configure $BUILD"
rm -rf "$BUILD"
L=$BUILD/test_gpu_deps  # this script's logs
mkdir -p "$L"
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSTRATA_CUDA=ON "${launcher[@]}" \
  "${DEPS_CMAKE_ARGS[@]}" > "$L/configure.txt" 2>&1 ||
  { tail -n 30 "$L/configure.txt"; exit 1; }
deps_report "$BUILD" | tee "$L/origin.txt"
bad=$(awk 'NR > 1 && $1 !~ /^(CMAKE_CUDA_COMPILER|NCCL_INCLUDE|NCCL_LIB|CUDA_cudart_LIBRARY|CUDA_cublasLt_LIBRARY)$/ && $2 != "carried"' "$L/origin.txt")
[ -z "$bad" ] || { echo "FAIL: found outside the prefix:"; echo "$bad"; exit 1; }

# --- 3. build and ldd
echo "== build strata_test_comm strata_test_track"
nice -n 5 ninja -C "$BUILD" -j"${JOBS:-2}" strata_test_comm strata_test_track > "$L/build.txt" 2>&1 ||
  { tail -n 30 "$L/build.txt"; exit 1; }
fail=0
for t in tests/comm/strata_test_comm tests/strata_test_track; do
  echo "-- ldd $t"
  ldd "$BUILD/$t" | grep -E 'mpi|open-(pal|rte)|hwloc|event|sqlite|toml|dnnl|gtest|not found' || true
  if ldd "$BUILD/$t" | grep -E 'not found|=> /(usr/)?lib/x86_64-linux-gnu/lib(mpi|open-|hwloc|event|sqlite|tomlplusplus|dnnl)'; then
    echo "FAIL: $t resolves a carried library outside the prefix"; fail=1
  fi
done
echo "-- strata_test_track"
"$BUILD/tests/strata_test_track" --gtest_brief=1 > "$L/track.txt" 2>&1 ||
  { tail -n 20 "$L/track.txt"; echo "FAIL: strata_test_track"; fail=1; }
tail -n 2 "$L/track.txt"

# --- 4. two ranks under the prefix's mpirun, every loaded object listed
echo "== mpirun ($(command -v mpirun) -> $(readlink -f "$(command -v mpirun)")) -np 2 strata_test_comm"
ld=$(mktemp -d)
OMP_NUM_THREADS=1 LD_DEBUG=files LD_DEBUG_OUTPUT=$ld/ld timeout 300 \
  mpirun --allow-run-as-root --oversubscribe --bind-to none --mca btl self,vader -np 2 \
  "$BUILD/tests/comm/strata_test_comm" --gtest_color=no > "$L/mpirun.txt" 2>&1 ||
  { tail -n 30 "$L/mpirun.txt"; echo "FAIL: mpirun"; fail=1; }
tail -n 1 "$L/mpirun.txt"
base_re='/(libc|libm|libmvec|libpthread|libdl|librt|libutil|libresolv|ld-linux-x86-64|libstdc\+\+|libgcc_s|libgomp|libz)\.so'
for f in "$ld"/ld.*; do
  objs=$(grep -h 'calling init:' "$f" | sed 's/.*calling init: //' | sort -u)
  [ -z "$objs" ] && continue
  n_prefix=$(grep -c "^$PREFIX/" <<<"$objs" || true)
  plugins=$(grep -c "^$PREFIX/.*/mca_" <<<"$objs" || true)
  others=$(grep -v "^$PREFIX/" <<<"$objs" | grep -Ev "$base_re" || true)
  printf -- '-- pid %s: %d objects from the prefix (%d MCA plugins), outside it besides the base: %s\n' \
    "${f##*.}" "$n_prefix" "$plugins" "$(echo "$others" | tr '\n' ' ')"
  if grep -Eq 'mpi|open-(pal|rte)|pmix|hwloc|event|mca_|munge|udev|sqlite|dnnl' <<<"$others"; then
    echo "FAIL: a carried library or plugin was loaded from outside the prefix"; fail=1
  fi
done
rm -rf "$ld"

# --- 5. a singleton (no mpirun, as `strata train` runs): Open MPI starts its orted from the
# prefix's bindir (OPAL_PREFIX); the system's orted is hidden, so using it would fail.
echo "== singleton: strata_test_comm without mpirun"
OMP_NUM_THREADS=1 timeout 120 "$BUILD/tests/comm/strata_test_comm" --gtest_color=no \
  > "$L/singleton.txt" 2>&1 || { tail -n 20 "$L/singleton.txt"; echo "FAIL: singleton"; fail=1; }
tail -n 1 "$L/singleton.txt"
if [ "$fail" -eq 0 ]; then echo "PASS: build and 2-rank run used only the prefix's copies"; fi

# --- 6. (DEPS_TEST_VERIFY=1, slow: a full build) scripts/gpu_verify.sh itself in here, with its
# own detection (the system "lacks" everything hidden) and the same prefix; without a GPU its GPU
# steps fail or skip with their reasons. Its $OUT goes to BUILD/test_gpu_deps/verify-out.
if [ "${DEPS_TEST_VERIFY:-0}" = 1 ]; then
  echo "== scripts/gpu_verify.sh in the namespace"
  (unset LD_LIBRARY_PATH OPAL_PREFIX OPAL_SYSCONFDIR PMIX_PREFIX PMIX_PKGLIBDIR \
     PMIX_MCA_mca_base_component_path HWLOC_PLUGINS_PATH CMAKE_PREFIX_PATH CMAKE_INCLUDE_PATH \
     CMAKE_LIBRARY_PATH PKG_CONFIG_PATH
   export PATH=$DEPS_BASE_PATH CMAKE_CXX_COMPILER_LAUNCHER=${launcher:+ccache} \
     CMAKE_CUDA_COMPILER_LAUNCHER=${launcher:+ccache}
   DEPS_PREFIX=$PREFIX BUILD=$BUILD-verify OUT=$L/verify-out BUDGET_S=${BUDGET_S:-3000} \
     bash scripts/gpu_verify.sh > "$L/verify.txt" 2>&1) || true  # no GPU here: it fails
  cat "$L/verify-out/summary.txt"
fi
exit "$fail"
