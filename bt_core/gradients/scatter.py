"""The CountSketch inner loop: out[b, bucket[i]] += sign[i] · src[b, i], fused in one pass with the
rows' squared norms.

Written by hand because torch has no fused signed scatter. `out.index_add_(1, bucket, src * sign)`
(the torch path, kept as the fallback) makes two passes over the (B, m) block: the sign multiply
allocates a copy, and index_add_ along dim 1 advances one column at a time, touching B rows of the
output per coordinate. On the default model (89,088 coordinates, B = 64, k = 8192, one thread) the
torch path costs 8.2 ms per batch against 5.6 ms for the loop below, which walks one output row at a
time (32 KB at k = 8192, about L1's size) and reads the block sequentially. Other torch formulations
measured slower: scatter_add_ with an expanded index (7.9 ms), a flat 1-D index_add_ (13 ms), a CSR
sparse matmul (14–32 ms), a transposed (k, B) accumulator (11.8 ms). The buckets are uint32: the
loop reads 12 bytes per coordinate instead of 16, and an unsigned index needs no negative-index
wraparound, 5.3 → 4.9 ms on an AVX-512 EPYC (best of 40 passes over one default batch's blocks;
uint16 4.9, int8 signs 5.9–6.0, signed int32 or buckets packed with their sign 8.8–9.3 ms, and two
rows per pass changes the norms' rounding and was no faster). A loop over coordinates sorted by
bucket (a gather from the block's row instead of a scatter into the output's) took 8.2 ms.

Both paths add the coordinates of each (row, bucket) in increasing coordinate order, so they give
bit-identical sketches (tests/test_projectors.py checks it); their float64 squared norms agree to
float64 rounding. Which path runs is therefore only a matter of speed: numba is imported on the
first block of at least `FUSED_MIN_ROWS` rows and `FUSED_MIN_ELEMS` values (importing it and loading
the compiled loop costs ~1 s and ~115 MiB of resident memory, which a judging worker that projects a
handful of single target gradients should not pay); smaller blocks, and every block where numba
does not import, take the torch path.
"""

from __future__ import annotations

import numpy as np
import torch

# "auto": numba for big blocks when it imports (above); "numba" / "torch": always that path (tests)
KERNEL = "auto"
FUSED_MIN_ROWS = 2  # a single gradient (a target's) is one row: torch path, no import
FUSED_MIN_ELEMS = 1 << 15
TORCH_CHUNK = 1 << 20  # columns per index_add_ of the torch path
_compiled = None  # the numba-compiled loop, once imported; False when numba is not importable


def _loop(out, norm2, src, buckets, signs):  # pragma: no cover - compiled by numba
    # four coordinates per iteration with four norm accumulators: one float64 accumulator is a
    # dependency chain that bounds the loop (6.4 → 5.6 ms per default batch). Each (row, bucket)
    # still receives its coordinates in increasing order, so the sketch is unchanged bit for bit.
    m = src.shape[1]
    m4 = m - m % 4
    for b in range(src.shape[0]):
        o = out[b]
        s = src[b]
        a0 = 0.0
        a1 = 0.0
        a2 = 0.0
        a3 = 0.0
        for i in range(0, m4, 4):
            x0, x1, x2, x3 = s[i], s[i + 1], s[i + 2], s[i + 3]
            o[buckets[i]] += signs[i] * x0
            o[buckets[i + 1]] += signs[i + 1] * x1
            o[buckets[i + 2]] += signs[i + 2] * x2
            o[buckets[i + 3]] += signs[i + 3] * x3
            a0 += np.float64(x0) * np.float64(x0)
            a1 += np.float64(x1) * np.float64(x1)
            a2 += np.float64(x2) * np.float64(x2)
            a3 += np.float64(x3) * np.float64(x3)
        for i in range(m4, m):
            x = s[i]
            o[buckets[i]] += signs[i] * x
            a0 += np.float64(x) * np.float64(x)
        norm2[b] += (a0 + a1) + (a2 + a3)


def compiled_loop():
    """The numba-compiled loop (compiled on first use, ~0.6 s, then cached on disk by numba), or
    None when numba does not import."""
    global _compiled
    if _compiled is None:
        try:
            import numba
        except ImportError:
            _compiled = False
        else:
            _compiled = numba.njit(_loop, nogil=True, boundscheck=False, cache=True)
    return _compiled or None


def kernel_for(rows: int, elems: int) -> str:
    """The path ("numba" | "torch") a block of `rows` × (elems / rows) values takes."""
    if KERNEL != "auto":
        return KERNEL
    if rows < FUSED_MIN_ROWS or elems < FUSED_MIN_ELEMS:
        return "torch"
    return "numba" if compiled_loop() is not None else "torch"


def signed_scatter_add(
    out: torch.Tensor,
    norm2: torch.Tensor | None,
    src: torch.Tensor,
    buckets: np.ndarray,
    signs: np.ndarray,
) -> None:
    """out (B, k) float32 += Σ_i sign[i] · src[:, i] into column bucket[i], and, unless norm2 is
    None, norm2 (B,) float64 += Σ_i src[:, i]²; src (B, m) float32, buckets (m,) uint32, signs (m,)
    float32 of ±1 (numpy). In place. Without norm2 the torch path skips the squares (the loop's cost
    for them is a few percent, so it keeps them in a scratch row)."""
    path = kernel_for(src.shape[0], src.numel())
    if path == "numba" and out.is_contiguous() and (norm2 is None or norm2.is_contiguous()):
        sums = norm2 if norm2 is not None else torch.zeros(src.shape[0], dtype=torch.float64)
        compiled_loop()(
            out.numpy(), sums.numpy(), np.ascontiguousarray(src.detach().numpy()), buckets, signs
        )
    else:
        # in column chunks, in order (each (row, bucket) still gets its coordinates in increasing
        # order): index_add_ wants int64 indices (int32 ones measured ~10× slower on CPU, torch
        # 2.13), and a whole real-scale gradient (134.5M coordinates) would otherwise need a 1 GB
        # widened index and a 0.5 GB signed copy at once
        for lo in range(0, src.shape[1], TORCH_CHUNK):
            hi = min(lo + TORCH_CHUNK, src.shape[1])
            idx = torch.from_numpy(buckets[lo:hi].astype(np.int64))
            out.index_add_(1, idx, src[:, lo:hi] * torch.from_numpy(signs[lo:hi]))
        if norm2 is not None:
            norm2 += src.double().square().sum(1)
