#!/usr/bin/env python3
"""Whether two runs ended with the same parameters, bit for bit: the tensor files of their
checkpoint at STEP (RUN/ckpt/step_<STEP>/*.safetensors) have equal SHA-256 digests. Exit 1 when
they differ or either is missing. The fault tests compare a run that was stopped and resumed with
one that never stopped.

Usage: same_checkpoint.py RUN_A RUN_B STEP
"""
import glob
import hashlib
import os
import sys


def digests(run, step):
    ck = os.path.join(run, "ckpt", "step_%08d" % step)
    return {os.path.basename(f): hashlib.sha256(open(f, "rb").read()).hexdigest()
            for f in glob.glob(os.path.join(ck, "*.safetensors"))}


a_run, b_run, step = sys.argv[1], sys.argv[2], int(sys.argv[3])
a, b = digests(a_run, step), digests(b_run, step)
if not a or a != b:
    sys.exit(f"the checkpoints at step {step} differ (or are missing):\n  {a_run}: {a}\n  {b_run}: {b}")
print(f"step {step}: {len(a)} tensor files, bitwise equal")
