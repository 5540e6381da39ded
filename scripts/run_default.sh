#!/usr/bin/env bash
# README command 1: install, build, and run the main job on its built-in default: train the tiny
# model on the King James Bible (tokenizer, shards, training with progress, evaluation,
# checkpoint), then sample from the checkpoint.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
scripts/build.sh
scripts/corpus.sh
export GLIBC_TUNABLES=glibc.malloc.hugetlb=1
./build/strata train configs/tiny.toml "$@"
./build/strata generate runs/tiny/ckpt/latest --prompt "And God said" --max-new-tokens 120
