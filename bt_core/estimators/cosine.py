"""Cross-step cosine = GAS (renormalized TracInCP; Hammoudeh & Lowd 2022).

score_u = η_u · cos(A_u·e_u, t_{c(u)}): the cosine between the unit's contribution to the update and
the target gradient at the greatest checkpoint ≤ its step, weighted by the learning rate.
"""

from __future__ import annotations

import numpy as np

from bt_core.registry import Estimator, register
from bt_core.targets import TARGET_KINDS


@register
class Cosine(Estimator):
    """GAS: learning-rate-weighted cosine of each unit's gradient with the target gradient."""

    name = "cosine"
    levels = ("rollout", "step")

    def __init__(self, target: str = "in_context"):
        if target not in TARGET_KINDS:
            raise ValueError(f"target={target!r} is unknown; choose one of {', '.join(TARGET_KINDS)}")
        super().__init__(target=target)
        self.target = target

    def score(self, problem) -> np.ndarray:
        lr = np.where(problem.lr > 0, problem.lr, 1.0)
        return lr * problem.cosine(self.target)
