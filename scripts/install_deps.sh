#!/usr/bin/env bash
# Installs everything strata needs on Debian 12 (Debian's packages; Hugging Face's Python
# libraries from PyPI for the interop tests). Idempotent. `--with-torch` adds PyTorch from Debian
# (/usr/bin/python3), needed only by bench/ and tools/torch_reference.py, not by the tests.
set -euo pipefail
with_torch=0
[ "${1:-}" = "--with-torch" ] && with_torch=1
packages=(
  build-essential cmake ninja-build pkg-config clang-format
  libdnnl-dev libopenblas-openmp-dev nlohmann-json3-dev libtomlplusplus-dev libcli11-dev
  googletest libgtest-dev libbenchmark-dev
  openmpi-bin libopenmpi-dev libpmix-dev   # the CPU communication engine (PMIx for srun)
  slurm-wlm munge                          # single-node SLURM for the launcher tests
  bible-kjv                   # the default English corpus (King James Bible text)
)
[ $with_torch -eq 1 ] && packages+=(python3-torch python3-numpy)  # reference and benchmark peer
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get -o DPkg::Lock::Timeout=900 install -y -qq \
    --no-install-recommends "${missing[@]}" >/dev/null
fi
# Hugging Face's Python libraries and TensorBoard, for the interoperability tests (into the
# default python3).
if ! python3 -c "import safetensors, tokenizers, numpy, tensorboard" 2>/dev/null; then
  python3 -m pip install --quiet --disable-pip-version-check safetensors tokenizers numpy \
    tensorboard
fi
