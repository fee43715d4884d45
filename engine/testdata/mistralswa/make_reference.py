#!/usr/bin/env python3
"""Reference for a tiny random Mistral-style model (GGUF "llama" with a sliding window): an
independent float64 NumPy forward pass.

The model is not stored: its weights are a pure function of each tensor's name and element
index (as in engine/testdata/qwen3moe/make_reference.py), so the C++ test (MiniMistralSwa
in engine/arch_models_test.cc) writes the same GGUF and compares the engine with the
arrays here. The script reads no GGUF and no Cascade code.

Mistral 7B v0.1 (HF MistralForCausalLM, sliding_window 4096): the Llama block where each
position attends to itself and the WINDOW - 1 positions before it, on every layer. GGUF
"llama" files rotate adjacent pairs (2i, 2i + 1) of the q and k rows as stored.
Writes mini-mistral-swa.ids (prompt, then GREEDY greedy ids) and mini-mistral-swa.logits.npy
(float32 [len(ids), vocab], all ids fed at once) next to this script.
Run: PATH=$(getconf PATH) python3 engine/testdata/mistralswa/make_reference.py
"""
import os

import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import script_weights  # noqa: E402  (the formula of the weights, shared)
from script_weights import tensor  # noqa: E402

# Must match MiniMistralSwa in engine/arch_models_test.cc.
VOCAB, DIM, LAYERS, HEADS, KV_HEADS, FFN, WINDOW = 128, 64, 2, 4, 2, 96, 5
HEAD_DIM = DIM // HEADS
THETA, EPS = 10000.0, 1e-5
PROMPT = [1, 17, 90, 33, 5, 127, 64, 2, 99, 40]
GREEDY = 14


def rmsnorm(x, w):
    return script_weights.rmsnorm(x, w, EPS)


def rope(x, pos):  # x (n, heads, HEAD_DIM); adjacent pairs (2i, 2i + 1)
    freq = THETA ** (-2.0 * np.arange(HEAD_DIM // 2) / HEAD_DIM)
    ang = pos[:, None] * freq[None, :]
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    a, b = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2], out[..., 1::2] = a * cos - b * sin, a * sin + b * cos
    return out


def silu(x):
    return x / (1.0 + np.exp(-x))


def forward(ids, window):
    n = len(ids)
    x = tensor("token_embd.weight", (VOCAB, DIM))[ids]
    pos = np.arange(n, dtype=np.float64)
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    allowed = (j <= i) & (i - j < window if window else True)
    mask = np.where(allowed, 0.0, -np.inf)
    group = HEADS // KV_HEADS
    for l in range(LAYERS):
        p = f"blk.{l}."
        h = rmsnorm(x, tensor(p + "attn_norm.weight", (DIM,), norm=True))
        q = rope((h @ tensor(p + "attn_q.weight", (DIM, DIM)).T).reshape(n, HEADS, HEAD_DIM), pos)
        k = rope((h @ tensor(p + "attn_k.weight", (KV_HEADS * HEAD_DIM, DIM)).T)
                 .reshape(n, KV_HEADS, HEAD_DIM), pos)
        v = (h @ tensor(p + "attn_v.weight", (KV_HEADS * HEAD_DIM, DIM)).T).reshape(n, KV_HEADS, HEAD_DIM)
        att = np.zeros((n, HEADS, HEAD_DIM))
        for hh in range(HEADS):
            s = q[:, hh] @ k[:, hh // group].T / np.sqrt(HEAD_DIM) + mask
            s = np.exp(s - s.max(axis=-1, keepdims=True))
            att[:, hh] = (s / s.sum(axis=-1, keepdims=True)) @ v[:, hh // group]
        x = x + att.reshape(n, -1) @ tensor(p + "attn_output.weight", (DIM, DIM)).T
        h = rmsnorm(x, tensor(p + "ffn_norm.weight", (DIM,), norm=True))
        gate = h @ tensor(p + "ffn_gate.weight", (FFN, DIM)).T
        up = h @ tensor(p + "ffn_up.weight", (FFN, DIM)).T
        x = x + (silu(gate) * up) @ tensor(p + "ffn_down.weight", (DIM, FFN)).T
    x = rmsnorm(x, tensor("output_norm.weight", (DIM,), norm=True))
    return x @ tensor("output.weight", (VOCAB, DIM)).T


def main():
    ids = list(PROMPT)
    for _ in range(GREEDY):
        ids.append(int(np.argmax(forward(ids, WINDOW)[-1])))
    logits = forward(ids, WINDOW)
    assert [int(i) for i in np.argmax(logits[len(PROMPT) - 1:-1], axis=-1)] == ids[len(PROMPT):]
    here = os.path.dirname(os.path.abspath(__file__))
    np.save(os.path.join(here, "mini-mistral-swa.logits.npy"), logits.astype(np.float32))
    with open(os.path.join(here, "mini-mistral-swa.ids"), "w") as f:
        f.write(" ".join(str(i) for i in ids) + "\n")
    top2 = np.sort(logits, axis=-1)[:, -2:]
    print("ids", ids)
    print("min top1-top2 margin", float((top2[:, 1] - top2[:, 0]).min()))
    # The window must matter by more than the test's tolerance.
    print("max |windowed - full|", float(np.abs(logits - forward(ids, 0)).max()))
    print("numpy", np.__version__)


if __name__ == "__main__":
    main()
