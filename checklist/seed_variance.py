"""Checklist item 6a — seed variance (reference finding P6).

Rule: the per-seed verdicts of the other estimator items (magnitude control, fluency control, headroom)
must hold on every training seed (≥ 3 seeds needed to judge; the default scale has 5). Reported: each
item's key figure per seed with its spread (min, max, SD) and the flips — seeds where an item's verdict
differs from the majority — because within-run intervals understate the uncertainty: after fluency
residualization GAS gave 0.486/0.624/0.629 across seeds in the reference, and verdicts flipped.
"""

from __future__ import annotations

from behaviortrace.checklist import fluency_control, headroom, magnitude_control
from behaviortrace.checklist._base import Item, failure_verdict, fmt, spec_record, spread
from behaviortrace.checklist._common import seed_results
from behaviortrace.checklist.setup import attach_caveats, gate

from bt_core.attribution.evidence import EstimatorFailure, Evidence
from bt_core.attribution.registry import EstimatorSpec
from bt_core.reporting.scorecard import Verdict

NAME = "seed_variance"
TITLE = "verdicts hold on every seed"
MIN_SEEDS = 3
KEY_FIGURE = {"magnitude_control": "lift", "fluency_control": "auc", "headroom": "precision"}


ITEMS = (magnitude_control, fluency_control, headroom)  # the per-seed items whose verdicts must hold


def evaluate(spec: EstimatorSpec, evidence: Evidence) -> Verdict:
    return attach_caveats(_evaluate(spec, evidence), spec, evidence)


def _evaluate(spec: EstimatorSpec, evidence: Evidence) -> Verdict:
    gated = gate(NAME, spec, evidence)
    if gated:
        return gated
    rec = spec_record(spec, evidence)
    if len(evidence.seeds) < MIN_SEEDS:
        return Verdict(NAME, spec.name, "invalid-setup",
                       f"{len(evidence.seeds)} seed(s) given; seed variance needs ≥ {MIN_SEEDS} (--seeds)", {}, rec)
    figures, problems = {}, []
    try:
        for item in ITEMS:
            res = seed_results(item.NAME, item.evaluate_seed, spec, evidence)
            statuses = {s: r["status"] for s, r in res.items()}
            key = KEY_FIGURE[item.NAME]
            figures[item.NAME] = {"status": statuses, key: {s: r.get(key) for s, r in res.items()},
                                  "spread": spread([r.get(key, float("nan")) for r in res.values()])}
            bad = [s for s, st in statuses.items() if st != "pass"]
            if bad:
                problems.append(f"{item.NAME} does not hold on seed(s) {bad} "
                                f"({key} range {fmt(figures[item.NAME]['spread']['min'])}–"
                                f"{fmt(figures[item.NAME]['spread']['max'])})")
    except EstimatorFailure as e:
        return failure_verdict(NAME, spec, evidence, e)
    figures["seeds"] = evidence.seeds
    if problems:
        return Verdict(NAME, spec.name, "fail", "; ".join(problems), figures, rec)
    return Verdict(NAME, spec.name, "pass", f"every item holds on all {len(evidence.seeds)} seeds", figures, rec)


ITEM = Item(NAME, TITLE, "estimator", evaluate, reference="P6")
