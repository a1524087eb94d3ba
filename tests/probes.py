"""Probes: estimators built to pass some checklist items and fail others, so that each column of the
verdict grid is shown to ask its own question (issue 61, `tests/test_meta.py`).

They are not adversaries (they do not try to pass the whole checklist) and not methods: each is
the exact ideal (`metagrad`) or a target-free control where one item's question is answered, and
something that cannot answer it where another is. Loaded by the suite as ``probes:ClassName``
(this directory on the path). None reads the labels or anything `metagrad` does not read, besides
the controls' own fields (the advantage, the sketches' norms, fluency).
"""

from __future__ import annotations

import numpy as np

from bt_core.attribution.estimators.metagrad import MetaGrad
from bt_core.attribution.problem import row_norms
from bt_core.attribution.registry import Estimator


class SignedNorm(Estimator):
    """The target-free control A·‖e‖ (the signed update size) judged as an estimator: it carries
    causal signal on the stream (a larger, positively weighted update moves the measure more), so
    it may pass `counterfactual`; it is one of the controls `magnitude_control` compares with, and
    ties itself there."""

    name = "signed_norm_probe"
    levels = ("rollout",)
    needs = ("weight", "emb")

    def score(self, problem):
        # the control's own norms (`checklist.controls`), so that it ties the control exactly
        return np.asarray(problem.weight, float) * row_norms(problem.emb)


class StreamIdealDrawFluency(MetaGrad):
    """The exact ideal on the stream, fluency on the draws: every stream item's question is
    answered, the draws' fluency confound is the whole score there."""

    name = "stream_ideal_draw_fluency"
    needs = (*MetaGrad.needs, "fluency")

    def score(self, problem):
        if problem.kind == "draw":
            return np.asarray(problem.fluency, np.float64)
        return super().score(problem)


class DrawIdealStreamRandom(MetaGrad):
    """The exact ideal on the draws, noise on the stream: the draws' questions are answered, and
    on the stream it knows nothing (the stream's metagradient, the costly part, is not computed)."""

    name = "draw_ideal_stream_random"

    def score(self, problem):
        if problem.kind == "draw":
            return super().score(problem)
        return np.random.default_rng(problem.seed).standard_normal(problem.n_units)


PROBES = {
    cls.name: cls.__name__ for cls in (SignedNorm, StreamIdealDrawFluency, DrawIdealStreamRandom)
}
