#!/usr/bin/env python3
"""Reference logits for tools/quantize_types_test.cc, independent of Cascade's C++.

  PATH=$(getconf PATH) python3 tools/testdata/quantize/reference.py MODEL.gguf OUT.npy

Reads a GGUF file with a minimal reader written here, dequantizes every tensor in float64
with NumPy from the ggml block formats (F32, F16, Q8_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, IQ4_NL,
IQ4_XS), runs
the Llama forward pass (GGUF `llama`: RMSNorm, RoPE on adjacent pairs, GQA, SwiGLU, causal
attention) over the prompt ids teacher-forced, and writes the logits at every position for
the vocabulary ids SAMPLE_IDS (every 500th id) as float32 [n_tokens, 64]: a few KB to
commit beside the test. The model files are what `cascade quantize --type TYPE` writes from
../shared/models/tiny-llama-q/tiny-llama-q-Q8_0.gguf (the test writes them the same way).
"""
import struct
import sys

import numpy as np

SAMPLE_IDS = np.arange(0, 32000, 500)
PROMPT = "../shared/models/tiny-llama-q/prompt.ids"

# type: (elements per block, bytes per block)
BLOCKS = {0: (1, 4), 1: (1, 2), 8: (32, 34), 3: (32, 20), 6: (32, 22), 7: (32, 24),
          10: (256, 84), 11: (256, 110), 20: (32, 18), 23: (256, 136)}
# IQ4_NL / IQ4_XS: each 4-bit index selects one of these levels.
IQ4_LEVELS = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113],
                      dtype=np.float64)


