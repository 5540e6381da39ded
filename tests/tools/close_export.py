#!/usr/bin/env python3
"""Whether two Hugging Face exports (`strata export CKPT --hf DIR`) hold the same parameters within
a tolerance: every tensor of model.safetensors, |a - b| <= atol + rtol * |b|. For runs whose
layouts differ (an elastic restart on fewer ranks sums gradients in another order), where bitwise
equality (same_checkpoint.py) cannot hold. Prints the largest difference; exit 1 beyond it.

Usage: close_export.py HF_A HF_B ATOL RTOL
"""
import os
import sys

import numpy as np
from safetensors.numpy import load_file

a_dir, b_dir, atol, rtol = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
a = load_file(os.path.join(a_dir, "model.safetensors"))
b = load_file(os.path.join(b_dir, "model.safetensors"))
if a.keys() != b.keys():
    sys.exit(f"the exports hold different tensors: {sorted(a.keys() ^ b.keys())}")
worst, where, bad = 0.0, "", []
for name in sorted(a):
    x, y = a[name].astype(np.float64), b[name].astype(np.float64)
    if x.shape != y.shape:
        sys.exit(f"{name}: shapes {x.shape} and {y.shape}")
    diff = np.abs(x - y)
    if diff.size and diff.max() > worst:
        worst, where = float(diff.max()), name
    if np.any(diff > atol + rtol * np.abs(y)):
        bad.append(name)
print(f"{len(a)} tensors; largest difference {worst:.3g} ({where}); atol {atol:g}, rtol {rtol:g}")
if bad:
    sys.exit(f"beyond the tolerance: {', '.join(bad)}")
