"""headroom's causal view (checklist/headroom.py, issue 48): the room between the floor (the
strongest target-free control's LDS, or chance) and the ideal's LDS, on synthetic figures. What it
says of the built-ins and the adversaries at smoke is in tests/test_meta.py."""

from __future__ import annotations

import pytest
from behaviortrace.checklist import headroom
from hypothesis import given
from hypothesis import strategies as st

CONTROLS = {"advantage": 0.30, "signed_norm": 0.45, "norm_only": -0.10, "surface": 0.20}


def test_the_floor_is_the_strongest_control_or_chance():
    r = headroom.room_figures(CONTROLS, 0.95, 0.3)
    assert r["floor"] == 0.45 and r["floor_is"] == "signed_norm" and r["valid"]
    assert r["room"] == pytest.approx(0.5)
    below = headroom.room_figures({"advantage": -0.2, "surface": -0.4}, 0.9, 0.5)
    assert below["floor"] == 0.0 and below["floor_is"] == "chance (LDS 0)"
    assert below["room"] == pytest.approx(0.9)


@pytest.mark.parametrize(
    ("ceiling", "ci_lo"),
    [(0.45, 0.1), (0.30, 0.1), (float("nan"), 0.1), (0.95, 0.0), (0.95, -0.2)],
    ids=["ideal-ties-the-floor", "ideal-below-it", "no-ideal", "ci-touches-0", "ci-holds-0"],
)
def test_no_room_where_the_ideal_does_not_stand_out(ceiling, ci_lo):
    """Where the ideal does not beat the floor beyond the subsets' resampling, the seed is not
    judged (invalid-setup), as the reference form's P2."""
    assert not headroom.room_figures(CONTROLS, ceiling, ci_lo)["valid"]


@pytest.mark.parametrize(
    ("lds", "ok"),
    [
        (1.0, True),  # the ideal's own LDS: all the room
        (0.76, True),  # more than half the room above the floor (0.5 + 0.25)
        (0.75, False),  # exactly half (a float-exact case) is not more than half
        (0.6, False),  # beats every control, a fifth of the room
        (0.5, False),  # the strongest control's own LDS
        (-0.2, False),
    ],
)
def test_the_bar_is_more_than_half_the_room_above_the_floor(lds, ok):
    room = headroom.room_figures({**CONTROLS, "signed_norm": 0.5}, 1.0, 0.3)
    share, passed = headroom.room_share(lds, room)
    assert passed is ok and share == pytest.approx((lds - 0.5) / 0.5)


def test_a_control_with_no_lds_never_sets_the_floor():
    """A NaN control (a constant prediction) is skipped, not taken as the strongest; with no
    control measured there is no floor and no room."""
    r = headroom.room_figures({"advantage": float("nan"), "signed_norm": 0.45}, 0.95, 0.3)
    assert r["floor"] == 0.45 and r["strongest_control"] == "signed_norm"
    assert not headroom.room_figures({"advantage": float("nan")}, 0.95, 0.3)["valid"]


lds = st.floats(-1, 1, allow_nan=False)


@given(st.dictionaries(st.sampled_from(sorted(CONTROLS)), lds, min_size=1), lds, lds)
def test_the_ideal_passes_where_there_is_room_and_no_control_ever_does(ctrl, ceiling, lo):
    room = headroom.room_figures(ctrl, ceiling, lo)
    if not room["valid"]:
        return
    assert headroom.room_share(ceiling, room)[1]  # the ideal's LDS: share 1
    for v in ctrl.values():  # a control's own LDS is at or below the floor: share ≤ 0
        assert not headroom.room_share(v, room)[1]


NAN = float("nan")
ROOM = headroom.room_figures(CONTROLS, 0.95, 0.3)
NO_ROOM = {**headroom.room_figures(CONTROLS, 0.40, -0.1), "why": "no room: …"}


@pytest.mark.parametrize(
    ("measured", "room", "status"),
    [
        ({"status": "invalid-setup", "why": "no subsets"}, ROOM, "invalid-setup"),
        ({"lds": 0.99}, NO_ROOM, "invalid-setup"),
        ({"lds": NAN}, ROOM, "fail"),
        ({"lds": 0.9}, ROOM, "pass"),
        ({"lds": 0.6}, ROOM, "fail"),
    ],
    ids=["no-subsets", "no-room", "no-lds", "most-of-the-room", "a-third-of-it"],
)
def test_a_causal_seed_is_judged_on_its_own_figures(monkeypatch, measured, room, status):
    """The causal seed's status follows the measured LDS (counterfactual's measurement, not its
    verdict) and the room, and it carries none of the reference view's comparisons (they stay in
    that view)."""
    from behaviortrace.checklist._base import CAUSAL, REFERENCE
    from behaviortrace.checklist._common import in_view

    reference = {
        "status": "pass",
        "why": "precision above the bar",
        "margin": 0.2,
        "chance_margin": 0.5,
        "versus": {"the bar (rollout)": {"value": 0.2, "ci": None}},
    }
    cf = headroom.counterfactual
    bad = measured if "status" in measured else None
    monkeypatch.setattr(headroom, "reference_seed", lambda spec, ev, seed: dict(reference))
    monkeypatch.setattr(cf, "unjudged", lambda ev, seed: bad)
    monkeypatch.setattr(cf, "estimator_lds", lambda spec, ev, seed: {**measured, "n_subsets": 24})
    monkeypatch.setattr(headroom, "causal_room", lambda ev, seed: room)
    r = headroom.evaluate_seed(None, None, 0)
    causal = in_view(r, CAUSAL)
    assert causal["status"] == status and causal["view"] == CAUSAL
    assert "the bar (rollout)" not in causal["versus"]
    assert in_view(r, REFERENCE)["versus"] == reference["versus"]
    if status == "pass":
        assert causal["margin"] == pytest.approx((0.9 - 0.45) / 0.5 - headroom.SHARE)
