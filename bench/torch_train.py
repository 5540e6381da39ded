#!/usr/bin/python3
"""PyTorch peer of the strata training benchmark: the same decoder, trained on random tokens.

    /usr/bin/python3 bench/torch_train.py --family gpt2 --n-layer 4 --n-head 4 --d-model 256 \
        --vocab 8192 --seq-len 256 --batch 8 --steps 20 --warmup-steps 3 --threads 2

Same architecture and parameter names as tools/torch_reference.py (that one is a float64
reference written for clarity; this one is a float32 nn.Module written for speed): fused q|k|v
and gate|up linears, causal attention, AdamW (decay on matrices only), clip_grad_norm_(1.0).
Runs under Debian's torch 1.13 and under current PyTorch 2.x (bench/torch_venv.sh), each at its
best by default:
  --attn auto      F.scaled_dot_product_attention(is_causal=True) where torch has it (2.x), else
                   manual baddbmm/softmax/bmm (1.13; --attn sdpa there tries its private one)
  --optim auto     AdamW(fused=True) where it runs on CPU (torch >= 2.4), else foreach, else plain
  --mode compile   torch.compile(model) (inductor); its compile happens in the warm-up steps and
                   is reported as first_step_ms. Where torch.compile is missing (1.13) or fails,
                   the run goes on eager and says why on stderr and in "compile_fallback".
Prints one JSON line at the end:
  {"tokens_per_s", "step_ms", "steps_timed", "n_params", "flops_per_token", "gflops", ...,
   "mode", "attn", "optimizer", "torch", ...}
measured over the steps after --warmup-steps. FLOPs per token = 6*N + 12*L*C*T, N = parameter
count without the learned position table.
"""
import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_blas import blas_info  # noqa: E402


