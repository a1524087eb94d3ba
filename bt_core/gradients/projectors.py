"""Gradient projectors: (B, n_params) → (B, k), linear, keyed by a seed.

Global coordinate indices follow `model.named_parameters()` order (tied weights once). Every
projector takes a gradient either whole (`project`) or as blocks of consecutive coordinates
(`project_blocks`, so a per-example gradient engine can hand over one parameter at a time and the
full (B, n_params) matrix need not be assembled).

* `CountSketch` (the reference's embedding, default): each coordinate's global index is hashed
  (splitmix64 finalizer, keyed) to a bucket and a ±1 sign; values are scatter-added.
  E⟨Sa, Sb⟩ = ⟨a, b⟩ and Var = (‖a‖²‖b‖² + ⟨a,b⟩² − 2Σ a_j²b_j²)/k, so cosine noise ≈ 1/√k.
  Cost O(B·n_params) whatever k is.
* `DenseProjector`: a dense Rademacher (or Gaussian) matrix with entries of variance 1/k,
  regenerated from the seed in row blocks (TRAK-style; for comparison). Same expectation and
  variance as CountSketch up to the Σa²b² term; cost O(B·n_params·k) plus generating n_params·k
  numbers per call.
* `Exact`: no projection (k must equal n_params), for models small enough; refused above
  `EXACT_MAX_PARAMS`.
* `FirstK` is the reference's pitfall P3 (keep only the first k flattened parameters). It exists so
  the coverage check can be shown to catch it; never use it for attribution.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Protocol

import numpy as np
import torch

from bt_core.gradients.scatter import signed_scatter_add

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
# (16,000 rollouts × 262,144 × 4 bytes ≈ 17 GB of embeddings: the practical limit)
EXACT_MAX_PARAMS = 1 << 18

# (global offset of the block's first coordinate, (B, m) values)
Blocks = Iterable[tuple[int, torch.Tensor]]


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

    def project(self, flat: torch.Tensor) -> torch.Tensor:
        """(..., n_params) → (..., k) float32."""
        ...

    def project_blocks(self, blocks: Blocks, batch: int) -> torch.Tensor:
        """Σ over blocks of the projection of coordinates [offset, offset + m): (batch, k) float32.
        Coordinates that appear in no block count as zero."""
        ...

    def project_blocks_with_norms(
        self, blocks: Blocks, batch: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`project_blocks` and Σ over blocks of each row's squared values, (batch,) float64."""
        ...


