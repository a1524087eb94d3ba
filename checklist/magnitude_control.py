"""Checklist item 1 — magnitude control (reference pitfall P1).

Rule, on every seed: the estimator's precision@|GT| on the real training rollouts (against the planted
GT) must exceed the target-free norm-only control's, with the 95% paired cluster-bootstrap CI of the
difference (steps resampled) above 0. Judged at rollout level, and at step level too when the estimator
supports it and the step level has room above the control (ceiling − control > 0; a control already at
the step-level ceiling cannot be beaten, which the reference's P1/P2 are about — reported, not judged).
Reported beside it, per seed and level: precision, lift, chance and ceiling (the reference's tables).

Rationale: with std-normalized advantages a step's gradient size tracks how many groups had reward
variance, which the contamination creates, so ‖gradient‖ alone "finds" the contaminated steps. A
targeted method that cannot beat that control has shown nothing about its target.
"""

from __future__ import annotations

from behaviortrace.checklist._base import CONTROL, Item, control_spec, fmt
from behaviortrace.checklist._common import seed_verdict

from bt_core.attribution.evidence import Evidence
from bt_core.attribution.registry import EstimatorSpec
from bt_core.metrics import ceiling_precision, chance, paired_bootstrap_precision, precision_at_k
from bt_core.reporting.scorecard import Verdict

NAME = "magnitude_control"
TITLE = "beats the norm-only magnitude control (paired bootstrap CI)"
HEADLINE = "lift"  # figure compared against a baseline scorecard (--scorecard-compare)
N_BOOT = 200  # paired cluster-bootstrap resamples
ALPHA = 0.05  # two-sided; the CI's lower bound of (estimator − control) must exceed 0


def level_figures(spec: EstimatorSpec, evidence: Evidence, seed: int, level: str) -> dict:
    p = evidence.stream_problem(seed, level)
    est = p.to_rollouts(evidence.scores(spec, p))
    ctrl = p.to_rollouts(evidence.scores(control_spec(), p))
    steps = p.step[p.unit_of_rollout] if level == "step" else p.step
    boot = paired_bootstrap_precision(est, ctrl, p.labels, steps, n_boot=N_BOOT, alpha=ALPHA, seed=seed)
    ch = chance(p.labels)
    prec = precision_at_k(est, p.labels)
    prec_ctrl = precision_at_k(ctrl, p.labels)
    ceil = ceiling_precision(p.unit_of_rollout, p.labels) if level == "step" else 1.0
    return {"precision": prec, "lift": prec / ch, "control_precision": prec_ctrl, "control_lift": prec_ctrl / ch,
            "chance": ch, "ceiling": ceil, "ceiling_lift": ceil / ch, "diff": boot["diff"],
            "diff_ci_lo": boot["ci_lo"], "diff_ci_hi": boot["ci_hi"]}


def evaluate_seed(spec: EstimatorSpec, evidence: Evidence, seed: int, draw: int = 0) -> dict:
    r = level_figures(spec, evidence, seed, "rollout")
    out = {**r, "status": "pass" if r["diff_ci_lo"] > 0 else "fail"}
    why = [f"rollout lift {fmt(r['lift'])}× vs {CONTROL} {fmt(r['control_lift'])}× "
           f"(Δprecision CI [{fmt(r['diff_ci_lo'])}, {fmt(r['diff_ci_hi'])}])"]
    if "step" in spec.levels:
        s = level_figures(spec, evidence, seed, "step")
        judged = s["ceiling"] - s["control_precision"] > 1e-9
        out["step"] = {**s, "judged": judged}
        verdict = "n/a: control at ceiling" if not judged else ("ok" if s["diff_ci_lo"] > 0 else "FAILS")
        why.append(f"step lift {fmt(s['lift'])}× vs {fmt(s['control_lift'])}× (ceiling {fmt(s['ceiling_lift'])}×, "
                   f"{verdict})")
        if judged and not s["diff_ci_lo"] > 0:
            out["status"] = "fail"
    out["why"] = ", ".join(why)
    return out


def evaluate(spec: EstimatorSpec, evidence: Evidence) -> Verdict:
    return seed_verdict(NAME, evaluate_seed, spec, evidence, headline=HEADLINE, uses_control=True,
                        extra={"n_boot": N_BOOT, "alpha": ALPHA})


ITEM = Item(NAME, TITLE, "estimator", evaluate, reference="P1", headline=HEADLINE)
