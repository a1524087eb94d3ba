"""Local-buffer control (after Hu et al. 2025): GAS restricted to the last window of steps before
the analysis point — what a method that keeps only a recent replay buffer can see.

The reference scored the last 100 of 1000 steps (10%). Here the window is `window` steps, by default
`window_fraction` (0.1) of the analysis point, at least one step. The analysis point is the draw's
analysis checkpoint (`problem.extra["analysis_step"]`) or, on the stream, the final checkpoint (the
end of training). Units in the window get η·cos(A·e, t) as `cosine`; every earlier unit ties below
them all (the buffer never saw it). On a draw all siblings sit at the analysis checkpoint, so it
equals `cosine`.
"""

from __future__ import annotations

import numpy as np

from bt_core.artifacts.targets import check_kind
from bt_core.attribution.registry import Estimator, register


@register
class LocalBuffer(Estimator):
    """GAS over the last window of steps before the analysis point; earlier units tie at the
    bottom."""

    name = "local_buffer"
    levels = ("rollout", "step")
    needs = ("emb", "weight", "targets", "ckpt_index", "lr", "step")

    def __init__(
        self, target: str = "in_context", window: int | None = None, window_fraction: float = 0.1
    ):
        check_kind(target)
        if window is not None and window < 1:
            raise ValueError(
                f"window={window} must be ≥ 1 step (or None for window_fraction of the run)"
            )
        if not 0.0 < window_fraction <= 1.0:
            raise ValueError(f"window_fraction={window_fraction} must lie in (0, 1]")
        super().__init__(target=target, window=window, window_fraction=window_fraction)
        self.target, self.window, self.window_fraction = target, window, window_fraction

    def window_of(self, problem) -> tuple[int, int]:
        """(first step, analysis step) of the buffer, both inclusive."""
        end = int(problem.extra.get("analysis_step", np.max(problem.checkpoint_steps)))
        w = self.window if self.window is not None else max(1, round(self.window_fraction * end))
        return end - w, end

    def score(self, problem) -> np.ndarray:
        lo, end = self.window_of(problem)
        step = np.asarray(problem.step)
        inside = (step >= lo) & (step <= end)
        if not inside.any():
            raise ValueError(
                f"the buffer window [{lo}, {end}] holds no unit of {problem.name} "
                f"(steps {int(step.min())}–{int(step.max())}); widen window="
            )
        lr = np.where(problem.lr > 0, problem.lr, 1.0)
        s = lr * problem.cosine(self.target)
        # finite, below every buffered unit: out-of-window units tie last
        floor = float(s[inside].min()) - 1.0
        return np.where(inside, s, floor)
