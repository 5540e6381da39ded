#!/usr/bin/env bash
# The long fuzzing run: builds the libFuzzer targets of tests/fuzz (scripts/fuzz_lib.sh) and
# fuzzes each one for FUZZ_SECONDS (default 600), one at a time, each on one core (nice 15), over
# a scratch copy of its corpus: the repository's tests/fuzz is only read. Prints a table (Markdown)
# of the figures libFuzzer reports at the end of each run: executions, executions per second,
# coverage (cov: edges, ft: features), the corpus it ended with, and findings. Findings are kept
# in the work directory with the log of each run; fix them, then add the input to tests/fuzz/<target>/
# as regress-<what> (scripts/test_fuzz.sh replays every one in CI).
#
# Usage: bench/fuzz.sh [--only NAME[,NAME...]] [--work DIR] [--out FILE.md] [--report]
#   --report  only print the table again from the logs of an earlier run in the work directory
# Environment: FUZZ_SECONDS (default 600), FUZZ_JOBS (build jobs, default nproc),
#              FUZZ_BUILD (build directory, default build-fuzz).
set -euo pipefail
WORK=/tmp/strata-fuzz-bench
OUT=/tmp/strata-fuzz-bench.md
ONLY=""
REPORT=0
while [ $# -gt 0 ]; do
  case "$1" in
    --only) ONLY=$2; shift 2 ;;
    --work) WORK=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --report) REPORT=1; shift ;;
    *) echo "usage: $0 [--only NAME[,NAME...]] [--work DIR] [--out FILE.md] [--report]" >&2; exit 2 ;;
  esac
done
WORK=$(realpath -m "$WORK")
OUT=$(realpath -m "$OUT")
cd "$(dirname "$0")/.."
source scripts/fuzz_lib.sh
seconds=${FUZZ_SECONDS:-600}
[ "$REPORT" = 1 ] || nice -n 15 bash -c 'source scripts/fuzz_lib.sh && fuzz_build'
targets=("${FUZZ_TARGETS[@]}")
if [ -n "$ONLY" ]; then IFS=, read -r -a targets <<<"$ONLY"; fi
mkdir -p "$WORK"
{
  echo "Fuzzing, $seconds s per target, one core each: $(lscpu | sed -n 's/^Model name: *//p'), $(date -u +%Y-%m-%d)"
  echo
  echo "| target | seconds | executions | exec/s | cov | ft | corpus (inputs/size) | findings |"
  echo "|---|---:|---:|---:|---:|---:|---:|---|"
} >"$OUT"
status=0
for name in "${targets[@]}"; do
  rc=0
  if [ "$REPORT" = 0 ]; then
    rm -rf "${WORK:?}/$name"
    nice -n 15 bash -c "source scripts/fuzz_lib.sh && fuzz_run $name $seconds $WORK/$name" || rc=$?
  fi
  # libFuzzer's own count of the seconds it ran ("Done N runs in S second(s)").
  secs=$(sed -n 's/^Done [0-9]* runs in \([0-9]*\) second.*/\1/p' "$WORK/$name/log" | tail -n 1)
  read -r execs rate cov ft corp <<<"$(fuzz_figures "$WORK/$name/log")"
  findings=$(find "$WORK/$name" -maxdepth 1 -type f \( -name 'crash-*' -o -name 'leak-*' -o \
             -name 'timeout-*' -o -name 'oom-*' -o -name 'slow-unit-*' \) -printf '%f ' | sed 's/ $//')
  if [ "$rc" -ne 0 ] || [ -n "$findings" ]; then status=1; fi
  echo "| $name | ${secs:-?} | $execs | $rate | $cov | $ft | $corp | ${findings:-none} |" >>"$OUT"
  tail -n 1 "$OUT"
done
echo
cat "$OUT"
echo "(logs and findings: $WORK/<target>/)"
exit "$status"
