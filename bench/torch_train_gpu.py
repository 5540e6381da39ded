#!/usr/bin/env python3
"""PyTorch peer of strata's GPU training benchmark: GPT-2 on random tokens, on one CUDA device,
at PyTorch's best, plus the device's measured bf16 matmul rate (the MFU denominator).

    python3 bench/torch_train_gpu.py --batch 16 --seq-len 1024 --steps 30 --warmup-steps 5

The model is bench/torch_train.py's GPT-2 (same parameters and names: token embedding tied to
the head, learned positions, pre-norm blocks with fused q|k|v, GELU(tanh) MLP, biases, LayerNorm
eps 1e-5), written the way PyTorch runs fastest on a GPU (nanoGPT's recipe):
  - float32 parameters under torch.autocast(cuda, bfloat16) (PyTorch's mixed precision; the
    AdamW update stays f32 on the f32 parameters),
  - F.scaled_dot_product_attention(is_causal=True) (FlashAttention-2 / cuDNN kernels),
  - AdamW(fused=True), decay on matrices only, clip_grad_norm_(1.0),
  - TF32 for the remaining f32 matmuls (torch.set_float32_matmul_precision("high")),
  - torch.compile (default mode) when it works; otherwise eager, with the reason in the output
    ("compile": "eager: <error>"). --compile off skips it.
Before training it times an 8192^3 bf16 matmul (torch.matmul, CUDA events, median of --mm-iters)
and reports MFU against that rate. FLOPs per token = 6*N + 12*L*C*T with N the parameter count
WITHOUT the position table (as strata's trainer and bench/torch_train.py count).

Prints one JSON line: tokens_per_s, step_ms (mean over the steps after --warmup-steps),
step_ms_min, losses, mm_tflops, mfu (against mm_tflops), compile, compile_s, peak_mem_gib, ...
Exit status: 0 when it trained; 4 when there is no CUDA device (prints
"no CUDA device: <reason>" and a JSON line {"error": "no CUDA device", ...}); 1 otherwise.

--device cpu --smoke runs the same code on the CPU with a tiny model, to test this script where
there is no GPU (not a benchmark: autocast(cpu), timing by the clock; on torch < 2.0 without
F.scaled_dot_product_attention, a manual causal attention stands in).
"""
import argparse
import json
import math
import statistics
import sys
import time

NO_DEVICE_EXIT = 4


def no_device(reason, torch_version):
    print("no CUDA device: %s" % reason, file=sys.stderr)
    print(json.dumps({"error": "no CUDA device", "reason": reason, "torch": torch_version}))
    sys.exit(NO_DEVICE_EXIT)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n-layer", type=int, default=12)
    ap.add_argument("--n-head", type=int, default=12)
    ap.add_argument("--d-model", type=int, default=768)
    ap.add_argument("--vocab", type=int, default=50304)
    ap.add_argument("--seq-len", type=int, default=1024)
    ap.add_argument("--max-seq-len", type=int, default=1024, help="position table rows")
    ap.add_argument("--batch", type=int, default=16, help="micro-batch (sequences per step)")
    ap.add_argument("--steps", type=int, default=30, help="total steps, warm-up included")
    ap.add_argument("--warmup-steps", type=int, default=5, help="untimed (compilation happens here)")
    ap.add_argument("--lr", type=float, default=6e-4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--compile", choices=["auto", "off"], default="auto")
    ap.add_argument("--mm-size", type=int, default=8192, help="0: skip the matmul measurement")
    ap.add_argument("--mm-iters", type=int, default=20)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--smoke", action="store_true", help="allow --device cpu (script test only)")
    ap.add_argument("--verbose", action="store_true", help="every step on stderr")
    a = ap.parse_args()
    a.max_seq_len = max(a.max_seq_len, a.seq_len)
    if a.steps <= a.warmup_steps:
        ap.error("--steps must exceed --warmup-steps")

    try:
        import torch
    except ImportError as e:
        print("no torch: %s" % e, file=sys.stderr)
        return 1
    if not a.device.startswith("cuda"):
        if not (a.device == "cpu" and a.smoke):
            ap.error("this is the GPU peer; bench/torch_train.py is the CPU one "
                     "(--device cpu --smoke only tests this script)")
        return train(a, torch)
    # Decided before anything touches the device: a clear line, not a traceback.
    try:
        available = torch.cuda.is_available()
        count = torch.cuda.device_count() if available else 0
    except Exception as e:  # a broken driver raises here on some versions
        no_device("torch.cuda raised %s: %s" % (type(e).__name__, e), torch.__version__)
    if not available or count == 0:
        no_device("torch %s, torch.version.cuda=%s, torch.cuda.is_available()=False"
                  % (torch.__version__, getattr(torch.version, "cuda", None)), torch.__version__)
    return train(a, torch)


def measure_matmul(torch, n, iters, dev):
    """Median bf16 n^3 matmul rate in TFLOP/s (CUDA events around each call)."""
    a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    c = torch.empty(n, n, device=dev, dtype=torch.bfloat16)
    for _ in range(3):
        torch.matmul(a, b, out=c)
    cuda = dev.type == "cuda"
    if cuda:
        torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        if not cuda:  # --smoke on the CPU
            t0 = time.perf_counter()
            torch.matmul(a, b, out=c)
            times.append(time.perf_counter() - t0)
            continue
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        torch.matmul(a, b, out=c)
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) / 1e3)
    del a, b, c
    med = statistics.median(times)
    return 2.0 * n ** 3 / med / 1e12, min(times), med


