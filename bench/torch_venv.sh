#!/usr/bin/env bash
# The current PyTorch from PyPI, CPU only, in a virtual environment: the second and third peers of
# bench/train_vs_torch.sh (eager with SDPA and fused AdamW, and torch.compile), beside Debian's
# python3-torch 1.13. Idempotent: an existing venv whose torch imports is kept.
#
#   bench/torch_venv.sh                       # venv at ${STRATA_TORCH_VENV:-$HOME/.cache/strata/torch-venv}
#   TORCH_VERSION=2.15.0 bench/torch_venv.sh  # a given version (default: the newest on PyPI)
#   STRATA_TORCH_PYTHON=/usr/bin/python3      # the interpreter the venv is made from (the default)
#   REINSTALL=1 bench/torch_venv.sh           # remove the venv first
#   TORCH_VENV_CHECK=matmul                   # skip the torch.compile check (scripts/hf_venv.sh)
#
# How: the Linux x86-64 wheel on PyPI is the CUDA build, and there is no CPU-only torch on PyPI
# (those wheels live on download.pytorch.org). Its libtorch.so has DT_NEEDED entries for
# libcudart, libcublas(Lt), libcudnn, libnccl, libcufile, libcusparseLt, libnvshmem_host, ...,
# so `pip install --no-deps torch` does not import ("libcufile.so.0: cannot open shared object
# file") unless the machine happens to carry those libraries: the nvidia-* and cuda-toolkit
# wheels are needed even on CPU. Only triton (the GPU kernel compiler, a Python package nothing
# links against; inductor's CPU backend generates C++ for g++ and OpenMP instead) is left out:
# the wheel is installed with --no-deps, then every requirement its own metadata lists (markers
# evaluated for this interpreter) except triton, with ordinary dependency resolution.
# The check at the end runs a matmul and a torch.compile'd function (needs g++ and Python.h).
# Measured 2026-12-01 (torch 2.15.0+cu132, Python 3.11): ~2.7 GB of wheels (torch 539 MB, cuDNN
# 519 MB, cuBLAS 405 MB, ...), 4.4 GiB installed, 4 min 50 s from an empty pip cache.
# Prints "torch <version>" and "python <venv python path>" last.
set -euo pipefail

VENV=${STRATA_TORCH_VENV:-$HOME/.cache/strata/torch-venv}
BASE_PY=${STRATA_TORCH_PYTHON:-}
if [[ -z "$BASE_PY" ]]; then
  if [[ -x /usr/bin/python3 ]]; then BASE_PY=/usr/bin/python3; else BASE_PY=$(command -v python3); fi
fi
VPY="$VENV/bin/python"
t_start=$SECONDS

check() {
  # The CPU checks: a matmul, and torch.compile (inductor, C++ codegen) of a small function
  # (~30 s of g++; left out with TORCH_VENV_CHECK=matmul, for a venv nothing compiles in).
  "$VPY" - "${TORCH_VENV_CHECK:-compile}" <<'EOF'
import sys
import torch
x = torch.randn(2, 2) @ torch.randn(2, 2)
assert x.shape == (2, 2)
import numpy  # noqa: F401
if sys.argv[1] == "matmul":
    sys.exit(0)
f = torch.compile(lambda a: torch.nn.functional.gelu(a) * 2 + 1)
a = torch.randn(64)
assert torch.allclose(f(a), torch.nn.functional.gelu(a) * 2 + 1, atol=1e-5)
EOF
}

if [[ "${REINSTALL:-0}" == 1 ]]; then
  rm -rf "$VENV"
fi
if [[ -x "$VPY" ]] && "$VPY" -c "import torch, numpy" 2>/dev/null; then
  echo "venv $VENV exists with torch $("$VPY" -c 'import torch; print(torch.__version__)')" \
       "(REINSTALL=1 to make it again)"
else
  mkdir -p "$(dirname "$VENV")"
  avail_kb=$(df -Pk "$(dirname "$VENV")" | awk 'NR == 2 { print $4 }')
  if (( avail_kb < 12 * 1024 * 1024 )); then
    echo "only $(( avail_kb / 1024 )) MiB free under $(dirname "$VENV"); the venv needs ~5 GiB" \
         "(torch and the CUDA libraries it links: ~2.7 GB of wheels, 4.4 GiB installed) plus pip's cache" >&2
    exit 1
  fi
  echo "-- venv $VENV from $BASE_PY ($("$BASE_PY" --version 2>&1))"
  "$BASE_PY" -m venv "$VENV"
  # --no-compile: pip would byte-compile every module of the 4.4 GiB (a minute of CPU beside the
  # build); Python compiles only what is imported, on first import.
  PIP=("$VPY" -m pip --disable-pip-version-check)
  INSTALL=(install --no-compile)
  VERSION=${TORCH_VERSION:-}
  if [[ -z "$VERSION" ]]; then
    VERSION=$("${PIP[@]}" index versions torch 2>/dev/null | sed -n 's/^torch (\(.*\))$/\1/p' | head -n1)
    [[ -n "$VERSION" ]] || { echo "pip index versions torch found no version" >&2; exit 1; }
  fi
  echo "-- torch==$VERSION from PyPI, without triton"
  "${PIP[@]}" "${INSTALL[@]}" --no-deps "torch==$VERSION"
  # The wheel's own requirements, minus the GPU-only ones.
  mapfile -t DEPS < <("$VPY" - <<'EOF'
import importlib.metadata as md
import re
from pip._vendor.packaging.requirements import Requirement
for r in md.requires("torch") or []:
    req = Requirement(r)
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue
    if req.name.lower() == "triton":
        continue
    print(str(req).split(";")[0].strip())
EOF
)
  echo "-- torch's requirements but triton: ${DEPS[*]} numpy"
  "${PIP[@]}" "${INSTALL[@]}" "${DEPS[@]}" numpy
  echo "(pip's resolver note that torch requires triton is expected: it is left out on purpose)"
fi

check || { echo "the venv's torch failed its CPU check (matmul, torch.compile)" >&2; exit 1; }
echo "ready in $(( SECONDS - t_start )) s"
echo "torch $("$VPY" -c 'import torch; print(torch.__version__)')"
echo "python $VPY"
