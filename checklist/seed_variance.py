"""Checklist item 6a — seed variance (reference finding P6).

Rule (≥ 3 training seeds; the default scale has 5), for each per-seed item — magnitude control,
fluency control, headroom — in the view judged (issue 48: the causal view spreads the causal forms,
the reference view the planted-label forms), whose per-seed figures carry a ``margin`` (> 0 clears
the item's bar: in the reference view the headline figure − the bar, in the causal view the share
of the room above the bar that the method takes, less headroom's SHARE for headroom: see each item)
and a ``chance_margin`` (figure − its chance level):

1. the item's per-seed verdict holds on every seed;
2. the spread is judged, not only the verdicts: the 95% Student-t CI of the across-seed mean margin
   lies above 0 (the bar is cleared on average with the seed-to-seed spread taken into account, not
   by a lucky mean), and
3. no seed sits at or below chance (chance_margin > 0 on every seed).

A seed whose evidence is unusable for an item (invalid-setup) stays invalid-setup: the item's spread
is not judged and the verdict is invalid-setup, never fail; so does a seed that holds but has no
margin (NaN: no room above its control, or no ceiling to measure the room against). Reported: each
item's margin per seed, its mean and CI, min, max and SD, and the flips (seeds whose verdict
differs from the majority) — within-run intervals understate the uncertainty: after fluency
residualization GAS gave 0.486/0.624/0.629 across seeds in the reference, and verdicts flipped.
"""

from __future__ import annotations

from collections import Counter

from bt_core.attribution.evidence import EstimatorFailure, Evidence
from bt_core.attribution.registry import EstimatorSpec
from bt_core.metrics import t_mean_ci
from bt_core.reporting.scorecard import Status, Verdict, worst_status

from . import fluency_control, headroom, magnitude_control
from ._base import CAUSAL, REFERENCE, Item, failure_verdict, fmt, spec_record, spread
from ._common import in_view, judged, seed_results, spread_margin, spread_short

NAME = "seed_variance"
TITLE = "verdicts hold on every seed, and the across-seed mean clears each bar with its spread"
MIN_SEEDS = 3
ALPHA = 0.05  # two-sided Student-t CI of the across-seed mean margin
ITEMS = (magnitude_control, fluency_control, headroom)  # the per-seed items whose spread is judged


def units(unit: str, which: list) -> str:
    """`which` named by their kind, so that a draw is never read as a seed: "seeds [0, 2]",
    "draw 1"."""
    return f"{unit} {which[0]}" if len(which) == 1 else f"{unit}s {which}"


def judge_spread(statuses: dict, margins: dict, chance_margins: dict, unit: str = "seed") -> dict:
    """One item's spread across units (`unit`: seeds or draws): figures plus `status` and
    `problems` (why not), each naming its units by kind."""
    invalid = [u for u, st in statuses.items() if st == Status.INVALID_SETUP]
    lo, hi = t_mean_ci(list(margins.values()), ALPHA)
    counts = Counter(statuses.values())
    majority = counts.most_common(1)[0][0] if counts else None
    out = {
        "status": dict(statuses),
        "margin": dict(margins),
        "chance_margin": dict(chance_margins),
        "margin_spread": spread(list(margins.values())),
        "mean_margin_ci": [lo, hi],
        "flips": [u for u, st in statuses.items() if st != majority],
    }
    if invalid:
        return {
            **out,
            "judged": Status.INVALID_SETUP,
            "problems": [f"unusable on {units(unit, invalid)}"],
        }
    problems = []
    bad = [u for u, st in statuses.items() if st != Status.PASS]
    nan = [u for u, m in margins.items() if not m == m]
    if nan and not bad:
        # every verdict holds but a unit has no margin (no room above its control, or no ceiling):
        # the spread cannot be judged — invalid-setup, never a failure of the method
        return {
            **out,
            "judged": Status.INVALID_SETUP,
            "problems": [
                f"no margin on {units(unit, nan)} (no room above the control or no ceiling)"
            ],
        }
    if bad:
        problems.append(f"verdict does not hold on {units(unit, bad)}")
    if not lo > 0:
        problems.append(f"mean margin CI [{fmt(lo)}, {fmt(hi)}] not above 0")
    low = [u for u, c in chance_margins.items() if not c > 0]
    if low:
        problems.append(f"at or below chance on {units(unit, low)}")
    return {**out, "judged": Status.FAIL if problems else Status.PASS, "problems": problems}


def evaluate(spec: EstimatorSpec, evidence: Evidence, view: str = CAUSAL) -> Verdict:
    return judged(NAME, spec, evidence, lambda: _evaluate(spec, evidence, view))


def _evaluate(spec: EstimatorSpec, evidence: Evidence, view: str) -> Verdict:
    rec = spec_record(spec, evidence)
    if len(evidence.seeds) < MIN_SEEDS:
        return Verdict(
            NAME,
            spec.name,
            Status.INVALID_SETUP,
            f"{len(evidence.seeds)} seed(s) given; seed variance needs ≥ {MIN_SEEDS} (--seeds)",
            {},
            rec,
        )
    figures = {}
    try:
        for item in (i for i in ITEMS if view in i.ITEM.views):
            res = {
                s: in_view(r, view)
                for s, r in seed_results(item.NAME, item.evaluate_seed, spec, evidence).items()
            }
            figures[item.NAME] = judge_spread(
                {s: r["status"] for s, r in res.items()},
                {s: r.get("margin", float("nan")) for s, r in res.items()},
                {s: r.get("chance_margin", float("nan")) for s, r in res.items()},
            )
    except EstimatorFailure as e:
        return failure_verdict(NAME, spec, evidence, e)
    figures["seeds"] = evidence.seeds
    lines = [
        f"{n}: "
        + (
            "; ".join(f["problems"])
            or f"mean margin CI [{fmt(f['mean_margin_ci'][0])}, {fmt(f['mean_margin_ci'][1])}]"
        )
        for n, f in figures.items()
        if n != "seeds"
    ]
    judgements = {f["judged"] for n, f in figures.items() if n != "seeds"}
    spreads = {n: f for n, f in figures.items() if n != "seeds"}
    shown = (
        spread_short(spreads, str),
        spread_margin(spreads, "per-seed margin of the item (its own units)"),
    )
    status = worst_status(judgements)
    if status is Status.INVALID_SETUP:
        return Verdict(
            NAME, spec.name, Status.INVALID_SETUP, "; ".join(lines), figures, rec, *shown
        )
    if status is Status.FAIL:
        return Verdict(NAME, spec.name, Status.FAIL, "; ".join(lines), figures, rec, *shown)
    return Verdict(
        NAME,
        spec.name,
        Status.PASS,
        f"every item holds on all {len(evidence.seeds)} seeds — " + "; ".join(lines),
        figures,
        rec,
        *shown,
    )


ITEM = Item(NAME, TITLE, "estimator", evaluate, reference="P6", views=(CAUSAL, REFERENCE))
