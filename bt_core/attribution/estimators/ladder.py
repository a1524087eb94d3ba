"""The rungs from cheap to exact (issue 62): `ladder_r0`, `ladder_r0c`, `ladder_r1`, `ladder_r2`,
`ladder_r3`, `ladder_r4` (setting `k`, the checkpoint intervals with curvature; 1 by default), one
estimator per rung so that one session can judge several, each the exact derivative
of the ideal's own f (the behavior NLL at the measurement step) through a surrogate of the logged
updates with some dependencies frozen (`bt_core.counterfactual.ladder` holds the mathematics and
the rungs' one-sentence definitions); `metagrad` is the top rung. The rung is also a setting
(`--estimator-param ladder_r1.rung=R2`), recorded in the scorecard like any other.

    score_i = −∂f_rung/∂w_i |_{w=1}      the sign convention of every estimator

They read only what `metagrad` reads (`needs` is its list) and follow its trajectory: `states`
"auto" is `metagrad`'s rule (the replayed float64 trajectory when it fits in memory), so the ladder
is not confounded by drift; R0 and R0c read the stored checkpoints, their point being no replay.
Rollouts outside the trained window get 0, as `metagrad`'s do.

On a **draw** the one update a sibling acts on is the run's step at the analysis checkpoint, from
the empty step (w = 0). There the clip is inactive and the second moment is flat in w (`metagrad`'s
draw docstring), so R1–R4 are all exactly `metagrad`'s one-step score; R0 and R0c take the
plain gradient step of size η at the checkpoint: −η c ⟨∇ℓ_i(θ_S), ∇f(θ_S)⟩, the measure taken at
the checkpoint (one step from it, θ_T and θ_c are the same checkpoint to first order).
"""

from __future__ import annotations

import numpy as np

from bt_core.attribution.estimators.metagrad import (
    MetaGrad,
    check_settings,
    draw_step,
    in_window,
    logged_stream,
    require_measure,
)
from bt_core.attribution.registry import Estimator, register


class Ladder(Estimator):
    """−∂f/∂w through a surrogate of the logged updates (`bt_core.counterfactual.ladder`)."""

    name = "ladder"
    levels = ("rollout",)
    needs = MetaGrad.needs
    default_rung = "R3"
    # each costs about what the ideal does and passes no causal item it fails at default
    # (docs/ladder.md), so none is judged unless named
    opt_in = True

    def __init__(
        self,
        rung: str | None = None,
        k: int | None = None,
        dtype: str = "float64",
        window_only: bool = True,
        states: str = "auto",
    ):
        from bt_core.counterfactual.ladder import check_k
        from bt_core.counterfactual.ladder import rung as check_rung

        rung = self.default_rung if rung is None else rung
        r = check_rung(rung)
        k = (1 if r.curvature else 0) if k is None else k
        check_k(r, k)
        check_settings(dtype, states)
        super().__init__(rung=rung, k=k, dtype=dtype, window_only=window_only, states=states)
        self.rung, self.k, self.dtype = rung, k, dtype
        self.window_only, self.states = bool(window_only), states
        self.figures: dict = {}

    def score(self, problem) -> np.ndarray:
        from bt_core.counterfactual.ladder import rung_gradient

        require_measure(problem)
        if problem.kind == "draw":
            return self._score_draw(problem)
        stream, m, dtype, states = logged_stream(problem, self.dtype, self.states)
        out = rung_gradient(
            stream,
            m.examples,
            int(m.step),
            self.rung,
            dtype=dtype,
            threads=1,
            states=states,
            k=self.k,
        )
        self.figures[problem.name] = {k: v for k, v in out.items() if k != "dfdw"}
        return in_window(-np.asarray(out["dfdw"], np.float64), m, self.window_only)

    def _score_draw(self, problem) -> np.ndarray:
        import torch

        from bt_core.counterfactual.ladder import RUNGS, rollout_dots
        from bt_core.counterfactual.metagrad import _hyper
        from bt_core.training.behavior import measure_loss
        from bt_core.training.model import cast_model, torch_threads

        if RUNGS[self.rung].replay:
            ideal = MetaGrad(dtype=self.dtype)
            scores = ideal._score_draw(problem, torch)
            self.figures.update(ideal.figures)
            return scores
        m, step = problem.measure, draw_step(problem)
        with torch_threads(1):
            model = cast_model(problem.model_at(step), getattr(torch, self.dtype))
            lr = _hyper(problem.optimizer_at(step, model))["lr"]
            params = list(model.parameters())
            grad = torch.autograd.grad(
                measure_loss(model, m.examples, problem.codec.pad_id), params
            )
            dots = rollout_dots(
                model,
                [p.detach() for p in params],
                [g.detach() for g in grad],
                problem.rollouts,
                problem.codec,
            )
        return -lr * float(problem.extra["loss_weight"]) * dots


def _rung_class(rung: str) -> type[Ladder]:
    from bt_core.counterfactual.ladder import RUNGS

    cls = type(
        f"Ladder{rung}",
        (Ladder,),
        {
            "name": f"ladder_{rung.lower()}",
            "default_rung": rung,
            "__doc__": f"Rung {rung} of the ladder: {RUNGS[rung].sentence}.",
            "__module__": __name__,
        },
    )
    return register(cls)


LadderR0, LadderR0c, LadderR1, LadderR2, LadderR3, LadderR4 = (
    _rung_class(r) for r in ("R0", "R0c", "R1", "R2", "R3", "R4")
)
