#!/usr/bin/env bash
# README command 2: install, check the layer contract, build, and run the whole test suite with
# ctest. The check needs only Python 3 (installed by install_deps.sh) and takes seconds: it runs
# before the build so that a violation fails fast.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
python3 scripts/check_layers.py  # includes and link lines against docs/ARCHITECTURE.md's table
scripts/build.sh
ctest --test-dir build --output-on-failure -j2 --timeout 600
