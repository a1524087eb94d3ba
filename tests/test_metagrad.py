"""The exact metagradient (`bt_core.counterfactual.metagrad`, estimator `metagrad`): it is the
derivative it claims to be (central finite differences through the replay engine), it reads no
labels, and its sign matters to the counterfactual item. Uses the session's smoke artifacts (marked
`train` by conftest)."""

from __future__ import annotations

import copy
import dataclasses

import numpy as np
import pytest
import torch
from helpers import scrambled_labels

N_CHECKED = 20  # rollouts checked against finite differences (the issue asks for ≥ 20)
EPS = 1e-5  # relative perturbation of one rollout's loss weight w_i = 1 ± EPS
MAX_REL_ERR = 1e-3


def _fd_rows(run, window: np.ndarray, n: int) -> np.ndarray:
    """`n` window rollouts with A ≠ 0, spread over every step of the window (fixed draw)."""
    adv, step = np.asarray(run.rollouts.advantage), np.asarray(run.rollouts.step)
    live = np.flatnonzero(window & (adv != 0))
    rng = np.random.default_rng(0)
    per_step = [rng.permutation(live[step[live] == s]) for s in np.unique(step[live])]
    picked = [rows[j] for j in range(max(map(len, per_step))) for rows in per_step if j < len(rows)]
    return np.sort(np.asarray(picked[:n]))


@pytest.mark.parametrize("states", ["replayed", "stored"])
def test_metagrad_matches_central_finite_differences_through_the_replay_engine(
    smoke_evidence, states
):
    """−score_i = ∂f/∂w_i equals (f(w_i = 1+ε) − f(w_i = 1−ε)) / 2ε, each f a float64 replay by
    `replay_model` (the engine the replays are built with), with A_i scaled by 1 ± ε (w_i and A_i
    enter the loss only as their product). The replay starts where metagrad's trajectory does: from
    step 0, as the suite's float64 replays do (`states="replayed"`, what `auto` picks at smoke), or
    from the stored checkpoint before the rollout's step (`states="stored"`)."""
    from bt_core.attribution.catalog import get
    from bt_core.counterfactual.replay import replay_model
    from bt_core.training.behavior import behavior_nll
    from bt_core.training.model import torch_threads

    ev = smoke_evidence
    a = ev.artifacts[0]
    run, measure = a.run, a.replays.measure
    problem = ev.stream_problem(0)
    scores = get("metagrad").create(states=states).score(problem.handout())
    adv = np.asarray(run.rollouts.advantage, np.float64)
    keep, steps = np.ones(adv.size, bool), np.asarray(run.rollouts.step)

    def f(i: int, sign: float) -> float:
        x = adv.copy()
        x[i] *= 1.0 + sign * EPS
        start = 0 if states == "replayed" else max(c for c in run.checkpoint_steps if c <= steps[i])
        with torch_threads(1):
            model = replay_model(run, keep, x, start, measure.step, dtype=torch.float64)
        return behavior_nll(model, measure.examples, run.codec.pad_id)

    rows = _fd_rows(run, np.asarray(a.replays.window), N_CHECKED)
    assert rows.size >= 20 and len(np.unique(steps[rows])) >= 8
    fd = np.array([(f(i, +1) - f(i, -1)) / (2 * EPS) for i in rows])
    mg = -scores[rows]
    rel = np.abs(mg - fd) / np.maximum(np.abs(fd), np.abs(mg))
    assert np.all(np.abs(fd) > 1e-8), fd  # a real derivative, not rounding noise, is compared
    print(
        f"metagrad vs central FD on {rows.size} rollouts: worst relative error {rel.max():.3g}, "
        f"median {np.median(rel):.3g}"
    )
    assert rel.max() <= MAX_REL_ERR, {
        int(i): (float(m), float(d)) for i, m, d in zip(rows, mg, fd, strict=True)
    }
    outside = ~np.asarray(a.replays.window)
    assert np.all(scores[outside] == 0.0) and np.all(scores[adv == 0] == 0.0)


