"""Oracle — VALIDATION ONLY. It reads the ground-truth labels, which no real method can see.

It exists to prove the suite can be passed: every checklist item must pass for it at the smoke scale
(a meta-test checks this). A method that looks like the oracle is reading the answers.
"""

from __future__ import annotations

import numpy as np

from bt_core.attribution.registry import Estimator, register


@register
class Oracle(Estimator):
    """Scores = ground-truth labels (GT share per unit). Validation only: it reads the answers."""

    name = "oracle"
    levels = ("rollout", "step")
    needs = ("truth",)

    def score(self, problem) -> np.ndarray:
        return np.asarray(problem.truth, dtype=np.float64)
