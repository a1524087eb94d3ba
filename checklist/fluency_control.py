"""Checklist item 5 — fluency control (reference pitfall P5).

Rule (the reference's pre-registered rollout-level pass rule), on every seed, on fresh sibling groups
sampled at the saturated checkpoint (draw 0): after residualizing the scores on fluency within groups
(pooled linear slope), the within-group AUC for behavior vs non-behavior siblings must have a
cluster-bootstrap 95% CI lower bound > 0.5, a CI width ≤ 0.15, and exceed the norm-only control's
residualized AUC (on draws every sibling has weight 1, so norm-only is the only target-free control that is
not constant: `controls.DRAW_CONTROL`). And, before any residualization, the estimator's within-group AUC
must beat fluency's own — the strongest fluency-only score, since every monotone function of fluency has
the same within-group AUC (the better of fluency and its negation is used) — by the paired rule: the 95%
CI of AUC(estimator) − AUC(fluency), groups resampled together, lies above 0.

Why both. The linear residualization removes only the part of a score that is linear in fluency: a rank
(or any nonlinear) transform of fluency survives it and can clear the residualized bar while knowing
nothing but fluency. Beating fluency's own AUC closes that door without assuming a functional form; the
residualized bar keeps the reference's pre-registered rule.

Reported beside it: fluency-matched pairs (|Δfluency| ≤ 0.10 nats;
judged by nobody, shown when ≥ 30 pairs), a nonlinear control (residualizing on quantile bins of
fluency) and the surface baseline's residualized AUC — on draws it is the behavior flag, the label
itself, so nothing beats it (see `controls`: this item measures agreement with a text-visible label).

Rationale: at a saturated checkpoint (most samples show the behavior) behavior replies are the model's
most fluent ones, so fluency alone predicts the label (reference AUC 0.72–0.80, at or above every
gradient method). Only signal that survives the fluency control is attribution. A checkpoint that is not
saturated (sampled behavior rate < 0.8) or has no mixed group cannot test this: invalid-setup. The
mixed-group check reads only the labels and runs before the estimator is asked, so a draw where every
sibling shows the behavior is invalid for every estimator alike (a constant score is then no defect).
"""

from __future__ import annotations

import numpy as np

from bt_core.attribution.evidence import Evidence
from bt_core.attribution.registry import EstimatorSpec
from bt_core.config import SATURATION  # sampled behavior rate that makes a checkpoint "saturated"
from bt_core.metrics import (
    group_bootstrap_ci,
    matched_pair_auc,
    paired_group_auc_diff,
    residualize,
    residualize_bins,
    within_group_auc,
)
from bt_core.reporting.scorecard import Status, Verdict

from . import controls
from ._base import Item, fmt
from ._common import seed_verdict

NAME = "fluency_control"
TITLE = "survives the fluency control (residualized within-group AUC) and beats fluency's own AUC"
HEADLINE = "auc"  # figure compared against a baseline scorecard (--scorecard-compare)
CI_LOWER = 0.5  # CI lower bound must exceed this
CI_MAX_WIDTH = 0.15  # and the CI must be at most this wide
CALIPER = 0.10  # nats: fluency-matched pairs
MIN_MATCHED = 30  # matched-pair AUC is shown only when this many pairs exist
N_BOOT = 10_000  # cluster-bootstrap resamples of the AUC (groups resampled; vectorized)
CONTROL = controls.DRAW_CONTROL
MARGIN = "Δ within-group AUC (residualized; raw vs fluency itself) over the comparison"


def auc_with_ci(scores: np.ndarray, labels: np.ndarray, groups: np.ndarray, seed: int) -> dict:
    auc, pairs = within_group_auc(scores, labels, groups)
    lo, hi = group_bootstrap_ci(scores, labels, groups, n_boot=N_BOOT, seed=seed)
    return {"auc": auc, "ci_lo": lo, "ci_hi": hi, "pairs": pairs}


