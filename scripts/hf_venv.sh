#!/usr/bin/env bash
# The interpreter for the transformers interop test's newer families (tests/CMakeLists.txt,
# python_hf_transformers_new_families: llama3, qwen3, mixtral, qwen3_moe; transformers 5.24.0 has
# all four, Qwen3 and Qwen3-MoE need >= 4.51, Mixtral >= 4.36), which needs a torch newer
# than Debian's 1.13, so the test runs in bench/torch_venv.sh's venv (current PyTorch from PyPI)
# with transformers and safetensors added, at pinned versions. Idempotent; scripts/test.sh runs it
# in the background during the build (~3-5 min from an empty pip cache, mostly downloads).
#
#   scripts/hf_venv.sh    # venv at ${STRATA_TORCH_VENV:-$HOME/.cache/strata/torch-venv}
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${STRATA_TORCH_VENV:-$HOME/.cache/strata/torch-venv}
STRATA_TORCH_VENV=$VENV TORCH_VERSION=${TORCH_VERSION:-2.15.0} TORCH_VENV_CHECK=matmul \
  bench/torch_venv.sh
VPY="$VENV/bin/python"
if ! "$VPY" -c "import transformers, safetensors, sys
sys.exit(tuple(int(x) for x in transformers.__version__.split('.')[:2]) < (4, 51))" 2>/dev/null; then
  "$VPY" -m pip install --quiet --no-compile --disable-pip-version-check "transformers==5.24.0" \
    "safetensors==0.8.0"
fi
echo "transformers $("$VPY" -c 'import transformers; print(transformers.__version__)')"
echo "python $VPY"
