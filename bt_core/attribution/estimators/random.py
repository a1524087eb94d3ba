"""Random control: uniform scores, seeded by the problem (chance-level by construction)."""

from __future__ import annotations

import zlib

import numpy as np

from bt_core.attribution.registry import Estimator, register


@register
class Random(Estimator):
    """Uniform random scores; the chance baseline every method must beat by more than its spread."""

    name = "random"
    levels = ("rollout", "step")
    needs = ()  # nothing: seeded by the problem's identity
    role = "control"  # a target-free baseline (checklist.controls)

    def __init__(self, seed: int = 0):
        super().__init__(seed=seed)
        self.seed = seed

    def score(self, problem) -> np.ndarray:
        key = zlib.crc32(f"{problem.kind}/{problem.level}/{problem.name}".encode())
        return np.random.default_rng([self.seed, problem.seed, key]).random(problem.n_units)