def evaluate_seed(spec: EstimatorSpec, evidence: Evidence, seed: int, draw: int = 0) -> dict:
    p = evidence.draw_problem(seed, draw)
    labels = evidence.labels(p)
    # with no sibling group mixing behavior and not there is nothing to rank: the estimator is not asked (its
    # constant score — the label reader's, rightly — would fail the item as "ranks nothing"); the figures
    # below come out empty and the seed is invalid-setup like every other estimator's
    mixed = within_group_auc(np.zeros(labels.size), labels, p.group)[1] > 0
    raw = evidence.scores(spec, p) if mixed else np.zeros(labels.size)
    ctrl = controls.draw_scores(evidence, seed, draw, CONTROL)
    surface = controls.draw_scores(evidence, seed, draw, controls.SURFACE)
    est = auc_with_ci(residualize(raw, p.fluency, p.group), labels, p.group, seed)
    ctrl_auc, _ = within_group_auc(residualize(ctrl, p.fluency, p.group), labels, p.group)
    surface_auc, _ = within_group_auc(residualize(surface, p.fluency, p.group), labels, p.group)
    binned = auc_with_ci(residualize_bins(raw, p.fluency, p.group), labels, p.group, seed)
    m_auc, m_pairs = matched_pair_auc(raw, labels, p.group, p.fluency, CALIPER)
    flu_auc, _ = within_group_auc(p.fluency, labels, p.group)
    flu = np.asarray(p.fluency, float) * (1.0 if not flu_auc < 0.5 else -1.0)  # the better direction
    vs_flu = paired_group_auc_diff(raw, flu, labels, p.group, n_boot=N_BOOT, seed=seed)
    probes = {q["step"]: q for q in evidence.artifacts[seed].run.probes}
    rate = probes[p.extra["analysis_step"]]["sampled_rate"]
    out = {**est, "control_auc": ctrl_auc, "surface_auc": surface_auc,
           "fluency_auc": max(flu_auc, 1.0 - flu_auc) if flu_auc == flu_auc else flu_auc,
           "vs_fluency": vs_flu,
           "raw_auc": within_group_auc(raw, labels, p.group)[0],
           "binned_auc": binned["auc"], "binned_ci": [binned["ci_lo"], binned["ci_hi"]],
           "matched_auc": m_auc if m_pairs >= MIN_MATCHED else None, "matched_pairs": m_pairs,
           "analysis_step": p.extra["analysis_step"], "sampled_rate": rate,
           "behavior_rate": float(np.mean(labels)), "draw": draw,
           "margin": est["auc"] - max(CI_LOWER, ctrl_auc), "chance_margin": est["auc"] - 0.5,
           "versus": {f"AUC {CI_LOWER}": {"value": est["auc"] - CI_LOWER, "ci": [est["ci_lo"] - CI_LOWER,
                                                                            est["ci_hi"] - CI_LOWER]},
                      CONTROL: {"value": est["auc"] - ctrl_auc, "ci": None},
                      "fluency itself": {"value": vs_flu["diff"], "ci": [vs_flu["ci_lo"], vs_flu["ci_hi"]]}}}
    head = (f"AUC {fmt(est['auc'])} [{fmt(est['ci_lo'])}, {fmt(est['ci_hi'])}] vs {CONTROL} {fmt(ctrl_auc)}; "
            f"raw AUC {fmt(out['raw_auc'])} vs fluency's {fmt(out['fluency_auc'])} (Δ CI lower "
            f"{fmt(vs_flu['ci_lo'])}); surface {fmt(surface_auc)} (reported)")
    if rate < SATURATION:
        return {**out, "status": Status.INVALID_SETUP,
                "why": f"checkpoint {p.extra['analysis_step']} is not saturated "
                       f"(sampled rate {fmt(rate)} < {SATURATION})"}
    if est["pairs"] == 0:
        return {**out, "status": Status.INVALID_SETUP,
                "why": "no sibling group holds both behavior and non-behavior replies"}
    why = []
    if not est["ci_lo"] > CI_LOWER:
        why.append(f"CI lower ≤ {CI_LOWER}")
    if not est["ci_hi"] - est["ci_lo"] <= CI_MAX_WIDTH:
        why.append(f"CI width {fmt(est['ci_hi'] - est['ci_lo'])} > {CI_MAX_WIDTH}")
    if not est["auc"] > ctrl_auc:
        why.append(f"not above {CONTROL}")
    if not vs_flu["ci_lo"] > 0:
        why.append("does not beat fluency itself")
    return {**out, "status": Status.FAIL if why else Status.PASS, "why": head + (" — " + ", ".join(why) if why else ""),
            "short": ", ".join(why)}


def evaluate(spec: EstimatorSpec, evidence: Evidence) -> Verdict:
    return seed_verdict(NAME, evaluate_seed, spec, evidence, headline=HEADLINE, margin=MARGIN,
                        extra={"ci_lower": CI_LOWER, "ci_max_width": CI_MAX_WIDTH, "saturation": SATURATION,
                               "n_boot": N_BOOT})


ITEM = Item(NAME, TITLE, "estimator", evaluate, reference="P5", headline=HEADLINE)
