"""Adam-aware TracIn (the influence of LESS, Xia et al. 2024), on our stored AdamW states.

Under AdamW a rollout's gradient does not move θ along itself: the update is preconditioned per
coordinate, Δθ ≈ −η·P⊙g with P = 1/(√v̂ + ε). The first-order change of a target loss from unit u's
contribution to its step's update is then −(η/(G·B))·A_u⟨P⊙e_u, t⟩, so

    score_u = η_u · A_u · ⟨e_u, S(P_c ⊙ t_c)⟩,     c = c(u), the greatest checkpoint ≤ the unit's
                                                   step

using ⟨P⊙g, t⟩ = ⟨g, P⊙t⟩: the *target* is preconditioned once per checkpoint, in parameter space
(the sketch S is linear but does not commute with P), then sketched with the run's own projector, so
the stored rollout sketches e_u are reused as they are. t_c is the target loss gradient at
checkpoint c, rebuilt from its teacher-forced examples (`problem.target_examples`) through the
shared objective, as `tracincp`'s targets were; positive = the unit pushed the behavior up (the sign
convention of `bt_core.attribution.problem`).

Approximations (documented, not hidden):
* P_c comes from the AdamW state stored at checkpoint c (v̂ bias-corrected with the state's step
  count), held fixed over the checkpoint's interval (LESS does the same with its checkpoints).
  Checkpoint 0 is saved before the first GRPO update and holds no state: its units use the first
  checkpoint that has one.
* Momentum (β₁) and gradient clipping are ignored: momentum spreads a gradient over later steps with
  total weight ≈ 1, clipping rescales a whole step (every unit of the step alike).
* Coordinates that no update has reached (v = 0) get P = 0 (`adam_preconditioner` says why).
* Targets are taken at each unit's own checkpoint (TracInCP's assignment), not at one fixed
  checkpoint: the estimator scores every problem of the suite (stream at both levels, draws), none
  of which has a "measurement checkpoint"; the counterfactual item's measure is one more target it
  never sees.

It reads no labels, no rewards and no replays: `needs` lists what it uses.
"""

from __future__ import annotations

import numpy as np

from bt_core.artifacts.targets import check_kind
from bt_core.attribution.registry import Estimator, register


@register
class TracInAdam(Estimator):
    """η·A·⟨e, S(P_c⊙t_c)⟩: TracIn through each checkpoint's Adam preconditioner (LESS-style)."""

    name = "tracin_adam"
    levels = ("rollout", "step")
    needs = (
        "emb",
        "weight",
        "lr",
        "ckpt_index",
        "checkpoint_steps",
        "model_at",
        "codec",
        "target_examples",
        "preconditioner",
        "project",
    )

    def __init__(self, target: str = "in_context"):
        super().__init__(target=check_kind(target))
        self.target = target

    def preconditioned_targets(self, problem) -> dict[int, np.ndarray]:
        """Row j of the checkpoints the units use → S(P_j ⊙ t_j), (k,) (zeros where a checkpoint has
        no examples of the target kind, as its sketched target is)."""
        from bt_core.targets.examples import target_gradient
        from bt_core.training.model import torch_threads

        steps = [int(c) for c in np.asarray(problem.checkpoint_steps)]
        cache: dict[int, np.ndarray | None] = {}

        def precond(j: int) -> np.ndarray:
            # the checkpoint's own state, else the first later one that has a state
            for c in steps[j:]:
                if c not in cache:
                    cache[c] = problem.preconditioner(c)
                if cache[c] is not None:
                    return cache[c]
            raise ValueError(
                f"{problem.name}: no checkpoint at or after step {steps[j]} holds an AdamW state; "
                "tracin_adam needs the optimizer state the run stored with its checkpoints"
            )

        out = {}
        with torch_threads(1):
            for j in np.unique(np.asarray(problem.ckpt_index)):
                ex = problem.target_examples(self.target, steps[j])
                if ex is None or len(ex) == 0:
                    out[int(j)] = np.zeros(problem.emb.shape[1])
                    continue
                g = target_gradient(problem.model_at(steps[j]), ex, problem.codec.pad_id).numpy()
                out[int(j)] = np.asarray(problem.project(precond(int(j)) * g), np.float64)
        return out

    def score(self, problem) -> np.ndarray:
        targets = self.preconditioned_targets(problem)
        idx = np.asarray(problem.ckpt_index)
        raw = np.zeros(problem.n_units)
        for j, t in targets.items():
            rows = np.flatnonzero(idx == j)
            raw[rows] = np.asarray(problem.emb[rows]) @ t
        return np.asarray(problem.lr, np.float64) * np.asarray(problem.weight, np.float64) * raw
