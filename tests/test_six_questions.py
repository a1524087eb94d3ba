"""Issue 61: each causal item asks its own question of the same measurement. On synthetic figures
(no build), `counterfactual` and `magnitude_control` decide on different comparisons, so each can
pass where the other fails, and each verdict names its own comparison."""

import numpy as np
import pytest
from behaviortrace.checklist import counterfactual as cf
from behaviortrace.checklist import magnitude_control as mc
from behaviortrace.checklist._base import CAUSAL

B = cf.N_BOOT


def _boot(center: float, spread: float, seed: int) -> np.ndarray:
    return center + spread * np.random.default_rng(seed).standard_normal(B)


@pytest.fixture
def measured(monkeypatch):
    """Install one seed's measurement: the estimator's LDS resamples and the baselines'."""

    def install(est: np.ndarray, baselines: dict[str, np.ndarray]):
        lds = {n: float(np.median(b)) for n, b in baselines.items()}
        base = {
            "lds": lds,
            "ci": {n: [float(b.min()), float(b.max())] for n, b in baselines.items()},
            "boot": np.stack([baselines[n] for n in cf.BASELINES]),
            "ceiling": 1.0,
            "ceiling_ci": [1.0, 1.0],
            "ceiling_boot": np.ones(B),
        }
        e = {
            "lds": float(np.median(est)),
            "boot": est,
            "level": "native",
            "n_subsets": 24,
            "scores": np.zeros(3),
        }
        monkeypatch.setattr(cf, "unjudged", lambda ev, seed: None)
        monkeypatch.setattr(cf, "estimator_lds", lambda spec, ev, seed: e)
        monkeypatch.setattr(cf, "baseline_figures", lambda ev, seed, prefix=cf.JUDGED: base)
        monkeypatch.setattr(cf, "linearity", lambda ev, seed: None)
        monkeypatch.setattr(cf, "subsets", lambda ev, seed, prefix=cf.JUDGED: None)

    return install


def test_a_ranking_tied_with_a_control_carries_signal_and_does_not_beat_it(measured):
    """The signed update size judged as a method: a clear LDS (counterfactual passes), exactly its
    own control's resamples (magnitude_control fails, naming that control)."""
    est = _boot(0.5, 0.05, 1)
    others = {n: _boot(0.1, 0.05, i) for i, n in enumerate(cf.BASELINES)}
    measured(est, {**others, "signed_norm": est.copy()})
    c = cf.evaluate_seed(None, None, 0)
    m = mc._causal_view(None, None, 0)
    assert c["status"] == "pass" and list(c["versus"]) == [cf.CHANCE]
    assert m["status"] == "fail" and m["diff_ci"]["signed_norm"] == [0.0, 0.0]
    assert set(m["versus"]) == set(cf.BASELINES) and "signed_norm" in m["short"]


def test_beating_every_control_does_not_need_causal_signal(measured):
    """Where every control's LDS is negative, a ranking clear of them all (magnitude_control
    passes) may still have an LDS whose CI holds 0 (counterfactual fails, on its own reason)."""
    est = _boot(-0.05, 0.04, 2)
    measured(est, {n: _boot(-0.6, 0.04, 10 + i) for i, n in enumerate(cf.BASELINES)})
    c = cf.evaluate_seed(None, None, 0)
    m = mc._causal_view(None, None, 0)
    assert m["status"] == "pass", m["why"]
    assert c["status"] == "fail" and "does not lie above 0" in c["short"]
    assert "no causal signal" in c["why"]


def test_the_paired_comparison_is_magnitude_controls_alone(measured):
    """counterfactual's verdict depends on its CI alone: moving every control above the estimator
    changes magnitude_control's verdict and not counterfactual's."""
    est = _boot(0.4, 0.05, 3)
    measured(est, {n: _boot(0.0, 0.05, 20 + i) for i, n in enumerate(cf.BASELINES)})
    below = cf.evaluate_seed(None, None, 0)["status"], mc._causal_view(None, None, 0)["status"]
    measured(est, {n: _boot(0.9, 0.05, 30 + i) for i, n in enumerate(cf.BASELINES)})
    above = cf.evaluate_seed(None, None, 0)["status"], mc._causal_view(None, None, 0)["status"]
    assert below == ("pass", "pass") and above == ("pass", "fail")


def test_the_item_questions_are_named_in_their_titles():
    """Each title says its own question: counterfactual's the causal signal, magnitude_control's
    the controls (the grid's header and the page read them)."""
    assert "causal signal" in cf.TITLE and "control" not in cf.TITLE
    assert "target-free control" in mc.TITLE
    assert CAUSAL in mc.ITEM.views
