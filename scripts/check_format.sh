#!/usr/bin/env bash
# One format (docs/ARCHITECTURE.md, under the layer table): every tracked C++ file (.h .cc .cu
# .cuh) of src/, apps/, tests/ and bench/ must be as clang-format (.clang-format at the root)
# writes it. Lists the files that differ, with their diff (the first lines), and exits 1; exits 2
# without clang-format. Fix a file with `clang-format -i FILE`; `// clang-format off` / `on` keeps
# a deliberate layout (src/kernels/cpu/reference.cc's instantiation macro, the generated
# src/data/unicode_tables.cc, one macro call in src/kernels/cpu/adamw.cc).
#
# The tree is formatted with clang-format 14 (Debian 12's, which scripts/install_deps.sh installs,
# as CI runs it); other versions break some lines differently, so they get a warning.
#
# Usage: scripts/check_format.sh [FILE...]   (default: every tracked file as above)
# Environment: CLANG_FORMAT (default clang-format).
set -euo pipefail
cd "$(dirname "$0")/.."

CLANG_FORMAT=${CLANG_FORMAT:-clang-format}
if ! command -v "$CLANG_FORMAT" >/dev/null 2>&1; then
  echo "check_format: $CLANG_FORMAT not found (scripts/install_deps.sh installs clang-format)" >&2
  exit 2
fi
version=$("$CLANG_FORMAT" --version)
major=$(sed -n 's/.*version \([0-9][0-9]*\).*/\1/p' <<<"$version")
if [ "$major" != 14 ]; then
  echo "check_format: warning: $version; the tree is formatted with clang-format 14 (Debian 12's):" \
       "another version may report lines that 14 accepts" >&2
fi

files=()
if [ $# -gt 0 ]; then
  files=("$@")
elif git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t files < <(git ls-files -- src apps tests bench | grep -E '\.(h|cc|cu|cuh)$')
else  # an exported tree without .git
  mapfile -t files < <(find src apps tests bench -type f \
                         \( -name '*.h' -o -name '*.cc' -o -name '*.cu' -o -name '*.cuh' \) | sort)
fi
if [ ${#files[@]} -eq 0 ]; then
  echo "check_format: no files to check" >&2
  exit 2
fi

# One clang-format for all files; each violation is reported as FILE:LINE:COL: error: ...
out=$("$CLANG_FORMAT" --dry-run --Werror "${files[@]}" 2>&1) && rc=0 || rc=$?
mapfile -t bad < <(grep -oE '^[^: ]+:[0-9]+:[0-9]+: error: code should be clang-formatted' \
                     <<<"$out" | cut -d: -f1 | sort -u)
if [ $rc -ne 0 ] && [ ${#bad[@]} -eq 0 ]; then
  echo "check_format: $CLANG_FORMAT failed (exit $rc):" >&2
  echo "$out" | head -20 >&2
  exit 2
fi
if [ ${#bad[@]} -gt 0 ]; then
  echo "check_format: ${#bad[@]} of ${#files[@]} files are not clang-formatted" \
       "(${version#*version }):"
  printf '  %s\n' "${bad[@]}"
  echo
  for f in "${bad[@]}"; do
    "$CLANG_FORMAT" "$f" | diff -u --label "$f" --label "$f (clang-format)" "$f" - || true
  done | head -120 || true  # (the loop may die of SIGPIPE once head has its lines)
  echo
  echo "check_format: fix with: $CLANG_FORMAT -i ${bad[*]}"
  exit 1
fi
echo "check_format: OK (${#files[@]} files, ${version#*version })"
