#!/usr/bin/env bash
# Installs everything strata needs on Debian 12 (Debian's packages; Hugging Face's Python
# libraries from PyPI for the interop tests). Idempotent. PyTorch comes from Debian (python3-torch,
# for /usr/bin/python3): the transformers interop test, bench/ and tools/torch_reference.py use
# it (`--with-torch`, once needed for it, is still accepted and adds nothing).
set -euo pipefail
packages=(
  build-essential cmake ninja-build pkg-config clang-format
  libdnnl-dev libopenblas-openmp-dev nlohmann-json3-dev libtomlplusplus-dev libcli11-dev
  googletest libgtest-dev libbenchmark-dev
  libsqlite3-dev                           # the model registry's index (strata registry)
  libhwy-dev                               # Google Highway: the kernels' SIMD, chosen at run time
  libxxhash-dev                            # xxHash: checkpoint and file checksums (XXH64, XXH3)
  libsimdjson-dev zlib1g-dev libzstd-dev zstd  # corpus readers: JSON Lines, gzip, zstd
  libutf8proc-dev libpcre2-dev             # HF tokenizer.json: NFC; split patterns without a matcher
  qemu-user-static                         # the kernel suite on an emulated AVX2-only CPU
  clang-14 libclang-rt-14-dev libomp-14-dev  # TSan build and libFuzzer targets (test_tsan.sh, test_fuzz.sh)
  openmpi-bin libopenmpi-dev libpmix-dev   # the CPU communication engine (PMIx for srun)
  slurm-wlm munge                          # single-node SLURM for the launcher tests
  bible-kjv                   # the default English corpus (King James Bible text)
  chromium                    # headless browser: the test that renders `strata report`
  libcurl4-openssl-dev        # the tracking client's HTTP(S) (src/track/http_client.cc)
  nginx-light openssl         # the MLflow-over-TLS test: nginx with TLS and basic auth in front
  iproute2 util-linux         # emulated hosts (ip netns, unshare): scripts/emulated_hosts.sh
)
# Reference, benchmark peer, and the transformers interop test (~165 MB download).
packages+=(python3-torch python3-numpy python3-pip python3-venv)
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
# transformers for the Hugging Face interop test (tests/train/check_hf_transformers.py), for
# Debian's python3 beside its python3-torch 1.13; 4.46 still supports torch 1.13 (pip: ~20-60 s).
if ! /usr/bin/python3 -c "import transformers, safetensors" 2>/dev/null; then
  /usr/bin/python3 -m pip install --quiet --disable-pip-version-check --break-system-packages \
    "transformers==4.46.3"
fi
# MLflow (server and client) for the MLflow test, PyYAML for the Kubernetes manifest test, and
# pyarrow for tools/parquet_to_jsonl.py and its test (mlflow brings it too).
if ! python3 -c "import mlflow, yaml, pyarrow" 2>/dev/null; then
  python3 -m pip install --quiet --disable-pip-version-check mlflow pyyaml pyarrow
fi
