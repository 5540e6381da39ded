#!/usr/bin/env bash
# Run HERE (a Debian 12 development machine with apt), before the device call: downloads the
# Debian 12 .deb files of every library the GPU machine may lack into .gpu-carry/ (git-ignored),
# which travels to the GPU machine as a `carry` path of the device tool. There,
# scripts/gpu_verify.sh extracts them with `dpkg -x` into a private prefix (/tmp/strata-deps),
# never into /, and builds and runs against it.
#
#   bash scripts/gpu_carry.sh            # -> .gpu-carry/debs/*.deb, .gpu-carry/MANIFEST.txt
#
# What is carried (the roots; the closure is computed from the ELF files, below):
#   build: libdnnl-dev libhwy-dev libxxhash-dev nlohmann-json3-dev libtomlplusplus-dev
#          libcli11-dev libgtest-dev libsqlite3-dev libopenmpi-dev, pkgconf (find_package(PkgConfig)
#          needs the binary)
#   run:   libdnnl2, libhwy1, libxxhash0, openmpi-bin (orterun = mpirun, orted, opal_wrapper =
#          mpicxx), openmpi-common (help files, wrapper data), libopenmpi3 (libmpi and the MCA
#          plugins), libpmix2, and whatever shared libraries those need, recursively.
#
# The closure rule (ELF, not apt's Depends: apt's closure of these roots is ~400 MB of
# compilers, Fortran and interconnect stacks). Every ELF file of the extracted packages is read
# with readelf; each NEEDED soname that no carried file provides is
#   - skipped when it is in the BASE set: glibc (libc, libm, libpthread, libdl, librt, libutil,
#     libresolv, ld-linux), the GCC runtime (libstdc++, libgcc_s, libgomp: every g++ has them,
#     and nvcc cannot work without a g++) and zlib (Priority: required in Debian, in every
#     Debian/Ubuntu base image as a dependency of dpkg/apt);
#   - skipped when only Open MPI's optional parts need it: MCA plugins (mca_*.so) and the
#     Fortran, Java and OpenSHMEM bindings. Those are the multi-node interconnects (InfiniBand
#     verbs, libfabric, UCX, PSM/PSM2) and gfortran; one node uses shared memory (btl
#     self,vader) and NCCL, and a plugin whose library is missing is not loaded (gpu_verify.sh
#     sets OMPI_MCA_mca_base_component_show_load_errors=0);
#   - else the package that provides it here (dpkg -S) is added, and the loop repeats.
# gpu_verify.sh prefers the machine's own copy of any generic library it already has (it
# removes those sonames from the prefix), so carrying one the machine has costs only size.
set -euo pipefail
cd "$(dirname "$0")/.."
CARRY=.gpu-carry
DEBS=$CARRY/debs
ROOTS=(libdnnl-dev libdnnl2 libhwy-dev libhwy1 libxxhash-dev libxxhash0 nlohmann-json3-dev
       libtomlplusplus-dev libtomlplusplus3 libcli11-dev
       libgtest-dev libsqlite3-dev libsqlite3-0 libopenmpi-dev libopenmpi3 openmpi-bin
       openmpi-common libpmix2 pkgconf pkgconf-bin libpkgconf3)
BASE_RE='^(libc|libm|libmvec|libpthread|libdl|librt|libutil|libresolv|libanl|ld-linux-x86-64|libstdc\+\+|libgcc_s|libgomp|libz)\.so'
# Files whose missing libraries are tolerated (optional parts of Open MPI, see above).
OPTIONAL_RE='(/mca_[^/]*\.so$|/libmpi_(mpifh|usempi|usempif08|java)[^/]*$|/liboshmem[^/]*$|/libmca_common_(ofi|ucx|verbs)[^/]*$|/pmix/[^/]*\.so$|/ompi_monitoring_prof\.so$|/libompi_dbg_msgq\.so$)'

command -v apt-get >/dev/null || { echo "gpu_carry.sh: needs apt-get (Debian 12)" >&2; exit 1; }
command -v readelf >/dev/null || { echo "gpu_carry.sh: needs readelf (binutils)" >&2; exit 1; }
if ! grep -q 'VERSION_CODENAME=bookworm' /etc/os-release 2>/dev/null; then
  echo "warning: this is not Debian 12 (bookworm); the GPU machine's glibc must be at least" \
       "this one's" >&2
fi
grep -qx '/.gpu-carry/' .gitignore 2>/dev/null ||
  echo "warning: .gpu-carry/ is not in .gitignore: it would travel twice" >&2

mkdir -p "$DEBS"
SCAN=$(mktemp -d "${TMPDIR:-/tmp}/gpu-carry-scan.XXXXXX")
trap 'rm -rf "$SCAN"' EXIT

declare -A want=() have_deb=()
for p in "${ROOTS[@]}"; do want[$p]=1; done
skipped_optional=()

download() {  # pkg...: the current candidate version of each into $DEBS (apt's file names)
  local sandbox=()
  # As root, apt drops to user _apt for downloads and warns that it cannot write here.
  [ "$(id -u)" -eq 0 ] && sandbox=(-o APT::Sandbox::User=root)
  (cd "$DEBS" && apt-get "${sandbox[@]}" download -q "$@" >/dev/null) || {
    echo "apt-get download $* failed (run: sudo apt-get update)" >&2; exit 1; }
}