def _perturbed_labels(a):
    """`a` with every label column of its rollouts table changed (GT flipped, rewards and behavior
    scrambled)."""
    t = a.run.rollouts
    rng = np.random.default_rng(1)
    run = copy.copy(a.run)
    run.rollouts = scrambled_labels(t, rng)
    return dataclasses.replace(a, run=run)


def test_metagrad_reads_no_labels(smoke_evidence):
    """Its scores are bitwise the same when every label field is perturbed: it never sees them."""
    from bt_core.attribution.catalog import get
    from bt_core.attribution.evidence import Evidence
    from bt_core.attribution.registry import LABEL_FIELDS

    spec = get("metagrad")
    assert not set(spec.needs) & set(LABEL_FIELDS) and not spec.reads_labels
    a = smoke_evidence.artifacts[0]
    ev = Evidence({0: _perturbed_labels(a)}, "smoke")
    assert not np.array_equal(
        ev.labels(ev.stream_problem(0)), smoke_evidence.labels(smoke_evidence.stream_problem(0))
    )
    np.testing.assert_array_equal(
        ev.scores(spec, ev.stream_problem(0)),
        smoke_evidence.scores(spec, smoke_evidence.stream_problem(0)),
    )


class _Flipped:
    def __init__(self, inner):
        self.inner = inner

    def score(self, problem):
        return -np.asarray(self.inner.score(problem))


def test_the_exact_ideal_passes_counterfactual_on_every_seed(smoke_evidence_in_process):
    """The item's calibration (issue 47): on the committed test keys, metagrad — the exact
    derivative of the judged response — passes on every smoke seed, and each seed reports where its
    response stops being first order (the ladder starts above the judged δ)."""
    from behaviortrace.checklist import counterfactual as cf

    from bt_core.attribution.catalog import get
    from bt_core.config import get_scale

    plan = get_scale("smoke").counterfactual
    ladder = plan.linearity_deltas
    v = cf.evaluate(get("metagrad"), smoke_evidence_in_process)
    assert v.figures.get("ungated_status", v.status) == "pass", v.reason
    for s, f in v.figures["per_seed"].items():
        assert f["status"] == "pass" and f["ci"][0] > 0, (s, f["why"])
        lin = f["linearity"]
        # the radius is a rung above the judged δ, or None where the first rung departs
        assert lin["radius"] is None or lin["radius"] > lin["judged_delta"]
        assert lin["n_subsets"] + lin["n_flat"] == plan.n_linearity  # every probed subset
        assert [r["delta"] for r in lin["rungs"]] == pytest.approx(sorted(ladder))
        assert f"δ = {lin['judged_delta']:g}" in f["why"]


def test_metagrad_with_its_sign_flipped_fails_counterfactual(smoke_evidence_in_process):
    from behaviortrace.checklist import counterfactual as cf

    from bt_core.attribution.catalog import get
    from bt_core.attribution.registry import EstimatorSpec

    base = get("metagrad")
    flipped = EstimatorSpec(
        "metagrad_flipped", lambda: _Flipped(base.create()), base.levels, "test", "", base.needs
    )
    v = cf.evaluate(flipped, smoke_evidence_in_process)
    assert v.figures.get("ungated_status", v.status) == "fail"
    for s in smoke_evidence_in_process.seeds:
        a, b = (
            cf.evaluate_seed(base, smoke_evidence_in_process, s),
            cf.evaluate_seed(flipped, smoke_evidence_in_process, s),
        )
        assert b["lds"] == pytest.approx(-a["lds"]) and b["status"] == "fail"


def test_metagrad_without_a_measure_fails_naming_it(smoke_evidence):
    """A problem without the behavior measure (built without replays) cannot be differentiated:
    metagrad says so, on the stream and on draws (tests/test_metagrad_draws.py scores draws)."""
    from bt_core.attribution.catalog import get

    for p in (smoke_evidence.stream_problem(0), smoke_evidence.draw_problem(0, 0)):
        bare = dataclasses.replace(p, measure=None)
        with pytest.raises(ValueError, match="measure"):
            get("metagrad").create().score(bare.handout())
