#!/usr/bin/env python3
"""Per-layout step time of strata's model parallelism, split into compute, exposed communication
and pipeline bubble, with each pipeline run's measured bubble next to the formula.

Runs `strata train` under mpirun for each layout of 2 and 4 ranks on the same model and global
batch (synthetic tokens), and reads the last steps of metrics.jsonl (rank 0's view; the bubble is
averaged over the pipeline ranks). Usage:

    python3 bench/layouts.py [--build build] [--steps 8] [--ranks 2,4]

Timings on shared 2-core machines are noisy, and 4 ranks oversubscribe the 2 cores (each rank
gets half a core, so absolute times double); compare rows of one run, not runs.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

MODEL = [
    "model.family=gpt2", "model.n_layer=8", "model.n_head=8", "model.d_model=256",
    "model.vocab_size=8192", "model.max_seq_len=128", "train.seq_len=128", "train.batch_size=4",
    "data.source=synthetic", "train.eval_every=0", "train.eval_batches=1",
    "train.checkpoint_every=0", "run.resume=none", "system.threads=1", "sample.max_new_tokens=0",
]

# (name, ranks, overrides); micro-batches per step are 8 for every layout (same global batch per
# data-parallel replica).
LAYOUTS = [
    ("dp=2", 2, ["parallel.dp=2"]),
    ("tp=2", 2, ["parallel.tp=2"]),
    ("tp=2 sp", 2, ["parallel.tp=2", "parallel.sp=true"]),
    ("pp=2 gpipe", 2, ["parallel.pp=2", "parallel.schedule=gpipe"]),
    ("pp=2 1f1b", 2, ["parallel.pp=2", "parallel.schedule=1f1b"]),
    ("pp=2 interleaved v=2", 2, ["parallel.pp=2", "parallel.schedule=interleaved", "parallel.vpp=2"]),
    ("dp=4", 4, ["parallel.dp=4", "parallel.zero=1"]),
    ("tp=2 dp=2", 4, ["parallel.tp=2", "parallel.dp=2", "parallel.zero=1"]),
    ("tp=2 pp=2", 4, ["parallel.tp=2", "parallel.pp=2"]),
    ("tp=2 pp=2 sp", 4, ["parallel.tp=2", "parallel.pp=2", "parallel.sp=true"]),
    ("pp=4 1f1b", 4, ["parallel.pp=4"]),
    ("pp=4 interleaved v=2", 4, ["parallel.pp=4", "parallel.schedule=interleaved", "parallel.vpp=2"]),
    ("tp=4", 4, ["parallel.tp=4"]),
]


def run(build, ranks, overrides, steps, micro):
    with tempfile.TemporaryDirectory() as d:
        sets = MODEL + [f"train.steps={steps}", f"train.grad_accum={micro}", f"run.dir={d}"] + overrides
        cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--mca", "btl", "self,vader",
               "-np", str(ranks), os.path.join(build, "strata"), "train",
               os.path.join(os.path.dirname(__file__), "..", "configs", "tiny.toml")]
        for s in sets:
            cmd += ["--set", s]
        env = dict(os.environ, OMP_NUM_THREADS="1")
        subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        lines = [json.loads(l) for l in open(os.path.join(d, "metrics.jsonl"))]
    return lines[len(lines) // 2:]  # the second half: warmed up


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--micro", type=int, default=8)
    ap.add_argument("--ranks", default="2,4")
    ap.add_argument("--vocab", type=int, default=8192,
                    help="a small vocabulary (e.g. 256) balances the pipeline stages: the first "
                         "and last also run the embedding and the head")
    ap.add_argument("--only", default="", help="run the layouts whose name contains this")
    a = ap.parse_args()
    wanted = {int(r) for r in a.ranks.split(",")}
    MODEL[:] = [x if not x.startswith("model.vocab_size=") else f"model.vocab_size={a.vocab}"
                for x in MODEL]
    print(f"{'layout':24} {'ranks':>5} {'step ms':>8} {'tok/s':>7} {'compute':>8} {'tp comm':>8} "
          f"{'dp comm':>8} {'bubble':>7} {'bubble meas.':>12} {'formula':>8}")
    for name, ranks, overrides in LAYOUTS:
        if ranks not in wanted or a.only not in name:
            continue
        try:
            m = run(a.build, ranks, overrides, a.steps, a.micro)
        except subprocess.CalledProcessError as e:
            print(f"{name:24} failed: {e.stderr.decode()[-300:]}", file=sys.stderr)
            continue
        avg = lambda f: sum(f(x) for x in m) / len(m)
        step = avg(lambda x: x["step_ms"]) / 1e3
        share = lambda key: 100 * avg(lambda x: x["time"].get(key, 0.0)) / step
        pipe = m[-1].get("pipeline")
        meas = f"{avg(lambda x: x['pipeline']['bubble_fraction']):.3f}" if pipe else "-"
        formula = f"{pipe['bubble_formula']:.3f}" if pipe else "-"
        print(f"{name:24} {ranks:>5} {1e3 * step:8.0f} {avg(lambda x: x['tokens_per_s']):7.0f} "
              f"{share('compute_s'):7.1f}% {share('tp_comm_s'):7.1f}% {share('comm_exposed_s'):7.1f}% "
              f"{share('bubble_s'):6.1f}% {meas:>12} {formula:>8}")


if __name__ == "__main__":
    main()
