"""The weights of the formula-defined test models (engine/testdata/script_models.h writes
the same values as GGUF): each tensor's values are a pure function of its name and element
index, splitmix64 of FNV-1a(name) + index, scaled to values exact in float32. Shared by the
reference scripts beside this file; it reads no GGUF and no Cascade code.
"""
import numpy as np


def fnv1a(name):
    h = 0xCBF29CE484222325
    for b in name.encode():
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def splitmix(x):
    with np.errstate(over="ignore"):
        z = x + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def tensor(name, shape, norm=False):
    """numpy shape (GGUF ne reversed); values exact in float32: norms near 1, others small."""
    n = int(np.prod(shape))
    with np.errstate(over="ignore"):
        z = splitmix(np.uint64(fnv1a(name)) + np.arange(n, dtype=np.uint64))
    if norm:
        v = 1.0 + ((z >> np.uint64(56)).astype(np.int64) - 128) / 2048.0
    else:
        v = ((z >> np.uint64(54)).astype(np.int64) - 512) / 4096.0
    return v.reshape(shape).astype(np.float64)


def rmsnorm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w
