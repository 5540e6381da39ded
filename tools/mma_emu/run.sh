#!/usr/bin/env bash
# Runs the tensor-core flash attention kernels (src/kernels/cuda/flash_attention_mma*.cu) on the
# CPU, under a host emulation of a CUDA block (emu.cc: one ucontext per thread, warp and block
# barriers, ldmatrix / mma.sync / shfl with their PTX-ISA semantics, cp.async as a synchronous
# copy), and checks out, lse, dq, dk, dv against the CPU bf16 kernels (check.cc). A check of the
# kernels' logic (fragment layouts, indexing, masking, tails, GQA, rounding points) for machines
# without a GPU; not of timing, races or the copy pipeline. ~30 s.
#
#   tools/mma_emu/run.sh [BUILD_DIR]   # a build with strata_kernels and strata_core (default build)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 "$root/tools/mma_emu/prepare.py" "$root" "$work"
flags=(-std=c++20 -O2 -fopenmp -w -I"$root/tools/mma_emu/shim" -I"$work/src" -I"$root/src")
for f in "$root/tools/mma_emu/emu.cc" "$work/src/kernels/cuda/flash_attention_mma.cc" \
  "$work/src/kernels/cuda/flash_attention_mma_bwd.cc" "$root/tools/mma_emu/check.cc"; do
  g++ "${flags[@]}" -c "$f" -o "$work/$(basename "$f" .cc).o"
done
g++ -fopenmp "$work"/*.o "$build/src/libstrata_kernels.a" "$build/src/libstrata_core.a" \
  -o "$work/check"
"$work/check"
