"""Machinery of the estimator items: per-seed results → one verdict, estimator failures, setup gating.

An estimator item evaluates each seed with ``evaluate_seed(spec, evidence, seed, draw=0) -> dict``,
returning the seed's figures plus ``status`` (a `Status`) and ``why`` (a short reason quoting the
figures). `seed_verdict` turns those per-seed results into the item's `Verdict`: every seed must pass.
"""

from __future__ import annotations

from collections.abc import Callable

from behaviortrace.checklist._base import CONTROL, failure_verdict, spec_record
from behaviortrace.checklist.setup import attach_caveats, gate

from bt_core.attribution.evidence import EstimatorFailure, Evidence
from bt_core.attribution.registry import EstimatorSpec
from bt_core.reporting.scorecard import Status, Verdict

SeedFn = Callable[[EstimatorSpec, Evidence, int, int], dict]


def seed_results(name: str, evaluate_seed: SeedFn, spec: EstimatorSpec, evidence: Evidence,
                 draw: int = 0) -> dict[int, dict]:
    """`evaluate_seed` on every seed, memoized per (item, estimator, seed, draw); raises EstimatorFailure."""
    return {s: evidence.memo((name, spec.name, s, draw), lambda s=s: evaluate_seed(spec, evidence, s, draw))
            for s in evidence.seeds}


def seed_verdict(name: str, evaluate_seed: SeedFn, spec: EstimatorSpec, evidence: Evidence, *,
                 headline: str | None = None, uses_control: bool = False, extra: dict | None = None) -> Verdict:
    """The item's verdict: invalid-setup if the setup failed or any seed's evidence is unusable; fail if
    any seed fails (or the estimator is the control the item compares against); else pass. Advisory
    setup failures are quoted as caveats."""
    v = _seed_verdict(name, evaluate_seed, spec, evidence, headline, uses_control, extra)
    return attach_caveats(v, spec, evidence)


def _seed_verdict(name, evaluate_seed, spec, evidence, headline, uses_control, extra) -> Verdict:
    rec = spec_record(spec, evidence)
    gated = gate(name, spec, evidence)
    if gated:
        return gated
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
    if uses_control and spec.name == CONTROL:
        return Verdict(name, spec.name, Status.FAIL, f"this is the {CONTROL} control itself — {summary}", figures, rec)
    failing = [s for s, r in per_seed.items() if r["status"] != Status.PASS]
    if failing:
        return Verdict(name, spec.name, Status.FAIL, f"fails on seed(s) {failing} — {summary}", figures, rec)
    return Verdict(name, spec.name, Status.PASS, f"holds on every seed — {summary}", figures, rec)
