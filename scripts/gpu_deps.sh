# shellcheck shell=bash
# Dependencies from carried .deb files, for a machine with no package access (the GPU machine):
# sourced by scripts/gpu_verify.sh, and usable by hand:
#
#   source scripts/gpu_deps.sh
#   deps_missing                        # prints what the system lacks (empty: nothing)
#   deps_extract .gpu-carry/debs /tmp/strata-deps   # dpkg -x every .deb there, then fix-ups
#   deps_use_prefix /tmp/strata-deps    # exports the environment, fills DEPS_CMAKE_ARGS
#   deps_cuda_libs                      # NCCL / cuBLASLt from NVIDIA's pip wheels if the CUDA
#                                       # toolkit lacks them (adds to DEPS_CMAKE_ARGS)
#   cmake ... "${DEPS_CMAKE_ARGS[@]}"; deps_report BUILD_DIR   # which dependency came from where
#
# The .debs come from scripts/gpu_carry.sh (Debian 12). Nothing is installed: everything lives
# under the prefix (default /tmp/strata-deps, never /), and only this shell's environment and
# the CMake arguments point at it:
#   CMAKE_PREFIX_PATH, CMAKE_INCLUDE_PATH, CMAKE_LIBRARY_PATH   find_package/find_path/find_library
#   PKG_CONFIG_PATH, -DPKG_CONFIG_EXECUTABLE                      the carried pkgconf
#   -DMPI_CXX_COMPILER, -DMPIEXEC_EXECUTABLE                      the carried Open MPI (wrapper, mpirun)
#   LD_LIBRARY_PATH                                               running (and gtest discovery)
#   OPAL_PREFIX, OPAL_SYSCONFDIR, PMIX_PREFIX, PATH              mpirun finds its orted, plugins,
#   PMIX_MCA_mca_base_component_path, HWLOC_PLUGINS_PATH          help files and wrapper data there
# The environment before deps_use_prefix is kept in DEPS_BASE_LD_LIBRARY_PATH and DEPS_BASE_PATH,
# for programs that must not see the carried libraries (python and torch).

DEPS_CMAKE_ARGS=()
DEPS_USED_PREFIX=""  # set by deps_use_prefix (deps_report marks paths under it "carried")
DEPS_MPI=${DEPS_MPI:-}  # carried | system (empty: decided by deps_use_prefix)
DEPS_BASE_LD_LIBRARY_PATH=${LD_LIBRARY_PATH-}
DEPS_BASE_PATH=$PATH
DEPS_MULTIARCH=x86_64-linux-gnu
# Open MPI's own libraries (Debian puts libmpi etc. straight into the multiarch dir).
DEPS_OMPI_LIB_RE='^(libmpi|libopen-(pal|rte)|libmca_common|liboshmem|libompitrace)'

deps_log() { echo "deps: $*"; }

_deps_have_header() {  # relative path: in a default include dir of the system?
  local d
  for d in /usr/include /usr/local/include "/usr/include/$DEPS_MULTIARCH"; do
    [ -s "$d/$1" ] && return 0  # -s: non-empty (an emptied file does not count)
  done
  return 1
}
_deps_have_lib() {  # file name (libdnnl.so, libgtest.a): in a default library dir of the system?
  local d
  for d in "/usr/lib/$DEPS_MULTIARCH" /usr/lib /usr/local/lib /usr/lib64 /usr/local/lib64; do
    [ -s "$d/$1" ] && return 0  # -s: non-empty (an emptied file does not count)
  done
  return 1
}

# A system MPI counts only when its wrapper compiler and mpirun both answer (a stray mpirun,
# e.g. from a Python package, or a wrapper without its data files, does not).
_deps_system_mpi_ok() {
  command -v mpicxx >/dev/null && command -v mpirun >/dev/null || return 1
  { mpicxx --showme:version >/dev/null 2>&1 || mpicxx -show >/dev/null 2>&1; } || return 1
  timeout 20 mpirun --version >/dev/null 2>&1
}

