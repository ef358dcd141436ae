#!/usr/bin/python3
"""Trains the demo model's weights with PyTorch on CPU (scripts/train-demo-model.sh runs it).

Why PyTorch and not llama.cpp's training API: llama_opt_epoch takes one sequence per optimizer step, and on this
2-core machine it trained the 1.4M-parameter model at about 860 tokens/s; PyTorch (Debian's python3-torch with
OpenBLAS) trains batches of sequences several times faster, which is what a 2-hour budget needs. The model is the
llama.cpp `llama` architecture exactly (RMSNorm, RoPE on adjacent pairs as LLAMA_ROPE_TYPE_NORM rotates them,
SwiGLU, untied output), so the weights go into the GGUF unchanged: `rest-train import` copies each tensor into the
file `rest-train init` wrote, and `rest-train eval` scores the result with llama.cpp's forward pass.

Inputs are u16 token ids from `rest-train tokens` (files as BOS + text + EOS, tokenized by llama.cpp). Output: one
raw little-endian f32 file per GGUF tensor (NAME.f32) in --out, and a TSV log (step, tokens, seconds, lr,
train_loss, heldout_loss) for the loss curve.
"""
import argparse
import math
import os
import shutil
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class RMSNorm(nn.Module):
    def __init__(self, d, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope(x, cos, sin):
    # llama.cpp's LLAMA_ROPE_TYPE_NORM: dimensions (2i, 2i+1) of each head rotate by pos * base^(-2i/head_dim).
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)