def read_gguf(path):
    buf = open(path, "rb").read()
    off = 0

    def take(fmt):
        nonlocal off
        v = struct.unpack_from("<" + fmt, buf, off)
        off += struct.calcsize("<" + fmt)
        return v[0]

    def string():
        nonlocal off
        n = take("Q")
        s = buf[off:off + n].decode()
        off += n
        return s

    scalar = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q",
              12: "d"}

    def value(t):
        if t == 8:
            return string()
        if t == 9:
            et, n = take("I"), take("Q")
            return [value(et) for _ in range(n)]
        return take(scalar[t])

    assert buf[:4] == b"GGUF"
    off = 4
    take("I")  # version
    n_tensors, n_kv = take("Q"), take("Q")
    meta = {}
    for _ in range(n_kv):
        k = string()
        meta[k] = value(take("I"))
    infos = []
    for _ in range(n_tensors):
        name = string()
        nd = take("I")
        ne = [take("Q") for _ in range(nd)]
        infos.append((name, ne, take("I"), take("Q")))
    align = meta.get("general.alignment", 32)
    base = (off + align - 1) // align * align
    tensors = {}
    for name, ne, t, o in infos:
        count = int(np.prod(ne))
        per, nbytes = BLOCKS[t]
        raw = np.frombuffer(buf, np.uint8, count // per * nbytes, base + o)
        tensors[name] = dequantize(t, raw, count).reshape(list(reversed(ne)))
    return meta, tensors


def f16(b, at):  # fp16 column at byte `at` of each block row b
    return b[:, at:at + 2].copy().view(np.float16).astype(np.float64)[:, 0]


def nibbles(qs):  # [nb, 16] -> [nb, 32]: low nibbles (elements 0-15), then high
    return np.concatenate([qs & 0xF, qs >> 4], axis=1).astype(np.int64)


def fifth_bits(qh):  # [nb, 4] little-endian uint32 -> [nb, 32] bit j of element j
    bits = qh.copy().view("<u4")[:, 0].astype(np.int64)
    return (bits[:, None] >> np.arange(32)) & 1


def low2(qs):  # [nb, 64] -> [nb, 256]: element 128h + 32j + l = bits 2j of qs[32h + l]
    e = np.arange(256)
    byte = qs[:, 32 * (e // 128) + e % 32].astype(np.int64)
    return (byte >> (2 * ((e % 128) // 32))) & 3


def dequantize(t, raw, count):
    if t == 0:
        return raw.view(np.float32).astype(np.float64)
    if t == 1:
        return raw.view(np.float16).astype(np.float64)
    per, nbytes = BLOCKS[t]
    b = raw.reshape(-1, nbytes)
    if t == 8:  # Q8_0: d, int8 qs[32]
        y = f16(b, 0)[:, None] * b[:, 2:].view(np.int8).astype(np.float64)
    elif t == 3:  # Q4_1: d, m, qs[16]; q*d + m
        y = nibbles(b[:, 4:]) * f16(b, 0)[:, None] + f16(b, 2)[:, None]
    elif t == 6:  # Q5_0: d, qh[4], qs[16]; (q - 16)*d
        q = nibbles(b[:, 6:]) | (fifth_bits(b[:, 2:6]) << 4)
        y = (q - 16) * f16(b, 0)[:, None]
    elif t == 7:  # Q5_1: d, m, qh[4], qs[16]; q*d + m
        q = nibbles(b[:, 8:]) | (fifth_bits(b[:, 4:8]) << 4)
        y = q * f16(b, 0)[:, None] + f16(b, 2)[:, None]
    elif t == 10:  # Q2_K: scales[16], qs[64], d, dmin; d*(sc&15)*q - dmin*(sc>>4)
        sc = b[:, :16].astype(np.int64)
        sub = np.arange(256) // 16
        dl = f16(b, 80)[:, None] * (sc & 0xF)[:, sub]
        ml = f16(b, 82)[:, None] * (sc >> 4)[:, sub]
        y = dl * low2(b[:, 16:80]) - ml
    elif t == 11:  # Q3_K: hmask[32], qs[64], scales[12], d; d*(s-32)*(q - 4*(1-hbit))
        s = b[:, 96:108].astype(np.int64)
        i = np.arange(16)
        low4 = (s[:, i % 8] >> (4 * (i // 8))) & 0xF
        high2 = (s[:, 8 + i % 4] >> (2 * (i // 4))) & 3
        scale = (low4 | (high2 << 4)) - 32
        e = np.arange(256)
        hbit = (b[:, :32].astype(np.int64)[:, e % 32] >> (e // 32)) & 1
        q = low2(b[:, 32:96]) - 4 * (1 - hbit)
        y = f16(b, 108)[:, None] * scale[:, e // 16] * q
    elif t == 20:  # IQ4_NL: d, qs[16]; d * level[q]
        y = f16(b, 0)[:, None] * IQ4_LEVELS[nibbles(b[:, 2:])]
    elif t == 23:  # IQ4_XS: d, scales_h, scales_l[4], qs[128]; d * (scale - 32) * level[q]
        s = np.arange(8)
        high = (b[:, 2:4].copy().view("<u2")[:, 0].astype(np.int64)[:, None] >> (2 * s)) & 3
        low = (b[:, 4:8].astype(np.int64)[:, s // 2] >> (4 * (s % 2))) & 0xF
        scale = (low | (high << 4)) - 32  # [nb, 8]
        q = nibbles(b[:, 8:].reshape(-1, 16)).reshape(-1, 8, 32)  # sub-block s: qs[16s..]
        y = (f16(b, 0)[:, None] * scale)[:, :, None] * IQ4_LEVELS[q]
    else:
        raise ValueError(f"type {t}")
    return y.reshape(count)


def forward(meta, w, ids):
    dim = meta["llama.embedding_length"]
    n_layers = meta["llama.block_count"]
    n_heads = meta["llama.attention.head_count"]
    n_kv = meta["llama.attention.head_count_kv"]
    eps = meta["llama.attention.layer_norm_rms_epsilon"]
    theta = meta.get("llama.rope.freq_base", 10000.0)
    hd = dim // n_heads
    T = len(ids)

    def norm(x, g):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * g

    inv = theta ** (-np.arange(0, hd, 2) / hd)
    ang = np.arange(T)[:, None] * inv[None, :]
    cos, sin = np.cos(ang), np.sin(ang)

    def rope(x):  # [T, heads, hd], adjacent pairs (2i, 2i+1)
        a, b = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2] = a * cos[:, None, :] - b * sin[:, None, :]
        out[..., 1::2] = a * sin[:, None, :] + b * cos[:, None, :]
        return out

    x = w["token_embd.weight"][ids]
    mask = np.triu(np.full((T, T), -np.inf), 1)
    for l in range(n_layers):
        p = f"blk.{l}."
        h = norm(x, w[p + "attn_norm.weight"])
        q = rope((h @ w[p + "attn_q.weight"].T).reshape(T, n_heads, hd))
        k = rope((h @ w[p + "attn_k.weight"].T).reshape(T, n_kv, hd))
        v = (h @ w[p + "attn_v.weight"].T).reshape(T, n_kv, hd)
        g = n_heads // n_kv
        out = np.empty((T, n_heads, hd))
        for hh in range(n_heads):
            s = q[:, hh] @ k[:, hh // g].T / np.sqrt(hd) + mask
            s = np.exp(s - s.max(axis=1, keepdims=True))
            out[:, hh] = (s / s.sum(axis=1, keepdims=True)) @ v[:, hh // g]
        x = x + out.reshape(T, dim) @ w[p + "attn_output.weight"].T
        h = norm(x, w[p + "ffn_norm.weight"])
        gate = h @ w[p + "ffn_gate.weight"].T
        up = h @ w[p + "ffn_up.weight"].T
        x = x + (gate / (1 + np.exp(-gate)) * up) @ w[p + "ffn_down.weight"].T
    x = norm(x, w["output_norm.weight"])
    return x @ w["output.weight"].T


def main():
    meta, w = read_gguf(sys.argv[1])
    ids = [int(t) for t in open(PROMPT).read().split()]
    logits = forward(meta, w, ids)
    np.save(sys.argv[2], np.ascontiguousarray(logits[:, SAMPLE_IDS], dtype=np.float32))


if __name__ == "__main__":
    main()
