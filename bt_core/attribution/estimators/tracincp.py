"""TracInCP (Pruthi et al. 2020) as the reference applies it to online RL.

    score_u = Σ_c η_c ⟨A_u·e_u, t_c⟩ over the checkpoints c assigned to u = η_{c(u)} ⟨A_u·e_u,
        t_{c(u)}⟩

Each rollout is used by exactly one update, so it is assigned to one checkpoint: the greatest
checkpoint ≤ its step (`AttributionProblem.ckpt_index`), whose target is recomputed there. e_u is
the sketch at the rollout's *own* parameters (replayed), not at the checkpoint — more faithful than
classic TracInCP, which evaluates training gradients at the checkpoints (the library adapters do
that). η_c is the learning rate of the unit's update; sign: one SGD step on A_u·e_u lowers the
target loss by ∝ η A_u⟨e_u, t⟩, so a positive score means the unit pushed the behavior up.
"""

from __future__ import annotations

import numpy as np

from bt_core.artifacts.targets import check_kind
from bt_core.attribution.registry import Estimator, register


@register
class TracInCP(Estimator):
    """Σ_c η_c⟨A·e, t_c⟩ with the target recomputed at each checkpoint (the reference's
    TracInCP)."""

    name = "tracincp"
    levels = ("rollout", "step")
    needs = ("emb", "weight", "targets", "ckpt_index", "lr")

    def __init__(self, target: str = "in_context"):
        super().__init__(target=check_kind(target))
        self.target = target

    def score(self, problem) -> np.ndarray:
        return np.asarray(problem.lr, np.float64) * problem.dot(self.target)
