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

Sign conventions (every built-in follows them; a plug-in should too):

* ``emb[u]`` is the sketch of ∇(−ℓ_u), the gradient of the unit's negative log-likelihood;
* a target ``t`` is the gradient of a target *loss* (an NLL), so −t is the direction that makes the
  behavior more likely;
* a stream rollout's update contribution is ``weight[u]·emb[u]`` (weight = advantage A_u); one SGD step
  of size η on it changes the target loss by ≈ −(η/B)·A_u⟨e_u, t⟩ (B = groups per step). So
  ⟨weight·e, t⟩ > 0 means "this unit taught the behavior": higher scores = more responsible.

Fields added for methods that compute their own gradients (all optional, `None` on synthetic problems):
``rollouts`` (the `RolloutTable` whose row i is unit i at rollout level; token ids for
`grpo.batch_of`), ``codec`` (the run's `TokenIds`: pad/EOS ids), ``target_examples(kind, step)`` (the
teacher-forced sequences whose loss gradient *is* the target at checkpoint `step`, see
`bt_core.artifacts.targets.TargetExamples`) and
``draw`` (which seeded target draw `targets` holds: 0 on the stream, the draw index on draws).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from bt_core.artifacts.targets import UnknownTargetError

__all__ = ["AttributionProblem", "UnknownTargetError"]


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
    rollouts: object | None = None  # RolloutTable; row i ↔ unit i (rollout level only); None on step level
    codec: object | None = None  # the run's bt_core.artifacts.run.TokenIds (pad/EOS ids for collate)
    target_examples: Callable[[str, int], object] | None = None  # (kind, ckpt step) → TargetExamples
    draw: int = 0  # seeded target draw held in `targets` (stream: 0; draw problems: the draw index)

    @property
    def n_units(self) -> int:
        return int(self.emb.shape[0])

    def target(self, kind: str) -> np.ndarray:
        """Sketched targets of `kind`, (n_ckpt, k); an unknown kind raises `UnknownTargetError`."""
        if kind not in self.targets:
            raise UnknownTargetError(
                f"target={kind!r} is unknown for problem {self.name or '?'}; choose one of "
                f"{', '.join(sorted(self.targets))} (set it with the estimator's target= argument)")
        return np.asarray(self.targets[kind])

    def target_per_unit(self, kind: str) -> np.ndarray:
        """The target row each unit is scored against, t_{c(u)}: (n_units, k) — small problems only."""
        return self.target(kind)[self.ckpt_index]

    # -- helpers that honour the advantage weight without materializing A·e --------------------------
    def sketch_norm(self) -> np.ndarray:
        """‖weight·e‖ per unit, (n_units,)."""
        return np.abs(self.weight) * np.sqrt(np.einsum("ij,ij->i", self.emb, self.emb, dtype=np.float64))

    def dot(self, kind: str) -> np.ndarray:
        """⟨weight·e_u, t_{c(u)}⟩ per unit, (n_units,)."""
        t = self.target(kind)
        out = np.zeros(self.n_units)
        for j in np.unique(self.ckpt_index):
            rows = np.flatnonzero(self.ckpt_index == j)
            out[rows] = np.asarray(self.emb[rows]) @ t[j].astype(np.float64)
        return out * self.weight

    def cosine(self, kind: str) -> np.ndarray:
        """cos(weight·e_u, t_{c(u)}); 0 where either vector is 0, (n_units,)."""
        t = self.target(kind)
        tn = np.linalg.norm(t, axis=1)[self.ckpt_index]
        en = self.sketch_norm()
        denom = en * tn
        return np.divide(self.dot(kind), denom, out=np.zeros(self.n_units), where=denom > 0)

    @classmethod
    def synthetic(cls, n_units: int = 24, k: int = 16, group_size: int = 4, n_ckpt: int = 2, seed: int = 0,
                  kind: str = "stream", level: str = "rollout",
                  kinds: tuple[str, ...] = ("constructed", "in_context", "minimal_pair")) -> AttributionProblem:
        """A small random problem without any model, for unit tests of estimators and plug-ins.
        Units are sorted by step over `n_ckpt` checkpoints; stream problems get random signed weights."""
        if n_units % group_size or n_units < 2 * group_size:
            raise ValueError(f"n_units={n_units} must be a multiple of group_size={group_size} with ≥ 2 groups")
        rng = np.random.default_rng(seed)
        n_groups = n_units // group_size
        group = np.repeat(np.arange(n_groups), group_size)
        step = np.repeat(np.arange(n_groups), group_size)  # one group per step
        ckpt_steps = np.linspace(0, n_groups, n_ckpt, endpoint=False).astype(int)
        labels = np.zeros(n_units, bool)
        labels[rng.choice(n_units, size=max(2, n_units // 5), replace=False)] = True
        weight = rng.standard_normal(n_units) if kind == "stream" else np.ones(n_units)
        return cls(kind=kind, level=level, seed=seed, emb=rng.standard_normal((n_units, k)).astype(np.float32),
                   weight=weight, grad_norm=rng.random(n_units) + 0.5, fluency=-rng.random(n_units),
                   step=step, group=group, lr=np.full(n_units, 1e-3),
                   ckpt_index=np.searchsorted(ckpt_steps, step, side="right") - 1,
                   targets={t: rng.standard_normal((n_ckpt, k)).astype(np.float32) for t in kinds},
                   checkpoint_steps=ckpt_steps, truth=labels.astype(float), unit_of_rollout=np.arange(n_units),
                   labels=labels, name=f"synthetic{seed}/{kind}/{level}")

    def to_rollouts(self, unit_scores: np.ndarray) -> np.ndarray:
        """Broadcast unit scores to rollouts (step level: every rollout of a step gets its score)."""
        return np.asarray(unit_scores)[self.unit_of_rollout]
