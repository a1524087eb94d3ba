"""Gradient dot product (GAS's unnormalized variant, "Grad-Dot"): score_u = ⟨A_u·e_u, t_{c(u)}⟩.

No learning-rate weight and no normalization, so a large gradient counts for more: it is exposed to
the magnitude confound (P1) by construction. With a constant learning rate it ranks exactly as
`tracincp`.
"""

from __future__ import annotations

import numpy as np

from bt_core.artifacts.targets import check_kind
from bt_core.attribution.registry import Estimator, register


@register
class Dot(Estimator):
    """⟨A·e, t⟩: unnormalized gradient alignment with the target (GAS without the
    renormalization)."""

    name = "dot"
    levels = ("rollout", "step")
    needs = ("emb", "weight", "targets", "ckpt_index")

    def __init__(self, target: str = "in_context"):
        super().__init__(target=check_kind(target))
        self.target = target

    def score(self, problem) -> np.ndarray:
        return problem.dot(self.target)
