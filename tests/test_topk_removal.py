"""The top-k removal item (checklist/topk_removal.py): its rule on synthetic figures, its tie rule,
the cache key of its judging-time replays, and what it says of the oracle, random and a sign-flipped
method on the smoke artifacts (those tests are marked `train` by conftest)."""

from __future__ import annotations

import numpy as np
import pytest
from behaviortrace.checklist import ESTIMATOR_ITEMS, counterfactual
from behaviortrace.checklist import topk_removal as tk

RANDOM = np.array([0.01, -0.02, 0.03, 0.0])  # mean 0.005, SD ≈ 0.021: bar ≈ 0.07
CONTROLS = {"advantage": 2.0, "signed_norm": 1.5, "norm_only": 0.5, "surface": 1.9}


def test_item_is_measured_not_registered():
    """Not a gate: at default no method (the causal ideal included) passes it on every seed
    (checklist/topk_removal.py, "Not adopted")."""
    assert tk.NAME not in [i.name for i in ESTIMATOR_ITEMS]
    assert counterfactual.ITEM in ESTIMATOR_ITEMS


@pytest.mark.parametrize(
    ("d_top", "status"),
    [
        (2.5, "pass"),  # beyond the random removals and every control
        (2.0, "fail"),  # ties the advantage control: equal is not greater
        (1.95, "fail"),  # below advantage, above the others
        (0.06, "fail"),  # above every random draw but under mean + 3 SD, below the controls
        (-0.1, "fail"),
    ],
)
def test_rule_on_synthetic_figures(d_top, status):
    r = tk.judge(d_top, RANDOM, CONTROLS)
    assert r["status"] == status
    assert r["bar"] == pytest.approx(RANDOM.mean() + 3 * RANDOM.std(ddof=1))
    assert r["margin"] == pytest.approx(
        min(d_top - r["bar"], d_top - RANDOM.max(), *(d_top - v for v in CONTROLS.values()))
    )


def test_rule_needs_both_random_conditions():
    """Above mean + 3 SD but not above every draw fails (a noisy SD), and the reverse fails too."""
    spread = np.array([0.0, 0.0, 0.0, 1.0])  # mean 0.25, SD 0.5: bar 1.75 > max 1.0
    # above the max, below the bar
    assert not tk.judge(1.5, spread, {"advantage": 0.0})["beats_random"]
    assert tk.judge(1.8, spread, {"advantage": 0.0})["status"] == "pass"


def test_top_k_ranks_only_the_window_and_breaks_ties_by_a_fixed_random_priority():
    n = 40
    window = np.zeros(n, bool)
    window[5:35] = True
    scores = np.zeros(n)
    scores[:5] = 100.0  # outside the window: never chosen
    scores[30] = np.nan  # non-finite: ranked last
    scores[20] = 5.0
    top = tk.top_k(scores, window, 4, seed=3)
    assert 20 in top and not np.isin(top, np.arange(5)).any() and 30 not in top
    assert np.array_equal(top, tk.top_k(scores, window, 4, seed=3))  # deterministic
    ties = tk.top_k(np.zeros(n), window, 10, seed=3)  # all tied: the priority decides, not the row
    assert not np.array_equal(ties, np.arange(5, 15))
    assert not np.array_equal(ties, tk.top_k(np.zeros(n), window, 10, seed=4))
    assert np.array_equal(ties, np.sort(ties)) and ties.dtype == np.int64


def test_replay_cache_key_depends_on_the_removed_set(smoke_artifacts):
    """A new set builds its own replay; the same set (in any order) reuses it; the GT set is the
    plan's leave-GT-out replay itself."""
    from bt_core.pipeline import build_removal_replay

    a = smoke_artifacts[0]
    r = a.replays
    window = np.flatnonzero(r.window)
    one, two = window[:3], window[3:6]
    p1 = build_removal_replay(r, a.run, one).path
    p2 = build_removal_replay(r, a.run, two).path
    assert p1 != p2 and p1.parent == p2.parent == r["gt_out"].path.parent
    assert build_removal_replay(r, a.run, one[::-1]).path == p1
    assert build_removal_replay(r, a.run, r["gt_out"].removed).path == r["gt_out"].path
    assert np.array_equal(build_removal_replay(r, a.run, two).removed, two)


def _flipped(name: str):
    from bt_core.attribution.catalog import get
    from bt_core.attribution.registry import EstimatorSpec

    base = get(name)

    class Flipped:
        def __init__(self):
            self.inner = base.create()

        def score(self, problem):
            return -np.asarray(self.inner.score(problem))

    return EstimatorSpec(f"{name}_flipped", Flipped, base.levels, "test", "", base.needs)


def test_oracle_top_k_is_gt_and_random_and_a_flipped_method_fail(smoke_evidence_in_process):
    """k is the local subsets' size (below |GT|): the oracle's top-k is k GT rollouts of the pool,
    chosen by the tie-break; its random reference is the plan's local removals. random and
    sign-flipped tracincp fail every seed; a control never beats its own removal (equal Δ)."""
    from bt_core.attribution.catalog import get
    from bt_core.counterfactual.plan import local_pool

    ev = smoke_evidence_in_process
    for s in ev.seeds:
        a = ev.artifacts[s]
        r = a.replays
        o = tk.evaluate_seed(get("oracle"), ev, s)
        pool = local_pool(a.run.rollouts, r.window)
        assert o["k"] == r["local_0"].removed.size < r["gt_out"].removed.size
        assert o["gt_in_top"] == o["k"] and len(o["delta_random"]) == len(r.names("local"))
        assert pool[tk.top_k(np.asarray(a.run.rollouts.gt, float), pool, o["k"], s)].all()
        for spec in (get("random"), _flipped("tracincp")):
            f = tk.evaluate_seed(spec, ev, s)
            assert f["status"] == "fail", (spec.name, s, f["why"])
    assert tk.evaluate(get("random"), ev).status == "fail"
    norm = tk.evaluate(get("norm_only"), ev)
    assert norm.status == "fail"
    assert all(f["versus"]["norm_only"]["value"] == 0.0 for f in norm.figures["per_seed"].values())
