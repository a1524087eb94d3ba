"""Gradient projectors: (B, n_params) → (B, k).

CountSketch (the reference's embedding): each coordinate's *global* index is hashed (splitmix64
finalizer, keyed) to a bucket and a ±1 sign, and values are scatter-added. E⟨Sa, Sb⟩ = ⟨a, b⟩ and the
cosine noise is ≈ 1/√k. Global indices follow `model.named_parameters()` order (tied weights once).

`FirstK` is the reference's pitfall P3 (keep only the first k flattened parameters). It exists so the
coverage check can be shown to catch it; never use it for attribution.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
import torch

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def splitmix64(x: np.ndarray) -> np.ndarray:
    """The splitmix64 finalizer on uint64 arrays (wrapping arithmetic)."""
    z = (x.astype(np.uint64) + _GOLDEN).astype(np.uint64)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


class Projector(Protocol):
    """Maps flat gradients (B, n_params) to embeddings (B, k); linear."""

    name: str
    k: int
    n_params: int

    def project(self, flat: torch.Tensor) -> torch.Tensor: ...


class CountSketch:
    """CountSketch of the whole gradient, keyed by `seed`. Chunked over coordinates."""

    name = "countsketch"

    def __init__(self, n_params: int, k: int, seed: int = 0, chunk: int = 1 << 22):
        self.n_params, self.k, self.seed, self.chunk = n_params, k, seed, chunk
        key = splitmix64(np.array([seed], np.uint64))[0]
        buckets, signs = [], []
        for start in range(0, n_params, chunk):
            idx = np.arange(start, min(start + chunk, n_params), dtype=np.uint64)
            h = splitmix64(idx ^ key)
            buckets.append(torch.from_numpy((h % np.uint64(k)).astype(np.int64)))
            signs.append(torch.from_numpy(np.where((h >> np.uint64(63)) == 1, -1.0, 1.0).astype(np.float32)))
        self.buckets, self.signs = buckets, signs

    def project(self, flat: torch.Tensor) -> torch.Tensor:
        if flat.shape[-1] != self.n_params:
            raise ValueError(f"gradient has {flat.shape[-1]} coordinates, sketch expects {self.n_params}")
        flat2 = flat.reshape(-1, self.n_params).float()
        out = torch.zeros(flat2.shape[0], self.k, dtype=torch.float32)
        for i, (b, s) in enumerate(zip(self.buckets, self.signs, strict=True)):
            lo = i * self.chunk
            out.index_add_(1, b, flat2[:, lo: lo + b.numel()] * s)
        return out.reshape(*flat.shape[:-1], self.k)


class FirstK:
    """BROKEN ON PURPOSE (pitfall P3): keeps the first k coordinates. Only for coverage tests."""

    name = "first_k"

    def __init__(self, n_params: int, k: int, seed: int = 0):
        self.n_params, self.k = n_params, min(k, n_params)

    def project(self, flat: torch.Tensor) -> torch.Tensor:
        return flat[..., : self.k].float().clone()


def make_projector(name: str, n_params: int, k: int, seed: int) -> Projector:
    if name == "countsketch":
        return CountSketch(n_params, k, seed)
    if name == "first_k":
        return FirstK(n_params, k, seed)
    raise ValueError(f"projector={name!r} is unknown; choose countsketch")
