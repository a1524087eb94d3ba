"""Checklist item 5 — fluency control (reference pitfall P5).

Rule (the reference's pre-registered rollout-level pass rule), on every seed, on fresh sibling groups
sampled at the saturated checkpoint (draw 0): after residualizing the scores on fluency within groups
(pooled linear slope), the within-group AUC for behavior vs non-behavior siblings must have a
cluster-bootstrap 95% CI lower bound > 0.5, a CI width ≤ 0.15, and exceed the norm-only control's
residualized AUC. Reported beside it: fluency-matched pairs (|Δfluency| ≤ 0.10 nats; judged by nobody,
shown when ≥ 30 pairs) and a nonlinear control (residualizing on quantile bins of fluency).

Rationale: at a saturated checkpoint (most samples show the behavior) behavior replies are the model's
most fluent ones, so fluency alone predicts the label (reference AUC 0.72–0.80, at or above every
gradient method). Only signal that survives the fluency control is attribution. A checkpoint that is not
saturated (sampled behavior rate < 0.8) or has no mixed group cannot test this: invalid-setup.
"""

from __future__ import annotations

import numpy as np
from behaviortrace.checklist._base import CONTROL, Item, control_spec, fmt
from behaviortrace.checklist._common import seed_verdict

from bt_core.attribution.evidence import Evidence
from bt_core.attribution.registry import EstimatorSpec
from bt_core.metrics import group_bootstrap_ci, matched_pair_auc, residualize, residualize_bins, within_group_auc
from bt_core.reporting.scorecard import Verdict

NAME = "fluency_control"
TITLE = "survives the fluency control (residualized within-group AUC)"
HEADLINE = "auc"  # figure compared against a baseline scorecard (--scorecard-compare)
CI_LOWER = 0.5  # CI lower bound must exceed this
CI_MAX_WIDTH = 0.15  # and the CI must be at most this wide
SATURATION = 0.8  # sampled behavior rate that makes a checkpoint "saturated"
CALIPER = 0.10  # nats: fluency-matched pairs
MIN_MATCHED = 30  # matched-pair AUC is shown only when this many pairs exist
N_BOOT = 1000


def auc_with_ci(scores: np.ndarray, labels: np.ndarray, groups: np.ndarray, seed: int) -> dict:
    auc, pairs = within_group_auc(scores, labels, groups)
    lo, hi = group_bootstrap_ci(scores, labels, groups, n_boot=N_BOOT, seed=seed)
    return {"auc": auc, "ci_lo": lo, "ci_hi": hi, "pairs": pairs}


def evaluate_seed(spec: EstimatorSpec, evidence: Evidence, seed: int, draw: int = 0) -> dict:
    p = evidence.draw_problem(seed, draw)
    raw = evidence.scores(spec, p)
    ctrl = evidence.scores(control_spec(), p)
    est = auc_with_ci(residualize(raw, p.fluency, p.group), p.labels, p.group, seed)
    ctrl_auc, _ = within_group_auc(residualize(ctrl, p.fluency, p.group), p.labels, p.group)
    binned = auc_with_ci(residualize_bins(raw, p.fluency, p.group), p.labels, p.group, seed)
    m_auc, m_pairs = matched_pair_auc(raw, p.labels, p.group, p.fluency, CALIPER)
    probes = {q["step"]: q for q in evidence.artifacts[seed].run.probes}
    rate = probes[p.extra["analysis_step"]]["sampled_rate"]
    out = {**est, "control_auc": ctrl_auc, "raw_auc": within_group_auc(raw, p.labels, p.group)[0],
           "binned_auc": binned["auc"], "binned_ci": [binned["ci_lo"], binned["ci_hi"]],
           "matched_auc": m_auc if m_pairs >= MIN_MATCHED else None, "matched_pairs": m_pairs,
           "analysis_step": p.extra["analysis_step"], "sampled_rate": rate,
           "behavior_rate": float(p.labels.mean()), "draw": draw}
    head = f"AUC {fmt(est['auc'])} [{fmt(est['ci_lo'])}, {fmt(est['ci_hi'])}] vs {CONTROL} {fmt(ctrl_auc)}"
    if rate < SATURATION:
        return {**out, "status": "invalid-setup",
                "why": f"checkpoint {p.extra['analysis_step']} is not saturated "
                       f"(sampled rate {fmt(rate)} < {SATURATION})"}
    if est["pairs"] == 0:
        return {**out, "status": "invalid-setup",
                "why": "no sibling group holds both behavior and non-behavior replies"}
    why = []
    if not est["ci_lo"] > CI_LOWER:
        why.append(f"CI lower ≤ {CI_LOWER}")
    if not est["ci_hi"] - est["ci_lo"] <= CI_MAX_WIDTH:
        why.append(f"CI width {fmt(est['ci_hi'] - est['ci_lo'])} > {CI_MAX_WIDTH}")
    if not est["auc"] > ctrl_auc:
        why.append(f"not above {CONTROL}")
    return {**out, "status": "fail" if why else "pass", "why": head + (" — " + ", ".join(why) if why else "")}


def evaluate(spec: EstimatorSpec, evidence: Evidence) -> Verdict:
    return seed_verdict(NAME, evaluate_seed, spec, evidence, headline=HEADLINE, uses_control=True,
                        extra={"ci_lower": CI_LOWER, "ci_max_width": CI_MAX_WIDTH, "saturation": SATURATION})


ITEM = Item(NAME, TITLE, "estimator", evaluate, reference="P5", headline=HEADLINE)
