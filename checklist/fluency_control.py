"""Checklist item 5 — fluency control.

Rule (the reference's pre-registered rollout-level pass rule), on every seed, on fresh sibling groups
sampled at the saturated checkpoint: after residualizing the scores on fluency within groups, the
within-group AUC for behavior vs non-behavior siblings must have a cluster-bootstrap 95% CI lower bound
> 0.5, a CI width ≤ 0.15, and beat the norm-only control's residualized AUC.

Rationale / pitfall P5: at a saturated checkpoint (most samples show the behavior) behavior replies are
the model's most fluent ones, so fluency alone predicts the label (reference AUC 0.72–0.80, at or above
every gradient method). Only signal that survives the fluency control is attribution.
"""

from __future__ import annotations

from bt_core.evidence import EstimatorFailure, Evidence
from bt_core.metrics import group_bootstrap_ci, residualize, within_group_auc
from bt_core.registry import EstimatorSpec
from bt_core.scorecard import Verdict
from checklist._common import CONTROL, control_spec, failure_verdict, fmt, spec_record

NAME = "fluency_control"
TITLE = "survives the fluency control (residualized within-group AUC)"
CI_LOWER = 0.5  # CI lower bound must exceed this
CI_MAX_WIDTH = 0.15  # and the CI must be at most this wide
N_BOOT = 1000


def _residual_auc(scores, p, seed: int) -> dict:
    r = residualize(scores, p.fluency, p.group)
    auc, pairs = within_group_auc(r, p.labels, p.group)
    lo, hi = group_bootstrap_ci(r, p.labels, p.group, n_boot=N_BOOT, seed=seed)
    return {"auc": auc, "ci_lo": lo, "ci_hi": hi, "pairs": pairs}


def evaluate(spec: EstimatorSpec, evidence: Evidence) -> Verdict:
    per_seed = {}
    try:
        for seed in evidence.seeds:
            p = evidence.draw_problem(seed, 0)
            est = _residual_auc(evidence.scores(spec, p), p, seed)
            ctrl = _residual_auc(evidence.scores(control_spec(), p), p, seed)
            per_seed[seed] = {**est, "control_auc": ctrl["auc"], "analysis_step": p.extra["analysis_step"],
                              "behavior_rate": float(p.labels.mean())}
    except EstimatorFailure as e:
        return failure_verdict(NAME, spec, evidence, e)
    figures = {"per_seed": per_seed, "ci_lower": CI_LOWER, "ci_max_width": CI_MAX_WIDTH}
    rec = spec_record(spec, evidence)
    unpowered = [s for s, f in per_seed.items() if f["pairs"] == 0]
    if unpowered:
        return Verdict(NAME, spec.name, "invalid-setup",
                       f"no sibling group holds both behavior and non-behavior replies on seed(s) {unpowered}: "
                       "the within-group AUC is undefined", figures, rec)
    problems = []
    for s, f in per_seed.items():
        why = []
        if not f["ci_lo"] > CI_LOWER:
            why.append(f"CI lower {fmt(f['ci_lo'])} ≤ {CI_LOWER}")
        if not f["ci_hi"] - f["ci_lo"] <= CI_MAX_WIDTH:
            why.append(f"CI width {fmt(f['ci_hi'] - f['ci_lo'])} > {CI_MAX_WIDTH}")
        if not f["auc"] > f["control_auc"]:
            why.append(f"AUC {fmt(f['auc'])} ≤ {CONTROL} {fmt(f['control_auc'])}")
        if why:
            problems.append(f"seed {s}: " + ", ".join(why))
    summary = "; ".join(f"seed {s}: AUC {fmt(f['auc'])} [{fmt(f['ci_lo'])}, {fmt(f['ci_hi'])}] vs {CONTROL} "
                        f"{fmt(f['control_auc'])}" for s, f in per_seed.items())
    if spec.name == CONTROL:
        return Verdict(NAME, spec.name, "fail", f"this is the control itself ({summary})", figures, rec)
    if problems:
        return Verdict(NAME, spec.name, "fail", "fluency-residualized AUC fails the pass rule — "
                       + "; ".join(problems), figures, rec)
    return Verdict(NAME, spec.name, "pass", f"passes the rule on every seed ({summary})", figures, rec)