# What CMakeLists.txt's find_* need that the system does not have, one word each.
deps_missing() {
  local m=()
  { _deps_have_header oneapi/dnnl/dnnl.hpp && _deps_have_lib libdnnl.so; } || m+=(oneDNN)
  { _deps_have_header hwy/highway.h && _deps_have_lib libhwy.so; } || m+=(Highway)
  { _deps_have_header xxhash.h && _deps_have_lib libxxhash.so; } || m+=(xxHash)
  { _deps_have_header gtest/gtest.h && { _deps_have_lib libgtest.a || _deps_have_lib libgtest.so; }; } ||
    m+=(GTest)
  _deps_have_header nlohmann/json.hpp || m+=(nlohmann_json)
  _deps_have_header toml++/toml.h || m+=(toml++)
  _deps_have_header CLI/CLI.hpp || m+=(CLI11)
  { _deps_have_header sqlite3.h && _deps_have_lib libsqlite3.so; } || m+=(SQLite3)
  _deps_system_mpi_ok || m+=(MPI)
  { pkg-config --version >/dev/null 2>&1 || pkgconf --version >/dev/null 2>&1; } || m+=(pkg-config)
  echo "${m[*]}"
}

# deps_extract DEBS_DIR PREFIX: a fresh PREFIX with every .deb of DEBS_DIR unpacked (dpkg -x;
# without dpkg, ar + tar), absolute symlinks turned into the prefix, .pc files pointing into it,
# unversioned tool names (mpirun, mpicxx), and every generic library the system already has
# replaced by a link to the system's copy (newer on a newer distribution; Open MPI's own stay).
deps_extract() {
  local debs=$1 prefix=$2 deb n=0
  case "$prefix" in /|/usr|/usr/*|/etc|/etc/*|"") echo "deps_extract: refusing prefix '$prefix'" >&2; return 1 ;; esac
  compgen -G "$debs/*.deb" >/dev/null || { echo "deps_extract: no .deb in $debs" >&2; return 1; }
  rm -rf "$prefix" && mkdir -p "$prefix" || return 1
  for deb in "$debs"/*.deb; do
    if command -v dpkg-deb >/dev/null; then
      dpkg-deb -x "$deb" "$prefix" || { echo "deps_extract: dpkg-deb -x $deb failed" >&2; return 1; }
    else  # a .deb is an ar archive holding data.tar.{xz,zst,gz}
      local tmp member abs
      abs=$(cd "$(dirname "$deb")" && pwd)/$(basename "$deb")
      tmp=$(mktemp -d) && (cd "$tmp" && ar x "$abs") || return 1
      member=$(find "$tmp" -maxdepth 1 -name 'data.tar*' | head -n 1)
      tar -xf "$member" -C "$prefix" || return 1
      rm -rf "$tmp"
    fi
    n=$((n + 1))
  done
  deps_log "extracted $n packages from $debs into $prefix"
  local l target
  while IFS= read -r -d '' l; do
    target=$(readlink "$l")
    ln -sfn "$prefix$target" "$l"
  done < <(find "$prefix" -type l -lname '/*' -print0)
  # .pc files: prefix=/usr and absolute -I/-L paths into the prefix.
  find "$prefix" -name '*.pc' -type f -print0 |
    xargs -0 -r sed -i -E "s@^([A-Za-z_]+)=/usr@\\1=$prefix/usr@; s@(-[IL])/usr/@\\1$prefix/usr/@g"
  local bin=$prefix/usr/bin
  [ -e "$bin/orterun" ] && for t in mpirun mpiexec; do ln -sfn orterun "$bin/$t"; done
  [ -e "$bin/opal_wrapper" ] && for t in mpicxx mpic++ mpicc; do ln -sfn "$t.openmpi" "$bin/$t"; done
  [ -e "$bin/pkgconf" ] && [ ! -e "$bin/pkg-config" ] && ln -sfn pkgconf "$bin/pkg-config"
  # Generic libraries the system has: use the system's (a link, so the -dev symlinks still work).
  if [ "${DEPS_PRUNE:-1}" = 0 ]; then  # DEPS_PRUNE=0: every carried library as is (tests)
    deps_log "DEPS_PRUNE=0: every carried library is used as is"
    return 0
  fi
  if ! command -v readelf >/dev/null; then
    deps_log "no readelf: every carried library is used as is"
    return 0
  fi
  local sys_libs f so sys kept=() linked=()
  sys_libs=$(ldconfig -p 2>/dev/null | awk -F' => ' '/=>/ { split($1, a, " "); print a[1] "\t" $2 }')
  while IFS= read -r -d '' f; do
    so=$(readelf -d "$f" 2>/dev/null | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
    [ -z "$so" ] && continue
    [[ "$so" =~ $DEPS_OMPI_LIB_RE ]] && continue
    sys=$(awk -F'\t' -v s="$so" '$1 == s { print $2; exit }' <<<"$sys_libs")
    # (a regular, non-empty file: ldconfig's cache may name one that is gone)
    if [ -n "$sys" ] && [[ "$sys" != "$prefix"/* ]] && [ -f "$sys" ] && [ -s "$sys" ]; then
      ln -sfn "$sys" "$f"
      linked+=("$so")
    else
      kept+=("$so")
    fi
  done < <(find "$prefix/usr/lib" -type f -name 'lib*.so.*' -print0)
  deps_log "carried libraries used: ${kept[*]:-none}"
  deps_log "the system's own copy used instead of the carried one: ${linked[*]:-none}"
}

# deps_use_prefix PREFIX [mpi]: point CMake, pkg-config, the loader and Open MPI at PREFIX.
# MPI comes from the prefix unless the system's mpicxx and mpirun work (one MPI, never a mix);
# DEPS_MPI=carried|system forces the choice.
deps_use_prefix() {
  local prefix=$1
  local usr=$prefix/usr lib=$prefix/usr/lib/$DEPS_MULTIARCH
  DEPS_USED_PREFIX=$prefix
  if [ -z "$DEPS_MPI" ]; then
    if _deps_system_mpi_ok; then DEPS_MPI=system; else DEPS_MPI=carried; fi
  fi
  if [ "$DEPS_MPI" = system ]; then
    # Keep the system's Open MPI whole: the carried one must not shadow its libraries.
    local f
    for f in "$lib"/lib*; do
      [[ "$(basename "$f")" =~ $DEPS_OMPI_LIB_RE ]] && rm -f "$f"
    done
    rm -rf "$lib/openmpi" "$lib/pmix2" "$usr/bin/mpirun" "$usr/bin/mpiexec" "$usr/bin/mpicxx" \
      "$usr/bin/mpic++" "$usr/bin/mpicc" "$usr/bin/orterun" "$usr/bin/orted" "$usr/bin/opal_wrapper"
    deps_log "MPI: the system's ($(command -v mpirun))"
  fi
  export CMAKE_PREFIX_PATH="$usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
  export CMAKE_INCLUDE_PATH="$usr/include${CMAKE_INCLUDE_PATH:+:$CMAKE_INCLUDE_PATH}"
  export CMAKE_LIBRARY_PATH="$lib${CMAKE_LIBRARY_PATH:+:$CMAKE_LIBRARY_PATH}"
  export PKG_CONFIG_PATH="$lib/pkgconfig:$usr/share/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
  export PATH="$usr/bin:$PATH"
  local ld=$lib
  if [ "$DEPS_MPI" = carried ]; then
    ld="$ld:$lib/openmpi/lib:$lib/pmix2/lib"
    # Open MPI's install directories follow OPAL_PREFIX (bindir: orted; pkglibdir: the MCA
    # plugins; pkgdatadir: help files and the wrappers' data); /etc/openmpi is absolute in
    # Debian's build, hence OPAL_SYSCONFDIR. PMIx has its own prefix and plugins.
    export OPAL_PREFIX=$usr
    export OPAL_SYSCONFDIR=$prefix/etc/openmpi
    # PMIx (Debian: prefix /usr/lib/<multiarch>/pmix2) finds its plugins through PMIX_PREFIX
    # and its component path; hwloc's optional plugins (PCI, GL, XML) from the prefix only
    # (none are carried), never a system hwloc's of another version.
    export PMIX_PREFIX=$lib/pmix2 PMIX_PKGLIBDIR=$lib/pmix2/lib/pmix
    export PMIX_MCA_mca_base_component_path=$lib/pmix2/lib/pmix
    export HWLOC_PLUGINS_PATH=$lib/hwloc
    # Plugins for interconnects whose libraries are not carried (verbs, libfabric, UCX, PSM)
    # fail to load: not worth a warning on one node.
    export OMPI_MCA_mca_base_component_show_load_errors=0
    export OMPI_MCA_pmix_base_verbose=0
    # The wrapper compiler uses the C++ compiler CMake uses.
    export OMPI_CXX=${CXX:-c++}
    DEPS_CMAKE_ARGS+=("-DMPI_CXX_COMPILER=$usr/bin/mpicxx.openmpi"
                      "-DMPIEXEC_EXECUTABLE=$usr/bin/mpirun.openmpi")
    deps_log "MPI: carried Open MPI, OPAL_PREFIX=$OPAL_PREFIX"
  fi
  export LD_LIBRARY_PATH="$ld${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  [ -x "$usr/bin/pkgconf" ] && DEPS_CMAKE_ARGS+=("-DPKG_CONFIG_EXECUTABLE=$usr/bin/pkgconf")
  deps_log "CMAKE_PREFIX_PATH=$CMAKE_PREFIX_PATH"
  deps_log "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
}

# The site-packages folders of the Python interpreters that may hold NVIDIA's wheels.
_deps_site_dirs() {
  local py
  for py in python3 /opt/torch/.venv/bin/python3 /usr/bin/python3; do
    command -v "$py" >/dev/null || continue
    PATH=$DEPS_BASE_PATH LD_LIBRARY_PATH=$DEPS_BASE_LD_LIBRARY_PATH "$py" -c \
      'import site, sys; print("\n".join(site.getsitepackages() + [site.getusersitepackages()]))' \
      2>/dev/null
  done | sort -u | while read -r d; do [ -d "$d/nvidia" ] && echo "$d/nvidia"; done
}

# _deps_find NAME...: the first file of that name under the NVIDIA wheels of any site-packages.
_deps_find_wheel_file() {
  local d n f
  for d in $(_deps_site_dirs); do
    for n in "$@"; do
      f=$(find "$d" -maxdepth 4 -name "$n" 2>/dev/null | sort | head -n 1)
      [ -n "$f" ] && { echo "$f"; return 0; }
    done
  done
  return 1
}

# deps_cuda_libs [CUDA_ROOT]: NCCL and cuBLASLt for CMakeLists.txt's CUDA block. The toolkit's
# own copies when it has them (CMake finds those itself); else the pip wheels' (nvidia-nccl-cu13:
# nvidia/nccl/{include,lib}; nvidia-cublas: nvidia/cu13/{include,lib} or nvidia/cublas/...),
# passed as NCCL_INCLUDE/NCCL_LIB, CUDA_cublasLt_LIBRARY and STRATA_CUBLASLT_INCLUDE, with their
# folders on LD_LIBRARY_PATH. The wheels have only versioned names (libnccl.so.2).
deps_cuda_libs() {
  local cuda=${1:-/usr/local/cuda} nvcc
  # nvcc itself: CMakeLists.txt takes /usr/local/cuda/bin/nvcc, else the one on PATH; failing
  # both, a pip wheel's (nvidia-cuda-nvcc: nvidia/cu13/bin/nvcc), with its folder as the toolkit.
  if [ ! -x "$cuda/bin/nvcc" ] && ! command -v nvcc >/dev/null; then
    nvcc=$(_deps_find_wheel_file nvcc)
    if [ -n "$nvcc" ] && [ -x "$nvcc" ]; then
      cuda=$(dirname "$(dirname "$nvcc")")
      DEPS_CMAKE_ARGS+=("-DCMAKE_CUDA_COMPILER=$nvcc" "-DCUDAToolkit_ROOT=$cuda")
      deps_log "nvcc: pip wheel ($nvcc); CUDA toolkit root $cuda"
    else
      deps_log "nvcc: not found ($cuda/bin/nvcc, PATH, pip wheels): no CUDA backend"
    fi
  fi
  local cinc="$cuda/include $cuda/targets/x86_64-linux/include /usr/include"
  local clib="$cuda/lib64 $cuda/lib $cuda/targets/x86_64-linux/lib /usr/lib/$DEPS_MULTIARCH"
  local d h l found
  found=""
  for d in $cinc; do [ -e "$d/nccl.h" ] && found=$d && break; done
  l=""
  for d in $clib; do compgen -G "$d/libnccl.so*" >/dev/null && l=$d && break; done
  if [ -n "$found" ] && [ -n "$l" ]; then
    deps_log "NCCL: the system's ($found/nccl.h, $l)"
  else
    h=$(_deps_find_wheel_file nccl.h)
    l=$(_deps_find_wheel_file libnccl.so libnccl.so.2)
    if [ -n "$h" ] && [ -n "$l" ]; then
      DEPS_CMAKE_ARGS+=("-DNCCL_INCLUDE=$(dirname "$h")" "-DNCCL_LIB=$l")
      LD_LIBRARY_PATH="$(dirname "$l")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
      export LD_LIBRARY_PATH
      deps_log "NCCL: pip wheel ($h, $l)"
    else
      deps_log "NCCL: not in $cuda nor in a pip wheel nvidia-nccl-*: left to CMake (next to the toolkit it finds)"
    fi
  fi
  found=""
  for d in $clib; do compgen -G "$d/libcublasLt.so*" >/dev/null && found=$d && break; done
  h=""
  for d in $cinc; do [ -e "$d/cublasLt.h" ] && h=$d && break; done
  if [ -n "$found" ] && [ -n "$h" ]; then
    deps_log "cuBLASLt: the CUDA toolkit's ($found)"
  else
    l=$(_deps_find_wheel_file libcublasLt.so libcublasLt.so.13 'libcublasLt.so.*')
    local wh
    wh=$(_deps_find_wheel_file cublasLt.h)
    if [ -n "$l" ]; then
      DEPS_CMAKE_ARGS+=("-DCUDA_cublasLt_LIBRARY=$l")
      [ -z "$h" ] && [ -n "$wh" ] && DEPS_CMAKE_ARGS+=("-DSTRATA_CUBLASLT_INCLUDE=$(dirname "$wh")")
      LD_LIBRARY_PATH="$(dirname "$l")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
      export LD_LIBRARY_PATH
      deps_log "cuBLASLt: pip wheel ($l${wh:+, $wh})"
    else
      deps_log "cuBLASLt: not in $cuda nor in a pip wheel nvidia-cublas*: left to CMake"
    fi
  fi
}

# deps_report BUILD_DIR: where CMake found each dependency (from its cache).
deps_report() {
  local cache=$1/CMakeCache.txt v path origin
  [ -f "$cache" ] || { echo "deps_report: no $cache"; return 1; }
  printf '%-24s %-9s %s\n' dependency origin path
  for v in DNNL_LIB HWY_INCLUDE HWY_LIB XXHASH_INCLUDE XXHASH_LIB GTest_DIR nlohmann_json_DIR \
           TOMLPP_INCLUDE CLI11_INCLUDE SQLite3_INCLUDE_DIR \
           SQLite3_LIBRARY MPI_CXX_COMPILER MPI_mpi_LIBRARY MPI_mpi_cxx_LIBRARY MPIEXEC_EXECUTABLE \
           PKG_CONFIG_EXECUTABLE CMAKE_CUDA_COMPILER NCCL_INCLUDE NCCL_LIB CUDA_cudart_LIBRARY \
           CUDA_cublasLt_LIBRARY; do
    path=$(sed -n "s/^$v:[A-Z]*=//p" "$cache" | head -n 1)
    [ -z "$path" ] && continue
    if [[ "$path" == *NOTFOUND* ]]; then origin=MISSING
    elif [ -n "$DEPS_USED_PREFIX" ] && [[ "$path" == "$DEPS_USED_PREFIX"/* ]]; then origin=carried
    elif [[ "$path" == *site-packages* ]]; then origin=pip
    else origin=system
    fi
    printf '%-24s %-9s %s\n' "$v" "$origin" "$path"
  done
}
