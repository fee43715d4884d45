#!/usr/bin/env python3
"""Reference for a tiny random Gemma 3 model: an independent float64 NumPy forward pass.

The model is not stored: its weights are a pure function of each tensor's name and element
index (as in engine/testdata/qwen3moe/make_reference.py), so the C++ test (MiniGemma3 in
engine/arch_models_test.cc) writes the same GGUF and compares the engine with the arrays
here. The script reads no GGUF and no Cascade code.

Gemma 3 (HF Gemma3ForCausalLM; llama.cpp's gemma3 graph): the embeddings times sqrt(dim);
RMSNorm weights as GGUF stores them (1 + w); per-head RMSNorms of q and k (head_dim) before
NEOX RoPE; q times 1/sqrt(head_dim) (query_pre_attn_scalar = head_dim); RMSNorms of the
attention's and the FFN's outputs before each residual add; a GELU(tanh)-gated FFN; no
soft-caps. Five of every six layers (layer l with (l + 1) % 6 != 0) attend over a sliding
window of WINDOW positions and rotate with base LOCAL_THETA, unscaled; every sixth attends
over everything and rotates with base THETA, its frequencies divided by the linear scaling
factor SCALE (Gemma 3 4B and larger: 8).
Writes mini-gemma3.ids (prompt, then GREEDY greedy ids) and mini-gemma3.logits.npy
(float32 [len(ids), vocab], all ids fed at once) next to this script.
Run: PATH=$(getconf PATH) python3 engine/testdata/gemma3/make_reference.py
"""
import math
import os

import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import script_weights  # noqa: E402  (the formula of the weights, shared)
from script_weights import tensor  # noqa: E402

# Must match MiniGemma3 in engine/arch_models_test.cc.
VOCAB, DIM, LAYERS, HEADS, KV_HEADS, HEAD_DIM, FFN, WINDOW = 128, 64, 6, 4, 2, 32, 96, 4
THETA, LOCAL_THETA, SCALE, EPS = 1e6, 1e4, 8.0, 1e-6
PROMPT = [1, 17, 90, 33, 5, 127, 64, 2, 99, 40]
GREEDY = 14


def rmsnorm(x, w):
    return script_weights.rmsnorm(x, w, EPS)


def rope(x, pos, theta, scale):  # NEOX pairs (i, i + HEAD_DIM/2)
    half = HEAD_DIM // 2
    freq = theta ** (-2.0 * np.arange(half) / HEAD_DIM) / scale
    ang = pos[:, None] * freq[None, :]
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    a, b = x[..., :half], x[..., half:]
    return np.concatenate([a * cos - b * sin, a * sin + b * cos], axis=-1)


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def forward(ids):
    n = len(ids)
    x = tensor("token_embd.weight", (VOCAB, DIM))[ids] * math.sqrt(DIM)
    pos = np.arange(n, dtype=np.float64)
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    group = HEADS // KV_HEADS
    qd, kd = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM
    for l in range(LAYERS):
        p = f"blk.{l}."
        local = (l + 1) % 6 != 0
        theta, scale = (LOCAL_THETA, 1.0) if local else (THETA, SCALE)
        mask = np.where((j <= i) & ((i - j < WINDOW) if local else True), 0.0, -np.inf)
        h = rmsnorm(x, tensor(p + "attn_norm.weight", (DIM,), norm=True))
        q = (h @ tensor(p + "attn_q.weight", (qd, DIM)).T).reshape(n, HEADS, HEAD_DIM)
        k = (h @ tensor(p + "attn_k.weight", (kd, DIM)).T).reshape(n, KV_HEADS, HEAD_DIM)
        v = (h @ tensor(p + "attn_v.weight", (kd, DIM)).T).reshape(n, KV_HEADS, HEAD_DIM)
        q = rope(rmsnorm(q, tensor(p + "attn_q_norm.weight", (HEAD_DIM,), norm=True)), pos, theta, scale)
        k = rope(rmsnorm(k, tensor(p + "attn_k_norm.weight", (HEAD_DIM,), norm=True)), pos, theta, scale)
        att = np.zeros((n, HEADS, HEAD_DIM))
        for hh in range(HEADS):
            s = q[:, hh] @ k[:, hh // group].T / math.sqrt(HEAD_DIM) + mask
            s = np.exp(s - s.max(axis=-1, keepdims=True))
            att[:, hh] = (s / s.sum(axis=-1, keepdims=True)) @ v[:, hh // group]
        a = att.reshape(n, -1) @ tensor(p + "attn_output.weight", (DIM, qd)).T
        x = x + rmsnorm(a, tensor(p + "post_attention_norm.weight", (DIM,), norm=True))
        h = rmsnorm(x, tensor(p + "ffn_norm.weight", (DIM,), norm=True))
        gate = h @ tensor(p + "ffn_gate.weight", (FFN, DIM)).T
        up = h @ tensor(p + "ffn_up.weight", (FFN, DIM)).T
        f = (gelu_tanh(gate) * up) @ tensor(p + "ffn_down.weight", (DIM, FFN)).T
        x = x + rmsnorm(f, tensor(p + "post_ffw_norm.weight", (DIM,), norm=True))
    x = rmsnorm(x, tensor("output_norm.weight", (DIM,), norm=True))
    return x @ tensor("token_embd.weight", (VOCAB, DIM)).T  # tied


def main():
    ids = list(PROMPT)
    for _ in range(GREEDY):
        ids.append(int(np.argmax(forward(ids)[-1])))
    logits = forward(ids)
    assert [int(i) for i in np.argmax(logits[len(PROMPT) - 1:-1], axis=-1)] == ids[len(PROMPT):]
    here = os.path.dirname(os.path.abspath(__file__))
    np.save(os.path.join(here, "mini-gemma3.logits.npy"), logits.astype(np.float32))
    with open(os.path.join(here, "mini-gemma3.ids"), "w") as f:
        f.write(" ".join(str(i) for i in ids) + "\n")
    top2 = np.sort(logits, axis=-1)[:, -2:]
    print("ids", ids)
    print("min top1-top2 margin", float((top2[:, 1] - top2[:, 0]).min()))
    print("max |logit|", float(np.abs(logits).max()))
    print("numpy", np.__version__)


if __name__ == "__main__":
    main()