def swiglu_hidden(c):  # matches src/model/config.h
    return ((8 * c // 3) + 63) // 64 * 64


class RMSNorm(nn.Module):
    def __init__(self, c, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(c))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class MoeFfn(nn.Module):
    """A Mixtral-style sparse MoE SwiGLU FFN written with torch ops, as Hugging Face's
    MixtralSparseMoeBlock computes it: router -> softmax -> top-k -> renormalise; then, expert by
    expert, the rows routed to it gathered (index), run through its SwiGLU, weighted and added back
    (index_add_); plus the Switch auxiliary loss on the router's probabilities."""

    def __init__(self, a):
        super().__init__()
        C, E, F_ = a.d_model, a.experts, a.expert_ffn
        self.E, self.k, self.aux_coeff = E, a.top_k, a.aux_coeff
        self.router = nn.Linear(C, E, bias=False)
        self.gate_up = nn.Parameter(torch.empty(E, 2 * F_, C))
        self.down = nn.Parameter(torch.empty(E, C, F_))
        self.aux = torch.zeros(())

    def forward(self, h):
        B, T, C = h.shape
        x = h.reshape(B * T, C)
        probs = torch.softmax(self.router(x), dim=-1)
        weight, chosen = torch.topk(probs, self.k, dim=-1)
        weight = weight / weight.sum(-1, keepdim=True)
        out = torch.zeros_like(x)
        counts = torch.zeros(self.E, device=x.device)
        for e in range(self.E):
            tok, slot = torch.where(chosen == e)
            counts[e] = tok.numel()
            if tok.numel() == 0:
                continue
            g, u = F.linear(x[tok], self.gate_up[e]).chunk(2, dim=-1)
            y = F.linear(F.silu(g) * u, self.down[e])
            out.index_add_(0, tok, y * weight[tok, slot, None])
        f = counts / (B * T * self.k)
        self.aux = self.aux_coeff * self.E * (f * probs.mean(0)).sum()
        return out.view(B, T, C)


class Block(nn.Module):
    def __init__(self, a):
        super().__init__()
        C, H, KV, hd = a.d_model, a.n_head, a.n_kv_head, a.d_model // a.n_head
        self.H, self.KV, self.hd, self.gpt2, self.attn_impl = H, KV, hd, a.family == "gpt2", a.attn
        bias = self.gpt2
        Norm = (lambda: nn.LayerNorm(C, eps=1e-5)) if self.gpt2 else (lambda: RMSNorm(C, 1e-5))
        self.attn_norm = Norm()
        self.qkv = nn.Linear(C, (H + 2 * KV) * hd, bias=bias)
        self.o = nn.Linear(H * hd, C, bias=bias)
        self.mlp_norm = Norm()
        self.moe = MoeFfn(a) if a.family == "mixtral" else None
        if self.gpt2:
            self.fc = nn.Linear(C, a.d_ff, bias=True)
            self.proj = nn.Linear(a.d_ff, C, bias=True)
        elif self.moe is None:
            self.gate_up = nn.Linear(C, 2 * a.d_ff, bias=False)
            self.down = nn.Linear(a.d_ff, C, bias=False)

    def attention(self, x, mask, rope):
        B, T, C = x.shape
        H, KV, hd = self.H, self.KV, self.hd
        qkv = self.qkv(x).view(B, T, H + 2 * KV, hd).transpose(1, 2)  # [B, H+2KV, T, hd]
        q, k, v = qkv.split([H, KV, KV], dim=1)
        if rope is not None:
            cos, sin = rope
            q = q * cos + torch.cat([-q[..., hd // 2:], q[..., :hd // 2]], -1) * sin
            k = k * cos + torch.cat([-k[..., hd // 2:], k[..., :hd // 2]], -1) * sin
        if KV != H:
            k = k[:, :, None].expand(B, KV, H // KV, T, hd).reshape(B, H, T, hd)
            v = v[:, :, None].expand(B, KV, H // KV, T, hd).reshape(B, H, T, hd)
        if self.attn_impl == "sdpa":
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        elif self.attn_impl == "sdpa-private":  # torch 1.13's (attn_mask, dropout, need_weights, is_causal)
            o = F._scaled_dot_product_attention(q, k, v, None, 0.0, False, True)[0]
        else:
            s = torch.baddbmm(mask, q.reshape(B * H, T, hd), k.reshape(B * H, T, hd).transpose(1, 2),
                              alpha=hd ** -0.5)
            o = torch.bmm(torch.softmax(s, dim=-1), v.reshape(B * H, T, hd)).view(B, H, T, hd)
        return self.o(o.transpose(1, 2).reshape(B, T, H * hd))

    def forward(self, x, mask, rope):
        x = x + self.attention(self.attn_norm(x), mask, rope)
        h = self.mlp_norm(x)
        if self.gpt2:
            m = self.proj(F.gelu(self.fc(h), approximate="tanh"))
        elif self.moe is not None:
            m = self.moe(h)
        else:
            g, u = self.gate_up(h).chunk(2, dim=-1)
            m = self.down(F.silu(g) * u)
        return x + m


class Decoder(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.a = a
        self.embed = nn.Embedding(a.vocab, a.d_model)
        if a.family == "gpt2":
            self.pos_embed = nn.Embedding(getattr(a, "max_seq_len", a.seq_len), a.d_model)
        self.layers = nn.ModuleList(Block(a) for _ in range(a.n_layer))
        self.final_norm = nn.LayerNorm(a.d_model, eps=1e-5) if a.family == "gpt2" else RMSNorm(a.d_model, 1e-5)
        self.head = None if a.family == "gpt2" else nn.Linear(a.d_model, a.vocab, bias=False)
        for n, p in self.named_parameters():
            if p.dim() >= 2:
                nn.init.normal_(p, std=0.02)
        T, hd = a.seq_len, a.d_model // a.n_head
        self.register_buffer("mask", torch.full((T, T), float("-inf")).triu(1), persistent=False)
        if a.family in ("llama", "mixtral"):
            inv = 10000.0 ** (-torch.arange(0, hd // 2, dtype=torch.float64) * 2 / hd)
            ang = torch.outer(torch.arange(T, dtype=torch.float64), inv)
            emb = torch.cat([ang, ang], -1)
            self.register_buffer("cos", emb.cos().float(), persistent=False)
            self.register_buffer("sin", emb.sin().float(), persistent=False)

    def forward(self, tokens, targets):
        B, T = tokens.shape
        x = self.embed(tokens)
        if self.a.family == "gpt2":
            x = x + self.pos_embed.weight[:T]
        rope = (self.cos[:T], self.sin[:T]) if self.a.family in ("llama", "mixtral") else None
        mask = self.mask[:T, :T]
        for layer in self.layers:
            x = layer(x, mask, rope)
        x = self.final_norm(x)
        logits = F.linear(x, self.embed.weight if self.head is None else self.head.weight)
        loss = F.cross_entropy(logits.view(B * T, -1), targets.reshape(B * T))
        # The MoE layers' auxiliary losses join the objective (strata's as well).
        return loss + sum(l.moe.aux for l in self.layers if l.moe is not None) if self.a.family == "mixtral" else loss


def resolve_attn(want):
    public = hasattr(F, "scaled_dot_product_attention")
    if want == "auto":
        return "sdpa" if public else "manual"
    if want == "sdpa":
        return "sdpa" if public else "sdpa-private"
    return want


def make_adamw(groups, want, opt_kw):
    """AdamW with the fastest implementation this torch has on CPU: returns (optimizer, name)."""
    order = {"auto": ["fused", "foreach", "plain"], "fused": ["fused"], "foreach": ["foreach"],
             "plain": ["plain"]}[want]
    errors = []
    for impl in order:
        kw = {"fused": {"fused": True}, "foreach": {"foreach": True}, "plain": {}}[impl]
        try:
            if impl == "fused":  # the constructor may accept it and the CPU step still refuse
                p = torch.nn.Parameter(torch.ones(4))
                p.grad = torch.ones(4)
                probe = torch.optim.AdamW([p], **kw, **opt_kw)
                probe.step()
            return torch.optim.AdamW(groups, **kw, **opt_kw), impl
        except (TypeError, RuntimeError, ValueError) as e:
            errors.append("%s: %s" % (impl, str(e).splitlines()[0] if str(e) else type(e).__name__))
    sys.exit("no AdamW implementation %s works here (%s)" % (want, "; ".join(errors)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--family", choices=["gpt2", "llama", "mixtral"], default="gpt2")
    ap.add_argument("--experts", type=int, default=8, help="mixtral: experts per layer")
    ap.add_argument("--top-k", type=int, default=2, help="mixtral: experts per token")
    ap.add_argument("--expert-ffn", type=int, default=256, help="mixtral: each expert's width")
    ap.add_argument("--aux-coeff", type=float, default=0.02, help="mixtral: the aux loss's weight")
    ap.add_argument("--n-layer", type=int, default=4)
    ap.add_argument("--n-head", type=int, default=4)
    ap.add_argument("--n-kv-head", type=int, default=0, help="0: n_head")
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--d-ff", type=int, default=0, help="0: 4C (gpt2), swiglu_hidden(C) (llama)")
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--max-seq-len", type=int, default=0, help="position table rows; 0: --seq-len")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=20, help="total steps, warmup included")
    ap.add_argument("--warmup-steps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--attn", choices=["auto", "manual", "sdpa"], default="auto",
                    help="auto: sdpa where public (torch 2.x), else manual")
    ap.add_argument("--optim", choices=["auto", "fused", "foreach", "plain"], default="auto",
                    help="AdamW implementation; auto: fused where it runs on CPU, else foreach")
    ap.add_argument("--mode", choices=["eager", "compile"], default="eager",
                    help="compile: torch.compile(model), default inductor backend")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--verbose", action="store_true", help="print every step to stderr")
    ap.add_argument("--precision", choices=["f32", "bf16"], default="f32",
                    help="bf16: torch.autocast(cpu, bfloat16) around forward (PyTorch's mixed precision)")
    a = ap.parse_args()
    a.n_kv_head = a.n_kv_head or a.n_head
    a.max_seq_len = max(a.max_seq_len, a.seq_len)
    a.d_ff = a.d_ff or (4 * a.d_model if a.family == "gpt2" else swiglu_hidden(a.d_model))
    if a.steps <= a.warmup_steps:
        ap.error("--steps must exceed --warmup-steps")

    a.attn = resolve_attn(a.attn)
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    model = Decoder(a)
    params = list(model.parameters())
    n_params = sum(p.numel() for p in params)
    n_nopos = n_params - (model.pos_embed.weight.numel() if a.family == "gpt2" else 0)
    if a.family == "mixtral":  # FLOPs count the parameters a token runs through: top_k experts
        n_nopos -= a.n_layer * (a.experts - a.top_k) * 3 * a.expert_ffn * a.d_model
    flops_per_token = 6 * n_nopos + 12 * a.n_layer * a.d_model * a.seq_len
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    opt_kw = dict(lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    opt, optimizer = make_adamw([{"params": decay, "weight_decay": 0.1},
                                 {"params": no_decay, "weight_decay": 0.0}], a.optim, opt_kw)

    eager_model, compile_fallback = model, None
    if a.mode == "compile":
        if hasattr(torch, "compile"):
            try:
                model = torch.compile(model)
            except Exception as e:  # noqa: BLE001 (any failure: report it, go on eager)
                compile_fallback = "torch.compile raised %s: %s" % (type(e).__name__, e)
        else:
            compile_fallback = "torch %s has no torch.compile" % torch.__version__
        if compile_fallback:
            print("compile mode: %s; running eager" % compile_fallback, file=sys.stderr)

    def forward(m, inputs, targets):
        if a.precision == "bf16":
            with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
                return m(inputs, targets)
        return m(inputs, targets)

    gen = torch.Generator().manual_seed(a.seed + 1)
    times, losses = [], []
    for step in range(a.steps):
        tok = torch.randint(0, a.vocab, (a.batch, a.seq_len + 1), generator=gen)
        inputs, targets = tok[:, :-1].contiguous(), tok[:, 1:].contiguous()
        t0 = time.perf_counter()
        if step == 0 and model is not eager_model:
            # torch.compile compiles lazily: forward and backward graphs on the first step.
            try:
                loss = forward(model, inputs, targets)
                loss.backward()
            except Exception as e:  # noqa: BLE001
                compile_fallback = "compiling the first step raised %s: %s" % (
                    type(e).__name__, str(e).strip().splitlines()[0] if str(e).strip() else "")
                print("compile mode: %s; running eager" % compile_fallback, file=sys.stderr)
                model = eager_model
                opt.zero_grad(set_to_none=True)
                loss = forward(model, inputs, targets)
                loss.backward()
        else:
            loss = forward(model, inputs, targets)
            loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        lv = loss.item()
        dt = time.perf_counter() - t0
        losses.append(lv)
        if step == 0:
            first_step = dt
        if step >= a.warmup_steps:
            times.append(dt)
        if a.verbose:
            print("step %d loss %.4f %.1f ms %.0f tok/s" % (step, lv, dt * 1e3,
                                                            a.batch * a.seq_len / dt), file=sys.stderr)
    total = sum(times)
    tps = a.batch * a.seq_len * len(times) / total
    print(json.dumps({
        "tokens_per_s": round(tps, 2), "step_ms": round(total / len(times) * 1e3, 2),
        "steps_timed": len(times), "step_ms_min": round(min(times) * 1e3, 2),
        "n_params": n_params, "n_params_no_pos": n_nopos, "flops_per_token": flops_per_token,
        "gflops": round(tps * flops_per_token * 1e-9, 2),
        "loss_first": round(losses[0], 4), "loss_last": round(losses[-1], 4),
        "threads": torch.get_num_threads(), "attn": a.attn, "optimizer": optimizer,
        "adamw_foreach": optimizer == "foreach", "precision": a.precision,
        "mode": "compile" if model is not eager_model else "eager",
        "mode_requested": a.mode, "compile_fallback": compile_fallback,
        "first_step_ms": round(first_step * 1e3, 1),
        "torch": torch.__version__, "blas": blas_info(),
    }))


if __name__ == "__main__":
    main()
