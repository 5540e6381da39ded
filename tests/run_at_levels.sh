#!/usr/bin/env bash
# Runs one gtest binary once per CPU kernel level this machine supports (STRATA_CPU_ISA), except
# the best one, which the ordinary ctest entries of the same binary already run. Every level must
# pass; a level the CPU lacks is named as not runnable here (not a pass, not a failure: the qemu
# and aarch64 runs cover what they can, see docs/ARCHITECTURE.md).
# usage: run_at_levels.sh CPU_LEVELS_BINARY TEST_BINARY [gtest args...]
set -uo pipefail
levels_bin=$1
test_bin=$2
shift 2
mapfile -t levels < <("$levels_bin")
if [ ${#levels[@]} -eq 0 ]; then
  echo "run_at_levels: $levels_bin listed no kernel level" >&2
  exit 1
fi
all="avx512bf16 avx512 avx2"
[ "$(uname -m)" = aarch64 ] && all="sve2 sve neon"
for l in $all; do
  case " ${levels[*]} " in *" $l "*) ;; *) echo "level $l: not runnable on this CPU ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'))" ;; esac
done
failed=0
ran=()
for l in "${levels[@]:1}"; do
  echo "=== STRATA_CPU_ISA=$l $(basename "$test_bin") $*"
  if STRATA_CPU_ISA=$l "$test_bin" "$@" > "/tmp/run_at_levels.$$.$l.log" 2>&1; then
    tail -n 3 "/tmp/run_at_levels.$$.$l.log"
    ran+=("$l")
  else
    cat "/tmp/run_at_levels.$$.$l.log"
    echo "=== FAILED at level $l"
    failed=1
  fi
  rm -f "/tmp/run_at_levels.$$.$l.log"
done
echo "run_at_levels: best level ${levels[0]} runs in the ordinary tests; also ran at: ${ran[*]:-none}"
exit $failed
