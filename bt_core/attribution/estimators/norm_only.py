"""Norm-only control (checklist item 1): the embedding's norm, no target at all."""

from __future__ import annotations

import numpy as np

from bt_core.attribution.registry import Estimator, register


@register
class NormOnly(Estimator):
    """‖A·e‖ of each unit's sketched gradient, target-free: the magnitude confound (P1)."""

    name = "norm_only"
    levels = ("rollout", "step")
    needs = ("emb", "weight")
    role = "control"  # a target-free baseline (checklist.controls)

    def score(self, problem) -> np.ndarray:
        return problem.sketch_norm()
