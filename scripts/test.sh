#!/usr/bin/env bash
# README command 2: install, check the layer contract and the format, build, and run the whole
# test suite with ctest. The two checks need only Python 3 and clang-format (both installed by
# install_deps.sh) and take seconds: they run before the build so that a violation fails fast.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
python3 scripts/check_layers.py  # includes and link lines against docs/ARCHITECTURE.md's table
scripts/check_format.sh          # clang-format --dry-run --Werror over src/ apps/ tests/ bench/
scripts/build.sh
ctest --test-dir build --output-on-failure -j2 --timeout 600
