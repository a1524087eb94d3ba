"""Oracle — VALIDATION ONLY. It reads the ground-truth labels, which no real method can see.

It declares ``needs = ("labels",)``, so it is handed a `LabelledProblem` (the only way to the
answers) and every record of it is marked "reads labels — validation only". It exists to prove the
suite can be passed: every checklist item must pass for it (a meta-test checks this). It is the one
built-in validation estimator (it declares ``role = "validation"``); any other label reader fails
its items as refused.
"""

from __future__ import annotations

import numpy as np

from bt_core.attribution.registry import Estimator, register


@register
class Oracle(Estimator):
    """Scores = ground-truth labels (GT share per unit). Validation only: it reads the answers."""

    name = "oracle"
    levels = ("rollout", "step")
    needs = ("labels",)
    role = "validation"  # the one label reader the suite admits (EstimatorSpec.builtin_validation)

    def score(self, problem) -> np.ndarray:
        return np.asarray(problem.truth, dtype=np.float64)
