#!/usr/bin/env python3
"""Reference for tiny random Phi-3 models with LongRoPE: an independent float64 NumPy forward.

The models are not stored: their weights are a pure function of each tensor's name and
element index (splitmix64 of FNV-1a(name) + index, scaled to exact float32 values, as in
engine/testdata/qwen3moe/make_reference.py), so the C++ test (MiniPhi3LongRope in
engine/arch_models_test.cc) writes the same GGUF and compares the engine with the arrays
here. The script reads no GGUF and no Cascade code.

Phi-3 (HF Phi3ForCausalLM): attn_qkv holds q, k and v rows; ffn_up holds gate then up rows;
NEOX RoPE over the first ROPE_DIM of each head's HEAD_DIM dimensions (partial rotary, as in
Phi-4-mini). LongRoPE (HF Phi3LongRoPEScaledRotaryEmbedding): each rotated pair's inverse
frequency is theta^(-2i/ROPE_DIM) / factor[i], factor being the long factors when the
context served exceeds the original context and the short ones otherwise; cos and sin are
both multiplied by the attention factor sqrt(1 + ln(ctx / original) / ln(original)) (1 when
ctx <= original), on q and on k, so only the rotated dimensions scale.

Two models: "long" (context 256 over an original 64: long factors, attention factor
sqrt(1 + ln 4 / ln 64)) and "short" (context 64 = original: short factors, factor 1).
Writes, next to this script, for each model M:
  mini-phi3-M.ids         prompt (PROMPT_LEN ids) then GREEDY greedy ids
  mini-phi3-M.logits.npy  float32 [len(ids), vocab], all ids fed at once (causal)
Run: PATH=$(getconf PATH) python3 engine/testdata/phi3longrope/make_reference.py
"""
import math
import os

import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import script_weights  # noqa: E402  (the formula of the weights, shared)
from script_weights import tensor  # noqa: E402

# Must match MiniPhi3LongRope in engine/arch_models_test.cc.
VOCAB, DIM, LAYERS, HEADS, KV_HEADS, HEAD_DIM, ROPE_DIM, FFN = 128, 64, 2, 4, 2, 32, 24, 96
THETA, EPS, ORIGINAL = 10000.0, 1e-5, 64
PROMPT = [1, 17, 90, 33, 5, 127, 64, 2, 99, 40]
GREEDY = 14
# Exact in float32; long factors stretch the low frequencies much more than short ones.
LONG = [1.0 + 0.5 * i for i in range(ROPE_DIM // 2)]
SHORT = [1.0 + 0.0625 * i for i in range(ROPE_DIM // 2)]
MODELS = {"long": 256, "short": 64}  # name: context_length


def rmsnorm(x, w):
    return script_weights.rmsnorm(x, w, EPS)


def attention_factor(ctx):
    scale = ctx / ORIGINAL
    return math.sqrt(1 + math.log(scale) / math.log(ORIGINAL)) if scale > 1 else 1.0


def rope(x, pos, ctx):  # x (n, heads, HEAD_DIM); NEOX pairs (i, i + ROPE_DIM/2)
    half = ROPE_DIM // 2
    factors = np.array(LONG if ctx > ORIGINAL else SHORT)
    freq = THETA ** (-2.0 * np.arange(half) / ROPE_DIM) / factors
    ang = pos[:, None] * freq[None, :]
    m = attention_factor(ctx)
    cos, sin = (m * np.cos(ang))[:, None, :], (m * np.sin(ang))[:, None, :]
    a, b, rest = x[..., :half], x[..., half:ROPE_DIM], x[..., ROPE_DIM:]
    return np.concatenate([a * cos - b * sin, a * sin + b * cos, rest], axis=-1)


def silu(x):
    return x / (1.0 + np.exp(-x))


def forward(ids, ctx):
    n = len(ids)
    x = tensor("token_embd.weight", (VOCAB, DIM))[ids]
    pos = np.arange(n, dtype=np.float64)
    group = HEADS // KV_HEADS
    mask = np.triu(np.full((n, n), -np.inf), 1)
    qd, kd = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM
    for l in range(LAYERS):
        p = f"blk.{l}."
        h = rmsnorm(x, tensor(p + "attn_norm.weight", (DIM,), norm=True))
        qkv = h @ tensor(p + "attn_qkv.weight", (qd + 2 * kd, DIM)).T
        q = rope(qkv[:, :qd].reshape(n, HEADS, HEAD_DIM), pos, ctx)
        k = rope(qkv[:, qd:qd + kd].reshape(n, KV_HEADS, HEAD_DIM), pos, ctx)
        v = qkv[:, qd + kd:].reshape(n, KV_HEADS, HEAD_DIM)
        att = np.zeros((n, HEADS, HEAD_DIM))
        for hh in range(HEADS):
            s = q[:, hh] @ k[:, hh // group].T / np.sqrt(HEAD_DIM) + mask
            s = np.exp(s - s.max(axis=-1, keepdims=True))
            att[:, hh] = (s / s.sum(axis=-1, keepdims=True)) @ v[:, hh // group]
        x = x + att.reshape(n, -1) @ tensor(p + "attn_output.weight", (DIM, qd)).T
        h = rmsnorm(x, tensor(p + "ffn_norm.weight", (DIM,), norm=True))
        gu = h @ tensor(p + "ffn_up.weight", (2 * FFN, DIM)).T
        x = x + (silu(gu[:, :FFN]) * gu[:, FFN:]) @ tensor(p + "ffn_down.weight", (DIM, FFN)).T
    x = rmsnorm(x, tensor("output_norm.weight", (DIM,), norm=True))
    return x @ tensor("output.weight", (VOCAB, DIM)).T


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    for name, ctx in MODELS.items():
        ids = list(PROMPT)
        for _ in range(GREEDY):
            ids.append(int(np.argmax(forward(ids, ctx)[-1])))
        logits = forward(ids, ctx)
        assert [int(i) for i in np.argmax(logits[len(PROMPT) - 1:-1], axis=-1)] == ids[len(PROMPT):]
        np.save(os.path.join(here, f"mini-phi3-{name}.logits.npy"), logits.astype(np.float32))
        with open(os.path.join(here, f"mini-phi3-{name}.ids"), "w") as f:
            f.write(" ".join(str(i) for i in ids) + "\n")
        top2 = np.sort(logits, axis=-1)[:, -2:]
        print(name, "ids", ids)
        print(name, "min top1-top2 margin", float((top2[:, 1] - top2[:, 0]).min()))
    # The two models must differ by more than the test's tolerance, or the test could not
    # tell long factors from short ones.
    a, b = forward(PROMPT, 256), forward(PROMPT, 64)
    print("max |long - short| on the prompt", float(np.abs(a - b).max()))
    print("numpy", np.__version__)


if __name__ == "__main__":
    main()
