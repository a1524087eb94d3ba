"""Machinery of the estimator items: per-seed results → one verdict, the scores of each level, setup gating
and the refusal of label readers.

An estimator item evaluates each seed with ``evaluate_seed(spec, evidence, seed, draw=0) -> dict``,
returning the seed's figures plus ``status`` (a `Status`), ``why`` (a short reason quoting the figures),
``margin`` (the headline figure minus the item's bar: > 0 clears it) and ``chance_margin`` (the figure
minus its chance level: > 0 is above chance), which `seed_variance` and `draw_variance` judge across seeds
and draws. `seed_verdict` turns those per-seed results into the item's `Verdict`: every seed must pass.

Every estimator item's verdict passes through `judged`: gating setup failures, the target gate, advisory
caveats, and the refusal of label readers that are not built-in validation estimators.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from behaviortrace.checklist._base import failure_verdict, spec_record
from behaviortrace.checklist.setup import attach_caveats, gate, gate_targets

from bt_core.attribution.evidence import EstimatorFailure, Evidence
from bt_core.attribution.registry import VALIDATION_ESTIMATORS, EstimatorSpec
from bt_core.reporting.scorecard import Status, Verdict

SeedFn = Callable[[EstimatorSpec, Evidence, int, int], dict]


def level_scores(spec: EstimatorSpec, evidence: Evidence, seed: int, level: str) -> tuple[np.ndarray, str]:
    """The estimator's scores on seed's stream at `level`, broadcast to rollouts (n_rollouts,), and how they
    were obtained. Every estimator is judged at both levels:

    * rollout level: its rollout scores ("native"), or its step scores broadcast to the step's rollouts
      ("broadcast": all rollouts of a step tie) when it has no rollout level;
    * step level: its step scores ("native"), or its rollout scores summed per step ("summed") when it has
      no step level — the step's share of what the method attributes to its rollouts.

    Raises EstimatorFailure."""
    pr, ps = evidence.stream_problem(seed, "rollout"), evidence.stream_problem(seed, "step")
    native = pr if level == "rollout" else ps
    if level in spec.levels:
        return native.to_rollouts(evidence.scores(spec, native)), "native"
    if level == "rollout":
        return ps.to_rollouts(evidence.scores(spec, ps)), "broadcast"
    summed = np.bincount(ps.unit_of_rollout, weights=evidence.scores(spec, pr), minlength=ps.n_units)
    return ps.to_rollouts(summed), "summed"


def seed_results(name: str, evaluate_seed: SeedFn, spec: EstimatorSpec, evidence: Evidence,
                 draw: int = 0) -> dict[int, dict]:
    """`evaluate_seed` on every seed, memoized per (item, estimator, seed, draw); raises EstimatorFailure."""
    return {s: evidence.memo((name, spec.key, s, draw), lambda s=s: evaluate_seed(spec, evidence, s, draw))
            for s in evidence.seeds}


def judged(name: str, spec: EstimatorSpec, evidence: Evidence, inner: Callable[[], Verdict]) -> Verdict:
    """The verdict of estimator item `name`: invalid-setup when a gating setup item failed (without running
    `inner`); else `inner()`, gated on the targets for target readers, with advisory caveats, and refused
    when the estimator reads the labels without being a built-in validation estimator."""
    v = gate(name, spec, evidence)
    if v is None:
        v = attach_caveats(gate_targets(inner(), spec, evidence), spec, evidence)
    return refuse_label_reader(v, spec)


def refuse_label_reader(v: Verdict, spec: EstimatorSpec) -> Verdict:
    """A label reader that is not a built-in validation estimator cannot pass a gate: its verdict fails,
    quoting what the item's rule gives (`rule_status`)."""
    if not spec.reads_labels or spec.builtin_validation:
        return v
    return Verdict(v.item, v.estimator, Status.FAIL,
                   f"refused: {spec.name!r} reads the labels (needs {list(spec.needs)}) — validation only, it "
                   f"cannot pass a gate; only the built-in validation estimator(s) {list(VALIDATION_ESTIMATORS)} "
                   f"may. The item's rule gives {str(v.status).upper()}: {v.reason}",
                   {**v.figures, "rule_status": str(v.status), "refused": "reads labels"}, v.estimator_spec)


def seed_verdict(name: str, evaluate_seed: SeedFn, spec: EstimatorSpec, evidence: Evidence, *,
                 headline: str | None = None, extra: dict | None = None) -> Verdict:
    """The item's verdict: invalid-setup if the setup failed or any seed's evidence is unusable; fail if
    any seed fails; else pass (see `judged` for gating and refusal)."""
    return judged(name, spec, evidence,
                  lambda: _seed_verdict(name, evaluate_seed, spec, evidence, headline, extra))


def _seed_verdict(name, evaluate_seed, spec, evidence, headline, extra) -> Verdict:
    rec = spec_record(spec, evidence)
    try:
        per_seed = seed_results(name, evaluate_seed, spec, evidence)
    except EstimatorFailure as e:
        return failure_verdict(name, spec, evidence, e)
    figures = {"per_seed": per_seed, **(extra or {})}
    if headline:
        vals = [r[headline] for r in per_seed.values()
                if isinstance(r.get(headline), (int, float)) and r[headline] == r[headline]]
        figures["headline"] = {"figure": f"min {headline} over seeds", "value": min(vals) if vals else None}
    summary = "; ".join(f"seed {s}: {r['why']}" for s, r in per_seed.items())
    invalid = [s for s, r in per_seed.items() if r["status"] == Status.INVALID_SETUP]
    if invalid:
        return Verdict(name, spec.name, Status.INVALID_SETUP, f"unusable evidence on seed(s) {invalid} — {summary}",
                       figures, rec)
    failing = [s for s, r in per_seed.items() if r["status"] != Status.PASS]
    if failing:
        return Verdict(name, spec.name, Status.FAIL, f"fails on seed(s) {failing} — {summary}", figures, rec)
    return Verdict(name, spec.name, Status.PASS, f"holds on every seed — {summary}", figures, rec)