def train(a, torch):
    import torch.nn as nn
    import torch.nn.functional as F

    dev = torch.device(a.device)
    cuda = dev.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    if cuda:
        torch.cuda.set_device(dev)
        props_name = torch.cuda.get_device_properties(dev).name
    else:
        props_name = "cpu (--smoke)"
        a.mm_size = min(a.mm_size, 512)
    torch.manual_seed(a.seed)
    torch.set_float32_matmul_precision("high")  # TF32 for what is left in f32
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True

    mm = None
    if a.mm_size > 0:
        tflops, tmin, tmed = measure_matmul(torch, a.mm_size, a.mm_iters, dev)
        mm = {"size": a.mm_size, "iters": a.mm_iters, "tflops_median": round(tflops, 1),
              "tflops_best": round(2.0 * a.mm_size ** 3 / tmin / 1e12, 1),
              "ms_median": round(tmed * 1e3, 3)}

    C, H, L, V, T = a.d_model, a.n_head, a.n_layer, a.vocab, a.seq_len
    hd = C // H
    sdpa = getattr(F, "scaled_dot_product_attention", None)
    if sdpa is None and cuda:
        print("torch %s has no F.scaled_dot_product_attention" % torch.__version__, file=sys.stderr)
        return 1

    def attention(q, k, v):  # [B, H, T, hd], causal
        if sdpa is not None:
            return sdpa(q, k, v, is_causal=True)
        s = (q @ k.transpose(-1, -2)) * hd ** -0.5  # torch < 2.0, --smoke only
        mask = torch.ones(s.shape[-2:], dtype=torch.bool, device=s.device).triu(1)
        return torch.softmax(s.masked_fill(mask, float("-inf")), dim=-1) @ v

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn_norm = nn.LayerNorm(C, eps=1e-5)
            self.qkv = nn.Linear(C, 3 * C, bias=True)
            self.o = nn.Linear(C, C, bias=True)
            self.mlp_norm = nn.LayerNorm(C, eps=1e-5)
            self.fc = nn.Linear(C, 4 * C, bias=True)
            self.proj = nn.Linear(4 * C, C, bias=True)

        def forward(self, x):
            B, T_, _ = x.shape
            q, k, v = self.qkv(self.attn_norm(x)).view(B, T_, 3, H, hd).permute(2, 0, 3, 1, 4)
            y = attention(q, k, v)
            x = x + self.o(y.transpose(1, 2).reshape(B, T_, C))
            return x + self.proj(F.gelu(self.fc(self.mlp_norm(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(V, C)
            self.pos_embed = nn.Embedding(a.max_seq_len, C)
            self.layers = nn.ModuleList(Block() for _ in range(L))
            self.final_norm = nn.LayerNorm(C, eps=1e-5)
            for p in self.parameters():
                if p.dim() >= 2:
                    nn.init.normal_(p, std=0.02)

        def forward(self, tokens, targets):
            B, T_ = tokens.shape
            x = self.embed(tokens) + self.pos_embed.weight[:T_]
            for layer in self.layers:
                x = layer(x)
            logits = F.linear(self.final_norm(x), self.embed.weight)  # tied head
            return F.cross_entropy(logits.float().view(B * T_, V), targets.reshape(B * T_))

    model = GPT().to(dev)
    params = list(model.parameters())
    n_params = sum(p.numel() for p in params)
    n_nopos = n_params - model.pos_embed.weight.numel()
    flops_per_token = 6 * n_nopos + 12 * L * C * T
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}]
    try:
        opt = torch.optim.AdamW(groups, lr=a.lr, betas=(0.9, 0.95), eps=1e-8, fused=True)
        optimizer = "AdamW(fused=True)"
    except (TypeError, RuntimeError, ValueError) as e:
        opt = torch.optim.AdamW(groups, lr=a.lr, betas=(0.9, 0.95), eps=1e-8, foreach=True)
        optimizer = "AdamW(foreach=True): fused refused: %s" % e

    compiled, compile_note = model, "off"
    if a.compile == "auto":
        try:
            compiled = torch.compile(model)  # AttributeError on torch < 2.0
            compile_note = "torch.compile"
        except Exception as e:  # e.g. no compile support on this platform
            compiled, compile_note = model, "eager: torch.compile raised %s: %s" % (
                type(e).__name__, str(e).splitlines()[0] if str(e) else "")

    gen = torch.Generator(device=dev)
    gen.manual_seed(a.seed + 1)

    def step_once(m):
        tok = torch.randint(0, V, (a.batch, T + 1), device=dev, generator=gen)
        with torch.autocast(device_type=dev.type, dtype=torch.bfloat16):
            loss = m(tok[:, :-1].contiguous(), tok[:, 1:].contiguous())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    compile_s = None
    times, losses = [], []
    if cuda:
        torch.cuda.reset_peak_memory_stats(dev)
    for step in range(a.steps):
        sync()
        t0 = time.perf_counter()
        try:
            loss = step_once(compiled)
        except Exception as e:
            if compiled is model:
                raise
            # torch.compile fails at the first call (no compiler, inductor error): eager instead.
            compile_note = "eager: torch.compile failed: %s: %s" % (
                type(e).__name__, (str(e).splitlines() or [""])[0][:300])
            print("torch.compile failed, running eager: %s" % compile_note, file=sys.stderr)
            compiled = model
            opt.zero_grad(set_to_none=True)
            sync()
            t0 = time.perf_counter()
            loss = step_once(compiled)
        lv = loss.item()  # synchronizes
        dt = time.perf_counter() - t0
        if step == 0 and compiled is not model:
            compile_s = round(dt, 1)
        losses.append(lv)
        if step >= a.warmup_steps:
            times.append(dt)
        if a.verbose:
            print("step %d loss %.4f %.1f ms %.0f tok/s" % (step, lv, dt * 1e3, a.batch * T / dt),
                  file=sys.stderr)
        if not math.isfinite(lv):
            print("loss is not finite at step %d" % step, file=sys.stderr)
            return 1
    mean = sum(times) / len(times)
    tps = a.batch * T / mean
    out = {
        "tokens_per_s": round(tps, 1), "step_ms": round(mean * 1e3, 3),
        "step_ms_min": round(min(times) * 1e3, 3), "steps_timed": len(times),
        "batch": a.batch, "seq_len": T, "n_params": n_params, "n_params_no_pos": n_nopos,
        "flops_per_token": flops_per_token, "tflops": round(tps * flops_per_token / 1e12, 1),
        "mm": mm, "mfu": round(tps * flops_per_token / (mm["tflops_median"] * 1e12), 4) if mm else None,
        "loss_first": round(losses[0], 4), "loss_last": round(losses[-1], 4),
        "compile": compile_note, "compile_s": compile_s, "optimizer": optimizer,
        "precision": "autocast(bfloat16), f32 parameters",
        "attention": "F.scaled_dot_product_attention(is_causal=True)" if sdpa else "manual (smoke)",
        "peak_mem_gib": round(torch.cuda.max_memory_allocated(dev) / 2 ** 30, 2) if cuda else None,
        "device": props_name, "torch": torch.__version__, "cuda": torch.version.cuda,
    }
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
