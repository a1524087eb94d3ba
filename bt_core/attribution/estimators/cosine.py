"""Cross-step cosine = GAS (renormalized TracInCP; Hammoudeh & Lowd 2022), and its group-centred
variant.

score_u = η_u · cos(A_u·e_u, t_{c(u)}): the cosine between the unit's contribution to the update and
the target gradient at the greatest checkpoint ≤ its step, weighted by the learning rate.

Group-centred variant (`centre=`, registered as ``cosine_centred`` with ``centre="embeddings"`` and
the minimal-pair target — the reference's rollout-level direction score, "GAS group-centered":
cos(e_i − mean of its group's e, minimal-pair target), `E2_1_per_rollout_mp.py` section 2):

* ``"embeddings"``: subtract the GRPO / sibling group's mean contribution ē_g = mean_{i∈g} A_i·e_i
  before the cosine, cos(A_u·e_u − ē_g, t). What every sibling shares (the prompt's gradient, the
  group's common fluency direction) is removed; only what distinguishes a rollout from its siblings
  is compared with the target.
* ``"scores"``: subtract the group's mean score afterwards. Within-group rankings (AUC) are
  unchanged; only the ranking across groups (precision@k on the stream) moves.

Both need groups with several members, so they are rollout-level only (at step level each unit is
its own group and centring leaves nothing).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from bt_core.artifacts.targets import check_kind
from bt_core.attribution.registry import Estimator, register

CENTRES = ("none", "embeddings", "scores")


def _lr(problem) -> np.ndarray:
    return np.where(problem.lr > 0, problem.lr, 1.0)


def centre_scores(scores: np.ndarray, group: np.ndarray) -> np.ndarray:
    """scores − mean of the unit's group, (n,)."""
    _, inv = np.unique(group, return_inverse=True)
    return scores - (np.bincount(inv, weights=scores) / np.bincount(inv))[inv]


def group_centred_cosine(problem, kind: str, chunk: int = 4096, block: int = 512) -> np.ndarray:
    """cos(A_u·e_u − ē_{g(u)}, t_{c(u)}) per unit, (n_units,); 0 where either vector is 0.
    Two chunked passes over the embeddings (group sums, then centred dots and norms), so memory is
    (n_groups, k) plus one float64 block of `block` rows (or `chunk` rows × `block` columns) — not
    (n_units, k). The group sums take `chunk` rows at a time one column block after another: each
    column's sum is the same arithmetic as over all columns at once."""
    t = problem.target(kind).astype(np.float64)
    _, inv = np.unique(problem.group, return_inverse=True)
    n, n_groups, k = problem.n_units, int(inv.max()) + 1, t.shape[1]
    w = np.asarray(problem.weight, np.float64)
    sums = np.zeros((n_groups, k))
    for lo in range(0, n, chunk):
        rows = np.arange(lo, min(lo + chunk, n))
        onehot = sp.csr_matrix((w[rows], (inv[rows], rows - lo)), shape=(n_groups, rows.size))
        for c0 in range(0, k, block):
            cols = slice(c0, min(c0 + block, k))
            sums[:, cols] += onehot @ np.asarray(problem.emb[lo : lo + rows.size, cols], np.float64)
    means = sums / np.bincount(inv, minlength=n_groups)[:, None]
    dots, norms = np.zeros(n), np.zeros(n)
    # each row's figures are computed alone: the block size changes nothing
    for lo in range(0, n, block):
        rows = np.arange(lo, min(lo + block, n))
        c = w[rows, None] * np.asarray(problem.emb[rows], np.float64) - means[inv[rows]]
        dots[rows] = np.einsum("ij,ij->i", c, t[problem.ckpt_index[rows]])
        norms[rows] = np.linalg.norm(c, axis=1)
    denom = norms * np.linalg.norm(t, axis=1)[problem.ckpt_index]
    return np.divide(dots, denom, out=np.zeros(n), where=denom > 0)


@register
class Cosine(Estimator):
    """GAS: learning-rate-weighted cosine of each unit's gradient with the target gradient."""

    name = "cosine"
    levels = ("rollout", "step")
    needs = ("emb", "weight", "targets", "ckpt_index", "lr", "group")

    def __init__(self, target: str = "in_context", centre: str = "none"):
        check_kind(target)
        if centre not in CENTRES:
            raise ValueError(f"centre={centre!r} is unknown; choose one of {', '.join(CENTRES)}")
        super().__init__(target=target, centre=centre)
        self.target, self.centre = target, centre

    def score(self, problem) -> np.ndarray:
        if self.centre != "none" and problem.level != "rollout":
            raise ValueError(
                f"centre={self.centre!r} needs groups of several units; at level {problem.level!r} "
                "each unit is its own group. Use centre='none' there"
            )
        if self.centre == "embeddings":
            return _lr(problem) * group_centred_cosine(problem, self.target)
        cos = _lr(problem) * problem.cosine(self.target)
        return centre_scores(cos, problem.group) if self.centre == "scores" else cos


@register
class CosineCentred(Cosine):
    """GAS on group-centred gradients: cos(A·e − group mean, t) — only what differs from the
    siblings. Its default target is the reference's for this score, the minimal pair (fluency
    cancels in it)."""

    name = "cosine_centred"
    levels = ("rollout",)

    def __init__(self, target: str = "minimal_pair", centre: str = "embeddings"):
        super().__init__(target=target, centre=centre)