class _Base:
    name = "base"
    k: int
    n_params: int

    def project(self, flat: torch.Tensor) -> torch.Tensor:
        if flat.shape[-1] != self.n_params:
            raise ValueError(
                f"gradient has {flat.shape[-1]} coordinates, {self.name} expects {self.n_params}: "
                "build the projector with the model's parameter count"
            )
        flat2 = flat.reshape(-1, self.n_params)
        return self.project_blocks([(0, flat2)], flat2.shape[0]).reshape(*flat.shape[:-1], self.k)

    def project_blocks_with_norms(
        self, blocks: Blocks, batch: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`project_blocks` and the squared norms of the whole gradients, (batch,) float64, from
        the same single pass over the blocks (which may be a one-pass iterator)."""
        norm2 = torch.zeros(batch, dtype=torch.float64)

        def tap():
            for off, blk in blocks:
                norm2.add_(blk.reshape(batch, -1).double().square().sum(1))
                yield off, blk

        return self.project_blocks(tap(), batch), norm2

    def _check_block(self, off: int, blk: torch.Tensor) -> torch.Tensor:
        blk = blk.reshape(blk.shape[0], -1)
        if off < 0 or off + blk.shape[1] > self.n_params:
            raise ValueError(
                f"block [{off}, {off + blk.shape[1]}) lies outside the {self.n_params} coordinates"
            )
        return blk if blk.dtype == torch.float32 else blk.float()


class CountSketch(_Base):
    """CountSketch of the whole gradient, keyed by `seed`; the hash is built in chunks of
    coordinates.
    Blocks are scatter-added with their signs in one pass (`bt_core.gradients.scatter`)."""

    name = "countsketch"

    def __init__(self, n_params: int, k: int, seed: int = 0, chunk: int = 1 << 22):
        if not 1 <= k <= 1 << 32:
            raise ValueError(f"k={k} must lie in [1, 2**32]: buckets are stored as uint32")
        self.n_params, self.k, self.seed, self.chunk = n_params, k, seed, chunk
        key = splitmix64(np.array([seed], np.uint64))[0]
        # uint32 buckets, not int64: half the bytes the scatter streams per coordinate (the fused
        # loop ran 8% faster, bench in bt_core/gradients/scatter.py) and half the memory (538 MB
        # instead of 1.08 GB for SmolLM2's 134.5M coordinates); unsigned, so the compiled loop
        # does no negative-index wraparound. The torch path widens each block's slice to int64.
        self.buckets = np.zeros(n_params, np.uint32)
        self.signs = np.zeros(n_params, np.float32)
        for start in range(0, n_params, chunk):
            stop = min(start + chunk, n_params)
            h = splitmix64(np.arange(start, stop, dtype=np.uint64) ^ key)
            self.buckets[start:stop] = h % np.uint64(k)
            self.signs[start:stop] = np.where((h >> np.uint64(63)) == 1, -1.0, 1.0)

    def project_blocks(self, blocks: Blocks, batch: int) -> torch.Tensor:
        return self._project(blocks, batch, None)

    def project_blocks_with_norms(
        self, blocks: Blocks, batch: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        norm2 = torch.zeros(batch, dtype=torch.float64)
        return self._project(blocks, batch, norm2), norm2

    def _project(self, blocks: Blocks, batch: int, norm2: torch.Tensor | None) -> torch.Tensor:
        out = torch.zeros(batch, self.k, dtype=torch.float32)
        for off, blk in blocks:
            blk = self._check_block(off, blk)
            sl = slice(off, off + blk.shape[1])
            signed_scatter_add(out, norm2, blk, self.buckets[sl], self.signs[sl])
        return out


class DenseProjector(_Base):
    """Dense random projection P (n_params × k), entries ±1/√k (`dist="rademacher"`) or N(0, 1/k)
    (`"gaussian"`), regenerated from `seed` in blocks of `rows` coordinates on every call
    (TRAK-style); kept in memory instead when the whole matrix is at most `cache_bytes`."""

    name = "dense"

    def __init__(
        self,
        n_params: int,
        k: int,
        seed: int = 0,
        dist: str = "rademacher",
        rows: int = 2048,
        cache_bytes: int = 256 << 20,
    ):
        if dist not in ("rademacher", "gaussian"):
            raise ValueError(f"dist={dist!r} is unknown; choose rademacher or gaussian")
        self.n_params, self.k, self.seed, self.dist, self.rows = n_params, k, seed, dist, rows
        self._cache: dict[int, torch.Tensor] | None = (
            {} if n_params * k * 4 <= cache_bytes else None
        )

    def _block(self, i: int) -> torch.Tensor:
        """Rows [i·rows, (i+1)·rows) of P; seeded by (seed, i) so any block can be regenerated
        alone."""
        if self._cache is not None and i in self._cache:
            return self._cache[i]
        n = min(self.rows, self.n_params - i * self.rows)
        g = torch.Generator().manual_seed(
            int(splitmix64(np.array([self.seed * 1_000_003 + i], np.uint64))[0] >> 1)
        )
        m = torch.randn(n, self.k, generator=g)
        if self.dist == "rademacher":
            m.sign_()  # the sign of a Gaussian is a fair ±1 (3× faster here than bernoulli_)
        m.mul_(1.0 / math.sqrt(self.k))
        if self._cache is not None:
            self._cache[i] = m
        return m

    def project_blocks(self, blocks: Blocks, batch: int) -> torch.Tensor:
        out = torch.zeros(batch, self.k, dtype=torch.float32)
        for off, blk in blocks:
            blk = self._check_block(off, blk)
            lo, hi = off, off + blk.shape[1]
            for i in range(lo // self.rows, (hi - 1) // self.rows + 1 if hi > lo else 0):
                a, b = max(lo, i * self.rows), min(hi, (i + 1) * self.rows)
                out.addmm_(
                    blk[:, a - off : b - off], self._block(i)[a - i * self.rows : b - i * self.rows]
                )
        return out


class Exact(_Base):
    """No projection: the embedding is the gradient itself (k = n_params). Only for small models."""

    name = "exact"

    def __init__(self, n_params: int, k: int, seed: int = 0):
        if n_params > EXACT_MAX_PARAMS:
            raise ValueError(
                f"projector='exact' stores n_params={n_params:,} floats per rollout, more than "
                f"the limit {EXACT_MAX_PARAMS:,} (≈ 1 MB per rollout); use "
                "projector='countsketch' for this model"
            )
        if k != n_params:
            raise ValueError(
                f"projector='exact' has width n_params={n_params}, but k={k}; set "
                f"SketchConfig(projector='exact', k={n_params}) so every array is sized right"
            )
        self.n_params, self.k = n_params, n_params

    def project_blocks(self, blocks: Blocks, batch: int) -> torch.Tensor:
        out = torch.zeros(batch, self.k, dtype=torch.float32)
        for off, blk in blocks:
            blk = self._check_block(off, blk)
            out[:, off : off + blk.shape[1]] += blk
        return out


class FirstK(_Base):
    """BROKEN ON PURPOSE (pitfall P3): keeps the first k coordinates. Only for coverage tests."""

    name = "first_k"

    def __init__(self, n_params: int, k: int, seed: int = 0):
        self.n_params, self.k = n_params, min(k, n_params)

    def project_blocks(self, blocks: Blocks, batch: int) -> torch.Tensor:
        out = torch.zeros(batch, self.k, dtype=torch.float32)
        for off, blk in blocks:
            blk = self._check_block(off, blk)
            hi = min(off + blk.shape[1], self.k)
            if hi > off:
                out[:, off:hi] += blk[:, : hi - off]
        return out


def make_projector(name: str, n_params: int, k: int, seed: int) -> Projector:
    """The projector `name` (countsketch | dense | exact) of width k over n_params coordinates."""
    if name == "countsketch":
        return CountSketch(n_params, k, seed)
    if name == "dense":
        return DenseProjector(n_params, k, seed)
    if name == "exact":
        return Exact(n_params, k, seed)
    if name == "first_k":
        return FirstK(n_params, k, seed)
    raise ValueError(f"projector={name!r} is unknown; choose countsketch, dense or exact")
