#!/usr/bin/env bash
# CI: builds the libFuzzer targets of tests/fuzz with clang (ASan + UBSan, build-fuzz/) and runs
# each one over its corpus (the seeds and every regress-* input of a bug fuzzing found) and then
# fuzzes it for FUZZ_CI_SECONDS (default 10). Fails on any finding: a crash, a sanitizer report,
# an uncaught exception, a hang (10 s), an allocation over 512 MiB. The findings are left in
# /tmp/strata-fuzz-ci.XXXXXX/<target>/ with libFuzzer's log. bench/fuzz.sh is the long run.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/fuzz_lib.sh
seconds=${FUZZ_CI_SECONDS:-10}
start=$(date +%s)
fuzz_build
built=$(date +%s)
# One directory per run (two runs at once, e.g. from two checkouts, must not share one).
work=$(mktemp -d /tmp/strata-fuzz-ci.XXXXXX)
failed=()
for name in "${FUZZ_TARGETS[@]}"; do
  # The corpus alone first (-runs=0: each input once), so that a regression is named as such.
  if ! fuzz_run "$name" 0 "$work/$name" -runs=0; then
    echo "FAILED: fuzz_$name on its corpus tests/fuzz/$name (log: $work/$name/log)"
    tail -n 30 "$work/$name/log"
    failed+=("$name")
    continue
  fi
  # A fixed seed: CI explores the same mutations on the same code, so its verdict does not change
  # from one run to the next by chance (bench/fuzz.sh is the exploring run, with random seeds).
  if fuzz_run "$name" "$seconds" "$work/$name" -seed=1; then
    read -r execs rate cov ft corp <<<"$(fuzz_figures "$work/$name/log")"
    echo "fuzz_$name: ${seconds} s, $execs runs ($rate/s), cov $cov ft $ft, corpus $corp"
  else
    echo "FAILED: fuzz_$name found an input (in $work/$name/, log: $work/$name/log)"
    tail -n 30 "$work/$name/log"
    failed+=("$name")
  fi
done
end=$(date +%s)
echo "fuzz: build $((built - start)) s, runs $((end - built)) s"
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: ${#failed[@]} target(s) failed: ${failed[*]}"
  exit 1
fi
