#!/usr/bin/env python3
"""Causal attention through PyTorch's fused kernels, for comparison with strata's own.

Times torch.nn.functional.scaled_dot_product_attention(is_causal=True) on bf16 q, k, v at the
shapes bench/bench_cuda.cu uses (GPT-2 124M, hd 64; llama-like GQA, hd 128), forcing each SDPA
backend in turn with torch.nn.attention.sdpa_kernel: FLASH_ATTENTION (FlashAttention-2),
CUDNN_ATTENTION (cuDNN's fused attention) and EFFICIENT_ATTENTION (xformers' memory-efficient
kernel). A backend that refuses a shape is listed as skipped, with its error. Forward and
forward+backward are timed with CUDA events: the median of --reps runs after --warmup runs.

TFLOP/s use bench_cuda's causal count: forward 2 * b * nh * t^2 * hd (two products of
2 t^2 hd each, halved by the mask), forward+backward 3.5x that (the backward's five products).

q, k, v are contiguous [b, heads, t, hd] leaves; GQA goes through enable_gqa=True, or, for a
backend that refuses it, k and v repeated to nh heads beforehand (outside the timing; marked
"kv rep"). The backward is torch.autograd.grad of out against a fixed random dout (no .grad
accumulation).

Usage: python3 bench/attention_vs_torch_gpu.py [--quick] [--reps N] [--warmup N]
Without torch or a CUDA device it says so and exits 0.
"""

import argparse
import statistics
import sys

SHAPES_QUICK = [
    # name, b, t, nh, nkv, hd
    ("gpt2 124M", 8, 1024, 12, 12, 64),
    ("llama-like (GQA 4)", 4, 2048, 32, 8, 128),
]
SHAPES_FULL = SHAPES_QUICK + [
    ("gpt2 124M", 16, 1024, 12, 12, 64),
    ("gpt2 124M, t 4096", 4, 4096, 12, 12, 64),
    ("llama-like (GQA 4)", 2, 4096, 32, 8, 128),
]


def causal_fwd_flops(b, t, nh, hd):
    return 4.0 * b * nh * t * t * hd / 2.0


def time_ms(torch, fn, warmup, reps):
    """Median milliseconds of fn() over reps runs (CUDA events), after warmup runs."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start = torch.cuda.Event(enable_timing=True)
        stop = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times)


def bench_backend(torch, backend, shape, warmup, reps):
    """(fwd_ms, fwd_bwd_ms, note), or raises if the backend cannot run the shape."""
    from torch.nn.attention import sdpa_kernel
    import torch.nn.functional as F

    _, b, t, nh, nkv, hd = shape
    gen = torch.Generator(device="cuda").manual_seed(1)

    def rand(heads):
        return torch.randn(b, heads, t, hd, device="cuda", dtype=torch.bfloat16, generator=gen)

    q, k, v = rand(nh), rand(nkv), rand(nkv)
    dout = rand(nh)
    note = ""

    def attempt(q, k, v, gqa):
        q, k, v = (x.detach().requires_grad_(True) for x in (q, k, v))
        kwargs = {"is_causal": True}
        if gqa:
            kwargs["enable_gqa"] = True

        def fwd():
            with torch.no_grad():
                return F.scaled_dot_product_attention(q, k, v, **kwargs)

        def fwd_bwd():
            out = F.scaled_dot_product_attention(q, k, v, **kwargs)
            return torch.autograd.grad(out, (q, k, v), dout)

        with sdpa_kernel([backend]):
            fwd_bwd()  # raises here if the backend refuses the shape
            torch.cuda.synchronize()
            return time_ms(torch, fwd, warmup, reps), time_ms(torch, fwd_bwd, warmup, reps)

    if nkv == nh:
        return (*attempt(q, k, v, False), note)
    try:
        return (*attempt(q, k, v, True), note)
    except Exception:  # noqa: BLE001 - a backend without enable_gqa: repeat the kv heads
        group = nh // nkv
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
        return (*attempt(q, k, v, False), "kv rep")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="two shapes (bench_cuda --quick's)")
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args()

    try:
        import torch
    except ImportError as e:
        print(f"attention_vs_torch_gpu: skipped: PyTorch is not installed ({e})")
        return 0
    if not torch.cuda.is_available():
        print(f"attention_vs_torch_gpu: skipped: torch {torch.__version__} sees no CUDA device")
        return 0
    try:
        from torch.nn.attention import SDPBackend
    except ImportError as e:
        print(f"attention_vs_torch_gpu: skipped: torch {torch.__version__} has no "
              f"torch.nn.attention.SDPBackend ({e})")
        return 0

    backends = []
    for name in ("FLASH_ATTENTION", "CUDNN_ATTENTION", "EFFICIENT_ATTENTION"):
        if hasattr(SDPBackend, name):
            backends.append((name, getattr(SDPBackend, name)))
        else:
            print(f"note: this torch has no SDPBackend.{name}")

    print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, cuDNN "
          f"{torch.backends.cudnn.version()}, device {torch.cuda.get_device_name(0)}")
    print("SDPA causal, bf16; TF/s = causal FLOPs (fwd 2 t^2 hd b nh, fwd+bwd 3.5x) / median time")
    header = (f"{'shape':<20} {'b':>3} {'t':>5} {'nh':>3} {'nkv':>3} {'hd':>4} "
              f"{'backend':<20} {'fwd ms':>8} {'fwd TF/s':>9} {'f+b ms':>8} {'f+b TF/s':>9}")
    print(header)
    print("-" * len(header))
    shapes = SHAPES_QUICK if args.quick else SHAPES_FULL
    for shape in shapes:
        name, b, t, nh, nkv, hd = shape
        flops = causal_fwd_flops(b, t, nh, hd)
        prefix = f"{name:<20} {b:>3} {t:>5} {nh:>3} {nkv:>3} {hd:>4}"
        for bname, backend in backends:
            try:
                fwd_ms, all_ms, note = bench_backend(torch, backend, shape, args.warmup, args.reps)
            except Exception as e:  # noqa: BLE001 - report and go on with the next backend
                reason = " ".join(str(e).split())[:100]
                print(f"{prefix} {bname:<20} skipped: {type(e).__name__}: {reason}")
                torch.cuda.empty_cache()
                continue
            label = bname + (f" ({note})" if note else "")
            print(f"{prefix} {label:<20} {fwd_ms:>8.3f} {flops / fwd_ms / 1e9:>9.1f} "
                  f"{all_ms:>8.3f} {3.5 * flops / all_ms / 1e9:>9.1f}")
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
