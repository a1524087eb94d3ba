"""Checklist item 6b — generation-draw variance (reference finding P6).

Rule: the fluency-control verdict must hold on every seeded generation draw at the analysis checkpoint,
on every seed (≥ 2 draws needed to judge; the default scale has 5). Reported: the residualized AUC per
draw and its spread per seed — the reference saw 0.486, 0.446, 0.624, 0.526, 0.629 across five draws of
one seed, and the verdict flipped.
"""

from __future__ import annotations

from behaviortrace.checklist import fluency_control
from behaviortrace.checklist._base import Item, failure_verdict, fmt, spec_record, spread
from behaviortrace.checklist._common import seed_results
from behaviortrace.checklist.setup import attach_caveats, gate

from bt_core.attribution.evidence import EstimatorFailure, Evidence
from bt_core.attribution.registry import EstimatorSpec
from bt_core.reporting.scorecard import Verdict

NAME = "draw_variance"
TITLE = "fluency-control verdict holds on every generation draw"
MIN_DRAWS = 2


def evaluate(spec: EstimatorSpec, evidence: Evidence) -> Verdict:
    return attach_caveats(_evaluate(spec, evidence), spec, evidence)


def _evaluate(spec: EstimatorSpec, evidence: Evidence) -> Verdict:
    gated = gate(NAME, spec, evidence)
    if gated:
        return gated
    rec = spec_record(spec, evidence)
    n_draws = min(len(a.draws) for a in evidence.artifacts.values())
    if n_draws < MIN_DRAWS:
        return Verdict(NAME, spec.name, "invalid-setup", f"{n_draws} draw(s) per seed; needs ≥ {MIN_DRAWS}", {}, rec)
    per_seed, problems, invalid = {}, [], []
    try:
        for d in range(n_draws):
            per_draw = seed_results(fluency_control.NAME, fluency_control.evaluate_seed, spec, evidence, draw=d)
            for s, r in per_draw.items():
                per_seed.setdefault(s, {"auc": {}, "status": {}})
                per_seed[s]["auc"][d] = r["auc"]
                per_seed[s]["status"][d] = r["status"]
    except EstimatorFailure as e:
        return failure_verdict(NAME, spec, evidence, e)
    for s, f in per_seed.items():
        f["spread"] = spread(list(f["auc"].values()))
        bad = [d for d, st in f["status"].items() if st == "fail"]
        invalid += [(s, d) for d, st in f["status"].items() if st == "invalid-setup"]
        if bad:
            rng = f"{fmt(f['spread']['min'])}–{fmt(f['spread']['max'])}"
            problems.append(f"seed {s}: fails on draw(s) {bad} (AUC {rng})")
    all_auc = [a for f in per_seed.values() for a in f["auc"].values() if a == a]
    figures = {"per_seed": per_seed, "n_draws": n_draws,
               "headline": {"figure": "min AUC over seeds and draws", "value": min(all_auc) if all_auc else None}}
    if invalid:
        return Verdict(NAME, spec.name, "invalid-setup", f"unusable draws (seed, draw): {invalid}", figures, rec)
    if problems:
        return Verdict(NAME, spec.name, "fail", "; ".join(problems), figures, rec)
    return Verdict(NAME, spec.name, "pass", f"holds on all {n_draws} draws of every seed — " + "; ".join(
        f"seed {s}: AUC {fmt(f['spread']['min'])}–{fmt(f['spread']['max'])}" for s, f in per_seed.items()),
        figures, rec)


ITEM = Item(NAME, TITLE, "estimator", evaluate, reference="P6")