class Block(nn.Module):
    def __init__(self, a):
        super().__init__()
        d, f = a.embd, a.ffn
        self.attn_norm, self.ffn_norm = RMSNorm(d, a.eps), RMSNorm(d, a.eps)
        self.attn_q, self.attn_k, self.attn_v, self.attn_output = (nn.Linear(d, d, bias=False) for _ in range(4))
        self.ffn_gate, self.ffn_up = nn.Linear(d, f, bias=False), nn.Linear(d, f, bias=False)
        self.ffn_down = nn.Linear(f, d, bias=False)
        self.n_head = a.heads

    def forward(self, x, cos, sin, mask):
        B, T, D = x.shape
        h = self.attn_norm(x)
        q, k, v = (m(h).view(B, T, self.n_head, D // self.n_head).transpose(1, 2)
                   for m in (self.attn_q, self.attn_k, self.attn_v))
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(D // self.n_head)) + mask
        y = (att.softmax(-1) @ v).transpose(1, 2).reshape(B, T, D)
        x = x + self.attn_output(y)
        h = self.ffn_norm(x)
        return x + self.ffn_down(F.silu(self.ffn_gate(h)) * self.ffn_up(h))


class Model(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.token_embd = nn.Embedding(a.vocab, a.embd)
        self.blocks = nn.ModuleList(Block(a) for _ in range(a.layers))
        self.output_norm = RMSNorm(a.embd, a.eps)
        self.output = nn.Linear(a.embd, a.vocab, bias=False)
        hd = a.embd // a.heads
        inv = a.rope_base ** (-torch.arange(0, hd, 2, dtype=torch.float64) / hd)
        ang = torch.arange(a.ctx, dtype=torch.float64)[:, None] * inv[None, :]
        self.register_buffer("cos", ang.cos().float(), persistent=False)
        self.register_buffer("sin", ang.sin().float(), persistent=False)
        self.register_buffer("mask", torch.full((a.ctx, a.ctx), float("-inf")).triu(1), persistent=False)
        # GPT-2 style initialisation: N(0, 0.02), residual projections scaled down by depth.
        for n, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * a.layers) if n.endswith(("attn_output.weight", "ffn_down.weight")) else 0.02
                nn.init.normal_(p, 0.0, std)

    def forward(self, idx):
        T = idx.shape[1]
        x = self.token_embd(idx)
        for b in self.blocks:
            x = b(x, self.cos[:T], self.sin[:T], self.mask[:T, :T])
        return self.output(self.output_norm(x))

    def gguf_tensors(self):
        yield "token_embd.weight", self.token_embd.weight
        for i, b in enumerate(self.blocks):
            for n in ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate", "ffn_up",
                      "ffn_down"):
                yield "blk.%d.%s.weight" % (i, n), getattr(b, n).weight
        yield "output_norm.weight", self.output_norm.weight
        yield "output.weight", self.output.weight


def save(model, out):
    tmp = out + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    for name, p in model.gguf_tensors():
        p.detach().float().contiguous().numpy().astype("<f4").tofile(os.path.join(tmp, name + ".f32"))
    shutil.rmtree(out, ignore_errors=True)
    os.rename(tmp, out)


@torch.no_grad()
def evaluate(model, data, starts, T, batch):
    model.eval()
    total, n = 0.0, 0
    for i in range(0, len(starts), batch):
        x = torch.stack([torch.from_numpy(data[s:s + T + 1].astype(np.int64)) for s in starts[i:i + batch]])
        logits = model(x[:, :-1])
        total += F.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1), reduction="sum").item()
        n += x[:, 1:].numel()
    model.train()
    return total / n


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--train", required=True, help="u16 token ids for training")
    ap.add_argument("--heldout", required=True, help="u16 token ids held out")
    ap.add_argument("--out", required=True, help="directory for NAME.f32 weights")
    ap.add_argument("--log", required=True, help="TSV log")
    ap.add_argument("--vocab", type=int, required=True)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--embd", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--ffn", type=int, default=384)
    ap.add_argument("--ctx", type=int, default=256, help="tokens per sequence")
    ap.add_argument("--eps", type=float, default=1e-5)
    ap.add_argument("--rope-base", type=float, default=10000.0)
    ap.add_argument("--batch", type=int, default=16, help="sequences per optimizer step")
    ap.add_argument("--steps", type=int, default=4000)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--lr-min", type=float, default=1e-4)
    ap.add_argument("--wd", type=float, default=0.1)
    ap.add_argument("--max-minutes", type=float, default=0, help="end the cosine decay and training by then")
    ap.add_argument("--eval-every", type=int, default=200)
    ap.add_argument("--eval-seqs", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=42)
    a = ap.parse_args()

    torch.manual_seed(a.seed)
    torch.set_num_threads(a.threads)
    rng = np.random.default_rng(a.seed)
    train = np.fromfile(a.train, dtype="<u2")
    held = np.fromfile(a.heldout, dtype="<u2")
    T = a.ctx
    held_all = list(range(0, len(held) - T, T))
    held_some = held_all[:: max(1, len(held_all) // a.eval_seqs)][: a.eval_seqs]
    model = Model(a)
    n_params = sum(p.numel() for p in model.parameters())
    decay = [p for p in model.parameters() if p.dim() == 2]
    other = [p for p in model.parameters() if p.dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.wd}, {"params": other, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    print("train-torch: %d parameters, %d training tokens, %d held-out windows, batch %d x %d, %d threads"
          % (n_params, len(train), len(held_all), a.batch, T, a.threads), file=sys.stderr)
    log = open(a.log, "w")
    log.write("step\ttokens\tseconds\tlr\ttrain_loss\theldout_loss\n")
    t0 = time.time()
    ema = None
    for step in range(a.steps):
        secs = time.time() - t0
        progress = step / a.steps
        if a.max_minutes > 0:
            progress = max(progress, secs / (60 * a.max_minutes))
        if step < a.warmup:
            lr = a.lr * (step + 1) / a.warmup
        else:
            lr = a.lr_min + 0.5 * (a.lr - a.lr_min) * (1 + math.cos(math.pi * min(1.0, progress)))
        for g in opt.param_groups:
            g["lr"] = lr
        starts = rng.integers(0, len(train) - T - 1, size=a.batch)
        x = torch.from_numpy(np.stack([train[s:s + T + 1] for s in starts]).astype(np.int64))
        logits = model(x[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        ema = loss.item() if ema is None else 0.98 * ema + 0.02 * loss.item()
        secs = time.time() - t0
        last = step + 1 == a.steps or (a.max_minutes > 0 and secs > 60 * a.max_minutes)
        held_loss = ""
        if (step + 1) % a.eval_every == 0 or last:
            held_loss = "%.6f" % evaluate(model, held, held_all if last else held_some, T, a.batch)
            save(model, a.out)
        log.write("%d\t%d\t%.1f\t%.3g\t%.4f\t%s\n" % (step + 1, (step + 1) * a.batch * T, secs, lr, loss.item(),
                                                     held_loss))
        if (step + 1) % 20 == 0 or held_loss:
            log.flush()
            tps = (step + 1) * a.batch * T / secs
            print("step %d/%d  loss %.3f (ema %.3f)  lr %.2e  %.0f tok/s  %.1f min%s"
                  % (step + 1, a.steps, loss.item(), ema, lr, tps, secs / 60,
                     "  held-out " + held_loss if held_loss else ""), file=sys.stderr, flush=True)
        if last:
            break
    log.close()


if __name__ == "__main__":
    main()
