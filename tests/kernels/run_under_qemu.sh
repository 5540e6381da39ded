#!/usr/bin/env bash
# The kernel suite on an emulated CPU without AVX-512 (qemu-user-static's EPYC-Rome model: Zen 2,
# AVX2 + FMA), whatever CPU the machine has: proves that no AVX-512 instruction runs where the CPU
# has none (qemu raises SIGILL on one), and that the avx2 level is what such a CPU chooses. Then a
# CPU below the floor (Nehalem: no AVX) must get the one-line message and exit status 1 from the
# strata binary, not SIGILL.
# usage: run_under_qemu.sh CPU_LEVELS_BINARY KERNEL_TEST_BINARY STRATA_BINARY [gtest args...]
set -uo pipefail
levels_bin=$1 test_bin=$2 strata_bin=$3
shift 3
if ! command -v qemu-x86_64-static >/dev/null; then
  echo "qemu-x86_64-static is missing (Debian qemu-user-static; scripts/install_deps.sh installs it)"
  [ -n "${CI:-}" ] && exit 1
  exit 77
fi
if [ "$(uname -m)" != x86_64 ]; then
  echo "not an x86-64 machine: nothing to emulate here"
  exit 77
fi
# TCG lacks a few of the model's features (xsavec, nrip-save, ...) and warns about each: not
# kernel-relevant, so the warnings are dropped from the log.
qemu=(qemu-x86_64-static -cpu EPYC-Rome)
levels=$("${qemu[@]}" "$levels_bin" 2>/dev/null)
echo "levels on the emulated EPYC-Rome: $levels"
if [ "$levels" != avx2 ]; then
  echo "FAILED: expected exactly avx2 on an AVX2 CPU without AVX-512"
  exit 1
fi
"${qemu[@]}" "$test_bin" "$@" 2> >(grep -v "TCG doesn't support" >&2) ||
  { echo "FAILED: the kernel suite under qemu (EPYC-Rome)"; exit 1; }

out=$(qemu-x86_64-static -cpu Nehalem "$strata_bin" --help 2>&1)
rc=$?
echo "below the floor (Nehalem): exit $rc: $out"
if [ $rc -ne 1 ] || ! grep -q "lacks AVX2 + FMA" <<<"$out"; then
  echo "FAILED: a CPU below the floor must get the message and exit status 1"
  exit 1
fi
echo "qemu: kernel suite passed at avx2 on EPYC-Rome; the floor message on Nehalem"
