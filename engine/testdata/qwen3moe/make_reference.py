#!/usr/bin/env python3
"""Reference for a tiny random Qwen3-MoE model: an independent float64 NumPy forward pass.

The model is not stored: its weights are a pure function of each tensor's name and element
index (splitmix64 of FNV-1a(name) + index, scaled to exact float32 values), so the C++ test
(MiniQwen3Moe in engine/arch_models_test.cc) writes the same GGUF and compares the engine
with the arrays here. The script does not read that GGUF or any Cascade code.

Qwen3-MoE (llama.cpp's qwen3moe graph, HF Qwen3MoeForCausalLM): per-head RMSNorm of q and k
(head_dim each) before NEOX RoPE, a head size of its own (key_length), no biases; each FFN is
n_expert SwiGLU experts, the router softmax's top-k renormalised to sum to 1
(norm_topk_prob), no shared expert; feed_forward_length is unused.

Writes, next to this script:
  mini-qwen3moe.ids         prompt (PROMPT_LEN ids) then GREEDY greedy ids (argmax, first on ties)
  mini-qwen3moe.logits.npy  float32 [len(ids), vocab]: row t predicts the token after position t,
                            all ids fed at once (causal)
Run: PATH=$(getconf PATH) python3 engine/testdata/qwen3moe/make_reference.py
"""
import os

import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import script_weights  # noqa: E402  (the formula of the weights, shared)
from script_weights import tensor  # noqa: E402

# Must match MiniQwen3Moe in engine/arch_models_test.cc.
VOCAB, DIM, LAYERS, HEADS, KV_HEADS, HEAD_DIM = 128, 64, 2, 4, 2, 32
EXPERTS, USED, EXPERT_FFN, DENSE_FFN = 8, 3, 32, 96
THETA, EPS = 1e6, 1e-6
PROMPT = [1, 17, 90, 33, 5, 127, 64, 2, 99, 40]
GREEDY = 14

def rmsnorm(x, w):
    return script_weights.rmsnorm(x, w, EPS)


def rope(x, pos):  # x (n, heads, hd), NEOX: pairs (i, i + hd/2)
    half = HEAD_DIM // 2
    freq = THETA ** (-2.0 * np.arange(half) / HEAD_DIM)
    ang = pos[:, None] * freq[None, :]
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    a, b = x[..., :half], x[..., half:]
    return np.concatenate([a * cos - b * sin, a * sin + b * cos], axis=-1)


def silu(x):
    return x / (1.0 + np.exp(-x))


ROUTER_GAP = [1.0]  # smallest gap between the k-th and (k+1)-th router probability
RENORMALISE = [True]


def moe(h, p):
    logits = h @ tensor(p + "ffn_gate_inp.weight", (EXPERTS, DIM)).T
    prob = np.exp(logits - logits.max(axis=-1, keepdims=True))
    prob /= prob.sum(axis=-1, keepdims=True)
    gate = tensor(p + "ffn_gate_exps.weight", (EXPERTS, EXPERT_FFN, DIM))
    up = tensor(p + "ffn_up_exps.weight", (EXPERTS, EXPERT_FFN, DIM))
    down = tensor(p + "ffn_down_exps.weight", (EXPERTS, DIM, EXPERT_FFN))
    out = np.zeros_like(h)
    for t in range(h.shape[0]):
        order = np.argsort(-prob[t], kind="stable")
        ROUTER_GAP[0] = min(ROUTER_GAP[0], prob[t, order[USED - 1]] - prob[t, order[USED]])
        top = order[:USED]
        w = prob[t, top] / (prob[t, top].sum() if RENORMALISE[0] else 1.0)
        for e, we in zip(top, w):
            out[t] += we * (down[e] @ (silu(gate[e] @ h[t]) * (up[e] @ h[t])))
    return out


def forward(ids):
    n = len(ids)
    x = tensor("token_embd.weight", (VOCAB, DIM))[ids]
    pos = np.arange(n, dtype=np.float64)
    group = HEADS // KV_HEADS
    mask = np.triu(np.full((n, n), -np.inf), 1)
    for l in range(LAYERS):
        p = f"blk.{l}."
        h = rmsnorm(x, tensor(p + "attn_norm.weight", (DIM,), norm=True))
        q = (h @ tensor(p + "attn_q.weight", (HEADS * HEAD_DIM, DIM)).T).reshape(n, HEADS, HEAD_DIM)
        k = (h @ tensor(p + "attn_k.weight", (KV_HEADS * HEAD_DIM, DIM)).T).reshape(n, KV_HEADS, HEAD_DIM)
        v = (h @ tensor(p + "attn_v.weight", (KV_HEADS * HEAD_DIM, DIM)).T).reshape(n, KV_HEADS, HEAD_DIM)
        q = rope(rmsnorm(q, tensor(p + "attn_q_norm.weight", (HEAD_DIM,), norm=True)), pos)
        k = rope(rmsnorm(k, tensor(p + "attn_k_norm.weight", (HEAD_DIM,), norm=True)), pos)
        att = np.zeros((n, HEADS, HEAD_DIM))
        for hh in range(HEADS):
            s = q[:, hh] @ k[:, hh // group].T / np.sqrt(HEAD_DIM) + mask
            s = np.exp(s - s.max(axis=-1, keepdims=True))
            att[:, hh] = (s / s.sum(axis=-1, keepdims=True)) @ v[:, hh // group]
        x = x + att.reshape(n, -1) @ tensor(p + "attn_output.weight", (DIM, HEADS * HEAD_DIM)).T
        x = x + moe(rmsnorm(x, tensor(p + "ffn_norm.weight", (DIM,), norm=True)), p)
    x = rmsnorm(x, tensor("output_norm.weight", (DIM,), norm=True))
    return x @ tensor("output.weight", (VOCAB, DIM)).T


def main():
    ids = list(PROMPT)
    for _ in range(GREEDY):
        ids.append(int(np.argmax(forward(ids)[-1])))
    logits = forward(ids)
    assert [int(i) for i in np.argmax(logits[len(PROMPT) - 1:-1], axis=-1)] == ids[len(PROMPT):]
    here = os.path.dirname(os.path.abspath(__file__))
    np.save(os.path.join(here, "mini-qwen3moe.logits.npy"), logits.astype(np.float32))
    with open(os.path.join(here, "mini-qwen3moe.ids"), "w") as f:
        f.write(" ".join(str(i) for i in ids) + "\n")
    top2 = np.sort(logits, axis=-1)[:, -2:]
    print("ids", ids)
    print("min top1-top2 margin", float((top2[:, 1] - top2[:, 0]).min()))
    print("router gap", ROUTER_GAP[0], "max |logit|", float(np.abs(logits).max()))
    RENORMALISE[0] = False
    print("max |d| with renormalisation off", float(np.abs(forward(ids) - logits).max()))


if __name__ == "__main__":
    main()
