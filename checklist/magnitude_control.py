"""Checklist item 1 — magnitude control.

Rule: on every seed, the estimator's rollout-level lift (tie-aware precision@|GT| / chance, on the real
training rollouts against the planted GT) must exceed the lift of the target-free norm-only control.
Step-level figures (precision, lift, ceiling) are reported beside it, as the reference did.

Rationale / pitfall P1: with std-normalized advantages a step's gradient size tracks how many groups had
reward variance, which the contamination itself creates, so ‖gradient‖ alone "finds" the contaminated
steps. A targeted method that cannot beat that control has shown nothing about its target.
"""

from __future__ import annotations

from bt_core.evidence import EstimatorFailure, Evidence
from bt_core.metrics import ceiling_precision, chance, precision_at_k
from bt_core.registry import EstimatorSpec
from bt_core.scorecard import Verdict
from checklist._common import CONTROL, control_spec, failure_verdict, fmt, spec_record

NAME = "magnitude_control"
TITLE = "beats the norm-only magnitude control"
MARGIN = 0.0  # lift must exceed the control's by more than this (strictly greater at 0)


def _level_figures(spec, evidence: Evidence, seed: int, level: str) -> dict:
    p = evidence.stream_problem(seed, level)
    est = precision_at_k(p.to_rollouts(evidence.scores(spec, p)), p.labels)
    ctrl = precision_at_k(p.to_rollouts(evidence.scores(control_spec(), p)), p.labels)
    ch = chance(p.labels)
    out = {"precision": est, "lift": est / ch, "control_lift": ctrl / ch, "chance": ch}
    if level == "step":
        out["ceiling"] = ceiling_precision(p.unit_of_rollout, p.labels)
    return out


def evaluate(spec: EstimatorSpec, evidence: Evidence) -> Verdict:
    per_seed, step_level = {}, {}
    try:
        for seed in evidence.seeds:
            per_seed[seed] = _level_figures(spec, evidence, seed, "rollout")
    except EstimatorFailure as e:
        return failure_verdict(NAME, spec, evidence, e)
    if "step" in spec.levels:
        for seed in evidence.seeds:
            try:
                step_level[seed] = _level_figures(spec, evidence, seed, "step")
            except EstimatorFailure as e:  # step level is reported, not judged
                step_level[seed] = {"error": str(e)}
    losing = [s for s, f in per_seed.items() if not f["lift"] > f["control_lift"] + MARGIN]
    summary = "; ".join(f"seed {s}: lift {fmt(f['lift'])}× vs {CONTROL} {fmt(f['control_lift'])}×"
                        for s, f in per_seed.items())
    figures = {"per_seed": per_seed, "step_level": step_level, "margin": MARGIN}
    if spec.name == CONTROL:
        return Verdict(NAME, spec.name, "fail", f"this is the control itself and cannot beat itself ({summary})",
                       figures, spec_record(spec, evidence))
    if losing:
        return Verdict(NAME, spec.name, "fail",
                       f"rollout-level lift does not exceed the norm-only control on seed(s) {losing} ({summary})",
                       figures, spec_record(spec, evidence))
    return Verdict(NAME, spec.name, "pass", f"beats the norm-only control on every seed ({summary})",
                   figures, spec_record(spec, evidence))
