#!/usr/bin/python3
"""torch float32 GEMM throughput: the ceiling the PyTorch peer of the training benchmark runs on.

    /usr/bin/python3 bench/gemm_peak.py --threads 2 [--shape 1024x768x3072 ...]

Shapes are MxKxN: C[M,N] = A[M,K] @ B[K,N], the shapes of one linear layer's forward on M tokens
(the default set covers a gpt2-124m block: qkv, attn out, mlp fc, mlp proj). Each shape is timed
as the best mean over several repetitions; prints one JSON line with GFLOP/s per shape, the peak
(best) and the BLAS library torch loaded.
"""
import argparse
import json
import time

import torch

from torch_blas import blas_info


def time_mm(m, k, n, min_time):
    a = torch.randn(m, k)
    b = torch.randn(k, n)
    c = torch.empty(m, n)
    for _ in range(3):
        torch.mm(a, b, out=c)
    reps = 1
    while True:  # calibrate so that one repetition takes >= min_time / 5
        t0 = time.perf_counter()
        for _ in range(reps):
            torch.mm(a, b, out=c)
        dt = time.perf_counter() - t0
        if dt >= min_time / 5 or reps >= 1 << 16:
            break
        reps *= 2
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(reps):
            torch.mm(a, b, out=c)
        best = min(best, (time.perf_counter() - t0) / reps)
    return 2.0 * m * k * n / best * 1e-9


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--shape", action="append",
                    help="MxKxN (repeatable); default 1024x768x2304, 1024x768x768, "
                         "1024x768x3072, 1024x3072x768")
    ap.add_argument("--min-time", type=float, default=1.0, help="seconds per shape (approx.)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    shapes = args.shape or ["1024x768x2304", "1024x768x768", "1024x768x3072", "1024x3072x768"]
    rates = {}
    for s in shapes:
        m, k, n = (int(x) for x in s.lower().split("x"))
        rates[s] = round(time_mm(m, k, n, args.min_time), 1)
    print(json.dumps({"gemm_gflops": max(rates.values()), "shapes": rates,
                      "threads": torch.get_num_threads(), "blas": blas_info()}))


if __name__ == "__main__":
    main()
