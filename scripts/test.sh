#!/usr/bin/env bash
# README command 2: install, check the layer contract and the format, build, and run the whole
# test suite with ctest. The two checks need only Python 3 and clang-format (both installed by
# install_deps.sh) and take seconds: they run before the build so that a violation fails fast.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
python3 scripts/check_layers.py  # includes and link lines against docs/ARCHITECTURE.md's table
scripts/check_format.sh          # clang-format --dry-run --Werror over src/ apps/ tests/ bench/
# The venv of the transformers test's newer families (current torch from PyPI), made beside the
# build: mostly downloads, so it costs the build little.
mkdir -p build
scripts/hf_venv.sh > build/hf_venv.log 2>&1 &
venv_pid=$!
scripts/build.sh
wait "$venv_pid" || { cat build/hf_venv.log; exit 1; }
tail -n 2 build/hf_venv.log
ctest --test-dir build --output-on-failure -j2 --timeout 600
