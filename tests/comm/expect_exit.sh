#!/bin/bash
# Runs a command and checks how it ended: its exit status, that it ended within a time limit, and
# (optionally) that its output contains a pattern. For failure-path tests (a hung or dead rank).
# usage: expect_exit.sh <status|nonzero> <max_seconds (integer)> <grep -E pattern or ""> -- command [args...]
set -u
want_status=$1 max_seconds=$2 pattern=$3
shift 3
[ "$1" = "--" ] && shift
start_ms=$(($(date +%s%N) / 1000000))
# A safety net well past the limit, so that a regression fails the test instead of hanging ctest.
output=$(timeout -k 5 $((max_seconds + 20)) "$@" 2>&1)
status=$?
elapsed_ms=$(($(date +%s%N) / 1000000 - start_ms))
elapsed=$((elapsed_ms / 1000)).$(printf %03d $((elapsed_ms % 1000)))
echo "$output"
echo "--- exit status $status after ${elapsed} s"
fail=0
if [ "$want_status" = nonzero ]; then
  [ "$status" -ne 0 ] || { echo "FAIL: expected a non-zero exit status"; fail=1; }
else
  [ "$status" -eq "$want_status" ] || { echo "FAIL: expected exit status $want_status"; fail=1; }
fi
if [ "$elapsed_ms" -gt $((max_seconds * 1000)) ]; then
  echo "FAIL: took ${elapsed} s, more than $max_seconds s"
  fail=1
fi
if [ -n "$pattern" ] && ! grep -Eq -- "$pattern" <<<"$output"; then
  echo "FAIL: output lacks /$pattern/"
  fail=1
fi
exit $fail
