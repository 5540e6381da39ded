#!/usr/bin/env python3
"""Checks strata's TensorBoard event files with the real `tensorboard` package.

Usage: python3 tests/track/check_tensorboard.py build/strata SOURCE_DIR
Needs `pip install tensorboard` (scripts/install_deps.sh installs it). Trains 3 steps of
configs/tiny.toml on synthetic data in one process, then loads RUN_DIR/tensorboard with
TensorBoard's EventAccumulator and checks that every number of every metrics.jsonl line is a
scalar there, tagged by its path ("loss", "mem/params", "time/compute_s"), at the same step and
with the same value (rounded to float32, as the event stores it). Registered in ctest
(tests/CMakeLists.txt).
"""
import glob
import json
import math
import os
import re
import struct
import subprocess
import sys
import tempfile
import time

from tensorboard.backend.event_processing.event_accumulator import SCALARS, EventAccumulator
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader


def as_float32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def numeric_leaves(record, prefix=""):
    """The scalars strata writes for one metrics line: numbers (not booleans) of nested objects;
    null is a non-finite number (JSON has no NaN)."""
    out = {}
    for name, value in record.items():
        if not prefix and name == "step":
            continue
        tag = prefix + "/" + name if prefix else name
        if isinstance(value, dict):
            out.update(numeric_leaves(value, tag))
        elif isinstance(value, bool) or isinstance(value, (str, list)):
            continue
        elif value is None:
            out[tag] = math.nan
        elif isinstance(value, (int, float)):
            out[tag] = float(value)
    return out


def main():
    strata, src = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory() as work:
        run = os.path.join(work, "run")
        sets = ["model.n_layer=1", "model.d_model=32", "model.n_head=2", "model.vocab_size=300",
                "model.max_seq_len=32", "train.batch_size=2", "train.seq_len=32", "train.steps=3",
                "train.eval_every=2", "train.eval_batches=1", "data.source=synthetic",
                "sample.max_new_tokens=0", "run.dir=" + run]
        cmd = [strata, "train", os.path.join(src, "configs", "tiny.toml")]
        for s in sets:
            cmd += ["--set", s]
        start = time.time()
        done = subprocess.run(cmd, capture_output=True, text=True,
                              env=dict(os.environ, OMP_NUM_THREADS="2"))
        if done.returncode != 0:
            sys.exit(f"strata train failed ({done.returncode}):\n{done.stderr[-2000:]}")

        with open(os.path.join(run, "metrics.jsonl")) as f:
            records = [json.loads(line) for line in f]
        assert [r["step"] for r in records] == [1, 2, 3], [r["step"] for r in records]
        expected = {}  # tag -> [(step, value)]
        for r in records:
            for tag, value in numeric_leaves(r).items():
                expected.setdefault(tag, []).append((r["step"], value))
        for tag in ["loss", "lr", "grad_norm", "tokens_per_s", "mfu", "mem/params",
                    "mem/total", "time/compute_s"]:
            assert tag in expected, f"metrics.jsonl has no {tag}: {records[0]}"

        tb_dir = os.path.join(run, "tensorboard")
        files = glob.glob(os.path.join(tb_dir, "*"))
        assert len(files) == 1, files
        name = os.path.basename(files[0])
        assert re.fullmatch(r"events\.out\.tfevents\.\d+\..+", name), name
        assert abs(int(name.split(".")[3]) - start) < 600, name

        # The raw records: the first is the file version, each one's wall time is plausible.
        events = list(EventFileLoader(files[0]).Load())
        assert events[0].file_version == "brain.Event:2", events[0]
        for e in events:
            assert start - 5 <= e.wall_time <= time.time() + 5, e.wall_time

        acc = EventAccumulator(tb_dir, size_guidance={SCALARS: 0})
        acc.Reload()
        tags = set(acc.Tags()["scalars"])
        assert tags == set(expected), (f"only in TensorBoard: {sorted(tags - set(expected))}, "
                                       f"only in metrics.jsonl: {sorted(set(expected) - tags)}")
        checked = 0
        for tag, want in expected.items():
            got = [(s.step, s.value) for s in acc.Scalars(tag)]
            assert [s for s, _ in got] == [s for s, _ in want], (tag, got, want)
            for (step, value), (_, target) in zip(got, want):
                target = as_float32(target) if math.isfinite(target) else target
                # null in JSON is NaN or an infinity in the event.
                ok = (not math.isfinite(value) and math.isnan(target)) or math.isclose(
                    value, target, rel_tol=1e-6, abs_tol=1e-30)
                assert ok, f"{tag} at step {step}: TensorBoard {value}, metrics.jsonl {target}"
                checked += 1
        print(f"TensorBoard event file {name}: {len(tags)} tags, {checked} scalars match "
              f"metrics.jsonl")


if __name__ == "__main__":
    main()
