"""Fluency control (checklist item 5): the rollout's mean token log-prob under the model."""

from __future__ import annotations

import numpy as np

from bt_core.attribution.registry import Estimator, register


@register
class Fluency(Estimator):
    """Mean token log-prob of the rollout at its own parameters: the on-policy fluency confound
    (P5)."""

    name = "fluency"
    levels = ("rollout", "step")
    needs = ("fluency",)
    role = "control"  # a target-free baseline (checklist.controls)

    def score(self, problem) -> np.ndarray:
        return np.asarray(problem.fluency, dtype=np.float64)
