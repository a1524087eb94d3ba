"""metagrad — the causal ideal: the exact metagradient of the counterfactual items' behavior measure
with respect to every rollout's weight in the logged loss, through the replayed GRPO updates (the
objective, gradient clipping, AdamW), by reverse-mode differentiation
(`bt_core.counterfactual.metagrad` holds the mathematics).

    score_i = −∂f/∂w_i |_{w=1}     f = behavior NLL on the held-out probes at the measurement
                                   checkpoint

Removing rollout i sets w_i from 1 to 0, so to first order it changes f by −∂f/∂w_i = score_i:
positive means "taught the behavior" (its removal raises the NLL), the sign convention of every
estimator.
Rollouts outside the trained window get 0 (`window_only`): the LDS removes only window rollouts, and
those after the measurement step never act on it (their derivative is exactly 0 anyway).

It reads no labels, no rewards and no replays' results — the logged stream (token ids, advantages,
steps, groups), the checkpoints with their AdamW state, the clip norm and the behavior measure's
examples and step: `needs` lists them. It has a rollout level only (the items sum its rollout scores
per step) and needs the stream's measure, so it does not score draw problems (fresh siblings at the
analysis checkpoint are not part of the logged stream).
"""

from __future__ import annotations

import numpy as np

from bt_core.attribution.registry import Estimator, register

DTYPES = ("float64", "float32")


@register
class MetaGrad(Estimator):
    """−∂(behavior NLL at the measurement step)/∂(rollout weight), exact, through the replayed
    updates."""

    name = "metagrad"
    levels = ("rollout",)
    needs = (
        "rollouts",
        "codec",
        "model_at",
        "optimizer_at",
        "checkpoint_steps",
        "grad_clip",
        "measure",
    )

    def __init__(self, dtype: str = "float64", window_only: bool = True):
        if dtype not in DTYPES:
            raise ValueError(
                f"dtype={dtype!r} is unknown; choose one of {', '.join(DTYPES)} (float64: exact to "
                "float64 rounding; float32: the logged arithmetic, adjoints with float32 rounding)"
            )
        super().__init__(dtype=dtype, window_only=window_only)
        self.dtype, self.window_only = dtype, bool(window_only)
        # per problem name: nll, forward_s, reverse_s, drift (for benchmarks)
        self.figures: dict = {}

    def score(self, problem) -> np.ndarray:
        import torch

        from bt_core.counterfactual.metagrad import LoggedStream, metagradient

        stream = LoggedStream(
            problem.rollouts,
            problem.codec,
            problem.model_at,
            problem.optimizer_at,
            tuple(int(c) for c in np.asarray(problem.checkpoint_steps)),
            float(problem.grad_clip),
        )
        m = problem.measure
        out = metagradient(
            stream, m.examples, int(m.step), dtype=getattr(torch, self.dtype), threads=1
        )
        self.figures[problem.name] = {k: v for k, v in out.items() if k != "dfdw"}
        scores = -np.asarray(out["dfdw"], np.float64)
        if self.window_only and m.window is not None:
            scores = np.where(np.asarray(m.window, bool), scores, 0.0)
        return scores