round=0
while :; do
  round=$((round + 1))
  new=()
  for p in "${!want[@]}"; do [ -n "${have_deb[$p]:-}" ] || new+=("$p"); done
  [ ${#new[@]} -eq 0 ] && break
  echo "round $round: ${new[*]}"
  # Drop stale versions of the same package first (a previous run, an older candidate).
  for p in "${new[@]}"; do rm -f "$DEBS/${p}_"*.deb; done
  download "${new[@]}"
  for p in "${new[@]}"; do
    deb=$(ls "$DEBS/${p}_"*.deb)
    dpkg-deb -x "$deb" "$SCAN/root"
    have_deb[$p]=1
  done
  # Sonames the carried files provide (file names of the shared libraries, and their links).
  provided=$(find "$SCAN/root" \( -type f -o -type l \) -name '*.so*' -printf '%f\n' | sort -u)
  missing_pkgs=()
  while IFS= read -r -d '' f; do
    head -c 4 "$f" 2>/dev/null | grep -q 'ELF' || continue
    rel=${f#"$SCAN/root"}
    for so in $(readelf -d "$f" 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
      [[ "$so" =~ $BASE_RE ]] && continue
      grep -qxF "$so" <<<"$provided" && continue
      if [[ "$rel" =~ $OPTIONAL_RE ]]; then
        skipped_optional+=("$so ${rel##*/}")
        continue
      fi
      owner=$(dpkg -S "*/$so" 2>/dev/null | head -n 1 | cut -d: -f1)
      if [ -z "$owner" ]; then
        echo "ERROR: $rel needs $so, which no installed package provides here;" \
             "install the package that has it (apt-file search $so) and rerun" >&2
        exit 1
      fi
      [ -z "${want[$owner]:-}" ] && { want[$owner]=1; missing_pkgs+=("$owner"); }
    done
  done < <(find "$SCAN/root" -type f -print0)
  [ ${#missing_pkgs[@]} -gt 0 ] && echo "  needed by the ELF files: ${missing_pkgs[*]}"
done

# Remove .debs a previous run left that are no longer wanted.
for deb in "$DEBS"/*.deb; do
  p=$(basename "$deb"); p=${p%%_*}
  [ -n "${want[$p]:-}" ] || { echo "removing stale $deb"; rm -f "$deb"; }
done

# The newest glibc symbol version any carried ELF file needs: the GPU machine's glibc must be at
# least that (gpu_verify.sh checks).
glibc_need=$(find "$SCAN/root" -type f \( -name '*.so*' -o -path '*/bin/*' \) -print0 |
  { xargs -0 objdump -T 2>/dev/null || true; } | grep -o 'GLIBC_2\.[0-9]*' | sort -t. -k2 -n -u |
  tail -n 1)
echo "${glibc_need#GLIBC_}" > "$CARRY/GLIBC_NEEDED"
{
  echo "# .gpu-carry: Debian 12 packages for scripts/gpu_verify.sh (made by scripts/gpu_carry.sh"
  echo "# on $(date -u +%Y-%m-%dT%H:%MZ), $(sed -n 's/^PRETTY_NAME=//p' /etc/os-release | tr -d '"'))"
  echo "# package version size"
  for deb in "$DEBS"/*.deb; do
    # shellcheck disable=SC2016  # dpkg-deb's own ${field} syntax
    printf '%s %s\n' "$(dpkg-deb -W --showformat='${Package} ${Version}' "$deb")" \
      "$(stat -c %s "$deb")"
  done
  echo "# not carried, by the rule: soname, the optional Open MPI parts that need it"
  provided=$(find "$SCAN/root" \( -type f -o -type l \) -name '*.so*' -printf '%f\n' | sort -u)
  printf '%s\n' "${skipped_optional[@]}" | sort -u | while read -r so file; do
    grep -qxF "$so" <<<"$provided" || echo "$so $file"
  done | awk '{ a[$1] = a[$1] (a[$1] ? "," : "") $2 } END { for (k in a) print "#   " k ": " a[k] }' |
    sort
} > "$CARRY/MANIFEST.txt"

carry_bytes=$(du -cb "$CARRY" | tail -n 1 | cut -f1)
tree_bytes=$(git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -n 1 | cut -f1)
untracked_bytes=$(git ls-files -z --others --exclude-standard | xargs -0 -r du -cb 2>/dev/null |
  tail -n 1 | cut -f1)
total=$((carry_bytes + tree_bytes + ${untracked_bytes:-0}))
mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }
echo
echo "the carried files need glibc >= ${glibc_need#GLIBC_}"
echo "$(find "$DEBS" -name '*.deb' | wc -l) packages in $DEBS: $(mib "$carry_bytes")" \
     "(list: $CARRY/MANIFEST.txt)"
echo "working tree: $(mib "$tree_bytes") tracked + $(mib "${untracked_bytes:-0}") untracked;" \
     "total that travels: $(mib "$total") of 64 MiB"
if [ "$total" -gt $((60 * 1048576)) ]; then
  echo "ERROR: over 60 MiB: the device tool takes at most 64 MiB" >&2
  exit 1
fi
echo
echo "Device tool call (run, from this repository's checkout):"
echo "  carry:   [\".gpu-carry\"]"
echo "  command: OUT=\$OUT bash scripts/gpu_verify.sh"
echo "  timeout_s: 600"
