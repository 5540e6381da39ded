#!/usr/bin/env bash
# bench/train_vs_torch.sh ROUNDS times in a row (strata, the PyTorch peers, strata, ...), so that
# both sides see the same drift of a shared machine; prints each round's tokens/s, its best peer
# and the strata / best-peer ratio, and the median ratio. Its environment (PRECISION, ATTENTION,
# TORCH_PEERS, SKIP_PYPI_TORCH, STRATA_BIN, ...) goes through to each round.
#   ROUNDS=3 PRECISION=bf16 ATTENTION=flash bench/train_vs_torch_rounds.sh gpt2-124m 8
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
ratios=()
for r in $(seq 1 "$ROUNDS"); do
  STRATA_GEMM_PEAK=${STRATA_GEMM_PEAK:-skip} bash bench/train_vs_torch.sh "$@" >"$out" 2>&1 || true
  strata=$(awk '$1 == "strata" && $2 ~ /^[0-9]/ { print $2 }' "$out")
  # "best peer: NAME X tok/s; strata / best = R"
  peer=$(awk '$1 == "best" && $2 == "peer:" { print $3 }' "$out")
  torch=$(awk '$1 == "best" && $2 == "peer:" && $4 ~ /^[0-9]/ { print $4 }' "$out")
  if [[ -z "$strata" || -z "$torch" ]]; then
    echo "round $r: a side did not run; its output ends with:"; tail -n 8 "$out"; exit 1
  fi
  ratio=$(awk -v a="$strata" -v b="$torch" 'BEGIN { printf "%.3f", a / b }')
  ratios+=("$ratio")
  echo "round $r: strata $strata tokens/s, best peer $peer $torch tokens/s, strata / best $ratio"
done
printf '%s\n' "${ratios[@]}" | sort -n | awk '{ r[NR] = $1 } END {
  printf "median strata / best peer over %d rounds: %.3fx (min %.3f, max %.3f)\n", NR,
         (NR % 2) ? r[(NR + 1) / 2] : (r[NR / 2] + r[NR / 2 + 1]) / 2, r[1], r[NR] }'
