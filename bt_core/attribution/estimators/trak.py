"""TRAK-style attribution (Park et al. 2023) as the reference applies it: no ensembling, Q = 1.

    s = (ΦΦᵀ + λI)⁻¹ Φ t,   λ = λ_scale · ‖Φ‖²_F / d        (dual form; λ_scale = 0.1, d = k)

Φ (n_units, k) holds the units' update contributions A_u·e_u (the same convention as
`dot`/`cosine`); t is the target of each unit's checkpoint, so with several checkpoints s_u =
[(ΦΦᵀ+λI)⁻¹ Φ T]_{u, c(u)} for T = (t_0 … t_C) stacked as columns.

Why a primal solve: the dual needs the n × n Gram matrix — 0.7 GB in float64 for the 9,600
stream rollouts of the default scale (2 GB at the 16,000 before issue 46), and it grows as n².
The push-through identity

    (ΦΦᵀ + λI)⁻¹ Φ = Φ (ΦᵀΦ + λI)⁻¹                    (both equal Φ(ΦᵀΦ + λI)⁻¹ for λ > 0)

gives exactly the same scores from the k × k matrix ΦᵀΦ, accumulated over row chunks of Φ in column
blocks of its upper triangle (`primal_gram`) and factored in its own buffer, so memory is
O(k² + chunk·k + k·cols) whatever n is: one Gram (512 MB at k = 8192), never a second k × k product
or a copy of it inside the solve. `form="auto"` solves the dual when n ≤ k (draws, step level) and
the primal otherwise; both are exact, and the unit tests check they agree.
"""

from __future__ import annotations

import numpy as np
import scipy.linalg

from bt_core.artifacts.pages import release
from bt_core.artifacts.targets import check_kind
from bt_core.attribution.registry import Estimator, register

FORMS = ("auto", "primal", "dual")


def _rows(problem, lo: int, hi: int) -> np.ndarray:
    """Φ rows lo:hi = weight·e, float64, (hi−lo, k); scaled in place (one float64 block, not
    two)."""
    phi = np.array(problem.emb[lo:hi], np.float64)
    phi *= np.asarray(problem.weight[lo:hi], np.float64)[:, None]
    return phi


def _lam(fro2: float, k: int, lam_scale: float, name: str) -> float:
    lam = lam_scale * fro2 / k
    if not lam > 0:
        raise ValueError(
            f"TRAK on {name}: ‖Φ‖²_F = {fro2:.3g}, so λ = {lam:.3g}; every unit's embedding is "
            "zero and there is nothing to attribute"
        )
    return lam


def add_upper_gram(gram: np.ndarray, phi: np.ndarray, cols: int = 1024) -> None:
    """gram[i, j] += (φᵀφ)[i, j] for i ≤ j (and below the diagonal inside each diagonal block), in
    place; `phi` (rows, k), `gram` (k, k). Column block [j0, j1) adds φ[:, :j1]ᵀ φ[:, j0:j1], so
    the one temporary is (j1, cols), never a (k, k) product beside the Gram (512 MB at k = 8192),
    and the flops are those of a symmetric rank update (half a full product)."""
    k = phi.shape[1]
    for j0 in range(0, k, cols):
        j1 = min(j0 + cols, k)
        gram[:j1, j0:j1] += phi[:, :j1].T @ phi[:, j0:j1]


def mirror_upper(gram: np.ndarray, cols: int = 1024) -> None:
    """Copy the upper triangle of the square `gram` onto its lower one, block by block (no n × n
    temporary), so it is exactly symmetric."""
    k = gram.shape[0]
    for j0 in range(0, k, cols):
        j1 = min(j0 + cols, k)
        gram[j0:j1, :j0] = gram[:j0, j0:j1].T
        blk = gram[j0:j1, j0:j1]
        lower = np.tril_indices(j1 - j0, -1)
        blk[lower] = blk.T[lower]


def primal_gram(problem, chunk: int = 2048, cols: int = 1024) -> tuple[np.ndarray, float]:
    """ΦᵀΦ (k, k), exactly symmetric, and ‖Φ‖²_F, accumulated over row chunks of Φ: one (chunk, k)
    float64 block and one (k, cols) product are held beside the Gram, never the (n, k) float64
    copy of Φ; the embeddings' mapped pages are released after each chunk."""
    n, k = problem.emb.shape
    gram, fro2 = np.zeros((k, k)), 0.0
    for lo in range(0, n, chunk):
        phi = _rows(problem, lo, min(lo + chunk, n))
        add_upper_gram(gram, phi, cols)
        fro2 += float(np.einsum("ij,ij->", phi, phi))
        del phi
        release(problem.emb)
    mirror_upper(gram, cols)
    return gram, fro2


