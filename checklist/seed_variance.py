"""Checklist item 6a — seed variance (reference finding P6).

Rule: the per-seed verdicts of the other estimator items (magnitude control, fluency control, headroom)
must hold on every training seed (≥ 3 seeds needed to judge; the default scale has 5). Reported: each
item's key figure per seed with its spread (min, max, SD) and the flips — seeds where an item's verdict
differs from the majority — because within-run intervals understate the uncertainty: after fluency
residualization GAS gave 0.486/0.624/0.629 across seeds in the reference, and verdicts flipped.
"""

from __future__ import annotations

import numpy as np

from bt_core.evidence import EstimatorFailure, Evidence
from bt_core.registry import EstimatorSpec
from bt_core.scorecard import Verdict
from checklist._common import attach_caveats, fmt, gate, seed_results, spec_record

NAME = "seed_variance"
TITLE = "verdicts hold on every seed"
MIN_SEEDS = 3
KEY_FIGURE = {"magnitude_control": "lift", "fluency_control": "auc", "headroom": "precision"}


def _items():
    from checklist import fluency_control, headroom, magnitude_control

    return (magnitude_control, fluency_control, headroom)


def spread(values: list[float]) -> dict:
    v = np.array([x for x in values if x == x], float)
    if v.size == 0:
        return {"min": float("nan"), "max": float("nan"), "sd": float("nan")}
    return {"min": float(v.min()), "max": float(v.max()), "sd": float(v.std(ddof=1)) if v.size > 1 else 0.0}


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
        for item in _items():
            res = seed_results(item, spec, evidence)
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
        return Verdict(NAME, spec.name, "fail", f"estimator failure: {e}", {}, rec)
    figures["seeds"] = evidence.seeds
    if problems:
        return Verdict(NAME, spec.name, "fail", "; ".join(problems), figures, rec)
    return Verdict(NAME, spec.name, "pass", f"every item holds on all {len(evidence.seeds)} seeds", figures, rec)
