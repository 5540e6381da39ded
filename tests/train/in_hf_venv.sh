#!/usr/bin/env bash
# Runs a Python script with scripts/hf_venv.sh's interpreter: exits 77 (skipped) when that venv is
# missing, or 1 when CI is set (where scripts/test.sh makes it).
VPY=${STRATA_TORCH_VENV:-$HOME/.cache/strata/torch-venv}/bin/python
if [[ ! -x "$VPY" ]]; then
  echo "${CI:+FAILED: }no venv python at $VPY: scripts/hf_venv.sh makes it"
  [[ -n "${CI:-}" ]] && exit 1
  exit 77
fi
exec "$VPY" "$@"
