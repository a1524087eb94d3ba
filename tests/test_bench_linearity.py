"""`benchmarks/bench_linearity.py`: the probe of how far from first order the counterfactual
item's judged truth is."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[1]


def _tool():
    spec = importlib.util.spec_from_file_location(
        "bench_linearity", ROOT / "benchmarks/bench_linearity.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


finite = st.floats(0.01, 10.0)


@settings(max_examples=50, deadline=None)
@given(a=finite, b=finite, sign=st.sampled_from([-1.0, 1.0]), f0=st.floats(0.1, 5.0))
def test_a_quadratic_response_gives_back_its_slope_and_curvature(a, b, sign, f0):
    """f(w) = f0 + a(1 − w) + b(1 − w)²: the central difference is aδ, the second-order part bδ², so
    the ratio is bδ/a, and a prediction equal to the slope is 1 of the central difference."""
    tool = _tool()
    a *= sign
    for d in (1e-2, 1e-3):
        fig = tool.subset_figures(f0, f0 + a * d + b * d * d, f0 - a * d + b * d * d, d, a * d)
        assert math.isclose(fig["central"], a * d, rel_tol=1e-6)
        assert math.isclose(fig["second"], b * d * d, rel_tol=1e-4, abs_tol=1e-12)
        assert math.isclose(fig["ratio"], b * d / abs(a), rel_tol=1e-4)
        assert math.isclose(fig["pred_over_central"], 1.0, rel_tol=1e-6)


def test_the_radius_is_the_largest_delta_whose_every_subset_is_first_order():
    tool = _tool()
    rows = [
        {"delta": d, "ratio": r, "pred_over_central": 1.0}
        for d, rs in ((1e-2, (0.05, 0.4)), (1e-3, (0.01, 0.04)), (1e-4, (0.001, 0.002)))
        for r in rs
    ]
    per = tool.summarize(rows, (1e-2, 1e-3, 1e-4))
    assert [p["max_ratio"] for p in per] == [0.4, 0.04, 0.002]
    assert tool.radius(per) == 1e-3  # 1e-2 fails on one subset of two: not first order there
    assert tool.radius(per, bar=0.001) is None  # none of the ladder: said so, not the smallest


def test_bad_options_say_what_to_write(capsys):
    tool = _tool()
    for argv, msg in (
        (["--ladder", "1.5"], "must lie in (0, 1)"),
        (["--subsets", "0"], "at least one"),
    ):
        with pytest.raises(SystemExit):
            tool.main(argv)
        assert msg in capsys.readouterr().err


@pytest.mark.usefixtures("smoke_artifacts")
def test_metagrad_predicts_the_replays_where_the_probe_says_first_order(smoke_cache):
    """On the session's smoke cache (committed test key): at a δ the probe calls first order, the
    exact derivative matches the replayed central difference (they are two computations of the same
    slope: the replay engine's float64 replays and metagrad's reverse sweep)."""
    tool = _tool()
    rec = tool.probe_seed("smoke", 0, str(smoke_cache), (1e-2, 1e-4), 2)
    assert rec["n_subsets"] == 2 and rec["replays"] == 9 and len(rec["subsets"]) == 4
    fine = next(p for p in rec["per_delta"] if p["delta"] == 1e-4)
    assert rec["radius"] is not None and fine["max_ratio"] <= tool.RATIO_BAR
    assert 0.9 < fine["pred_over_central_min"] <= fine["pred_over_central_max"] < 1.1
    # metagrad's segments restarted from the stored float32 checkpoints: the same slope here
    one = tool.probe_seed("smoke", 0, str(smoke_cache), (1e-4,), 2, states="stored")
    assert one["states"] == "stored" and rec["states"] == "replayed"
    p = one["per_delta"][0]
    assert 0.9 < p["pred_over_central_min"] <= p["pred_over_central_max"] < 1.1


def test_the_radius_stops_at_the_first_rung_that_departs():
    """As the counterfactual item's radius: a first-order rung above one that departs does not
    count (the response is not first order all the way there)."""
    tool = _tool()
    per = [
        {"delta": 1e-2, "max_ratio": 0.05},
        {"delta": 1e-3, "max_ratio": 0.3},
        {"delta": 1e-4, "max_ratio": 0.01},
    ]
    assert tool.radius(per) == 1e-4
