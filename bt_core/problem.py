"""What an estimator sees: an `AttributionProblem`, and what it returns: one float per unit.

Two kinds of problem:

* ``stream``: the real training stream of one run. Units are rollouts (``level="rollout"``, embedding =
  sketch of ∇(−ℓ_i) at the rollout's own parameters, weighted by its advantage A_i: A_i·e_i is the
  rollout's contribution to the batch gradient) or optimizer steps (``level="step"``, embedding =
  sketch of the aggregated batch gradient ∇L_s; all rollouts of a step tie). Truth: GT labels.
* ``draw``: fresh sibling groups sampled at the analysis checkpoint (weight 1). Truth: behavior label.

Targets are the sketched target gradients at every checkpoint; each unit uses the target of the greatest
checkpoint ≤ its step (`ckpt_index`). `truth` exists only so that the `oracle` estimator can validate
the suite; a real estimator must not read it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class AttributionProblem:
    kind: str  # "stream" | "draw"
    level: str  # "rollout" | "step"
    seed: int  # training seed of the run
    emb: np.ndarray  # (n_units, k) unweighted sketches
    weight: np.ndarray  # (n_units,) A_i for stream rollouts, 1 otherwise
    grad_norm: np.ndarray  # (n_units,) exact ‖gradient‖ of each unit (unweighted)
    fluency: np.ndarray  # (n_units,) mean token log-prob (step level: mean over the step's rollouts)
    step: np.ndarray  # (n_units,) training step (draws: analysis checkpoint)
    group: np.ndarray  # (n_units,) GRPO group / sibling group (step level: the step)
    lr: np.ndarray  # (n_units,) learning rate of the unit's update
    ckpt_index: np.ndarray  # (n_units,) row of `targets[...]` to use for each unit
    targets: dict[str, np.ndarray]  # kind → (n_ckpt, k) sketched target gradients
    checkpoint_steps: np.ndarray  # (n_ckpt,)
    truth: np.ndarray  # (n_units,) float: GT share (oracle/validation only)
    unit_of_rollout: np.ndarray  # (n_rollouts,) unit index of every rollout (identity at rollout level)
    labels: np.ndarray  # (n_rollouts,) bool: what metrics score against (GT or behavior)
    model_at: Callable[[int], object] | None = None  # checkpoint step → model (for own-gradient methods)
    name: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def n_units(self) -> int:
        return int(self.emb.shape[0])

    # -- helpers that honour the advantage weight without materializing A·e --------------------------
    def sketch_norm(self) -> np.ndarray:
        """‖weight·e‖ per unit, (n_units,)."""
        return np.abs(self.weight) * np.sqrt(np.einsum("ij,ij->i", self.emb, self.emb, dtype=np.float64))

    def dot(self, kind: str) -> np.ndarray:
        """⟨weight·e_u, t_{c(u)}⟩ per unit, (n_units,)."""
        t = np.asarray(self.targets[kind])
        out = np.zeros(self.n_units)
        for j in np.unique(self.ckpt_index):
            rows = np.flatnonzero(self.ckpt_index == j)
            out[rows] = np.asarray(self.emb[rows]) @ t[j].astype(np.float64)
        return out * self.weight

    def cosine(self, kind: str) -> np.ndarray:
        """cos(weight·e_u, t_{c(u)}); 0 where either vector is 0, (n_units,)."""
        t = np.asarray(self.targets[kind])
        tn = np.linalg.norm(t, axis=1)[self.ckpt_index]
        en = self.sketch_norm()
        denom = en * tn
        return np.divide(self.dot(kind), denom, out=np.zeros(self.n_units), where=denom > 0)

    def to_rollouts(self, unit_scores: np.ndarray) -> np.ndarray:
        """Broadcast unit scores to rollouts (step level: every rollout of a step gets its score)."""
        return np.asarray(unit_scores)[self.unit_of_rollout]