def trak_primal(
    problem, targets: np.ndarray, lam_scale: float = 0.1, chunk: int = 2048, cols: int = 1024
) -> np.ndarray:
    """Φ(ΦᵀΦ + λI)⁻¹ T via the k × k Gram (`primal_gram`, column blocks of width `cols`);
    `targets` (C, k) → (n_units, C). The Gram is factored in its own buffer and freed before Φ is
    read again, so at most the Gram and one row chunk are held at a time."""
    n, k = problem.emb.shape
    gram, fro2 = primal_gram(problem, chunk, cols)
    gram[np.diag_indices(k)] += _lam(fro2, k, lam_scale, problem.name)
    # gram is exactly symmetric, so its transpose (Fortran-ordered) is the same matrix and LAPACK
    # factors it in place instead of copying k² floats first
    t = np.asarray(targets, np.float64).T
    m = scipy.linalg.solve(gram.T, t, assume_a="pos", overwrite_a=True)  # (k, C)
    del gram
    out = np.zeros((n, m.shape[1]))
    for lo in range(0, n, chunk):
        out[lo : lo + chunk] = _rows(problem, lo, min(lo + chunk, n)) @ m
        release(problem.emb)
    return out


def gram_of(
    problem, targets: np.ndarray, chunk: int = 1024
) -> tuple[np.ndarray, np.ndarray, float]:
    """ΦΦᵀ (n_units, n_units), Φ·targetsᵀ (n_units, C) and ‖Φ‖²_F, built from row blocks of Φ: two
    (chunk, k) float64 blocks are held at a time, never the (n_units, k) float64 copy of the
    embeddings (1 GB for a default stream seed). Each off-diagonal block is computed once and
    mirrored, so the Gram is exactly symmetric. The embeddings' mapped pages are released after each
    block, so they do not pile up to the whole map (512 MB) beside the Gram either."""
    n = problem.emb.shape[0]
    gram, rhs, fro2 = np.empty((n, n)), np.empty((n, targets.shape[0])), 0.0
    t = np.asarray(targets, np.float64).T
    for lo in range(0, n, chunk):
        hi = min(lo + chunk, n)
        a = _rows(problem, lo, hi)
        fro2 += float(np.einsum("ij,ij->", a, a))
        gram[lo:hi, lo:hi], rhs[lo:hi] = a @ a.T, a @ t
        for lo2 in range(hi, n, chunk):
            hi2 = min(lo2 + chunk, n)
            blk = a @ _rows(problem, lo2, hi2).T
            gram[lo:hi, lo2:hi2], gram[lo2:hi2, lo:hi] = blk, blk.T
            release(problem.emb)
        release(problem.emb)
    return gram, rhs, fro2


def trak_dual(
    problem, targets: np.ndarray, lam_scale: float = 0.1, chunk: int = 1024
) -> np.ndarray:
    """(ΦΦᵀ + λI)⁻¹ Φ T with the n × n Gram (for n ≤ k); `targets` (C, k) → (n_units, C). Memory:
    the Gram and two row blocks of Φ (`gram_of`); the solve works in the Gram's own buffer."""
    n, k = problem.emb.shape
    gram, rhs, fro2 = gram_of(problem, targets, chunk)
    gram[np.diag_indices(n)] += _lam(fro2, k, lam_scale, problem.name)
    # gram is exactly symmetric, so its transpose (Fortran-ordered) is the same matrix and LAPACK
    # factors it in place instead of copying n² floats first
    return scipy.linalg.solve(gram.T, rhs, assume_a="pos", overwrite_a=True)


@register
class TRAK(Estimator):
    """TRAK-style dual form (ΦΦᵀ+λI)⁻¹Φt, λ = 0.1‖Φ‖²_F/k, solved exactly in the cheaper of
    dual/primal."""

    name = "trak"
    levels = ("rollout", "step")
    needs = ("emb", "weight", "targets", "ckpt_index")

    def __init__(
        self,
        target: str = "in_context",
        lam_scale: float = 0.1,
        form: str = "auto",
        chunk: int = 2048,
    ):
        check_kind(target)
        if form not in FORMS:
            raise ValueError(f"form={form!r} is unknown; choose one of {', '.join(FORMS)}")
        if not lam_scale > 0:
            raise ValueError(f"lam_scale={lam_scale} must be > 0 (the reference uses 0.1)")
        super().__init__(target=target, lam_scale=lam_scale, form=form, chunk=chunk)
        self.target, self.lam_scale, self.form, self.chunk = target, lam_scale, form, chunk

    def score(self, problem) -> np.ndarray:
        t = problem.target(self.target)
        used = np.unique(problem.ckpt_index)  # solve only for the checkpoints some unit uses
        n, k = problem.emb.shape
        dual = self.form == "dual" or (self.form == "auto" and n <= k)
        s = (
            trak_dual(problem, t[used], self.lam_scale)
            if dual
            else trak_primal(problem, t[used], self.lam_scale, self.chunk)
        )
        col = np.searchsorted(used, problem.ckpt_index)
        return s[np.arange(n), col]
