"""Helpers shared by checklist items: fetching scores, turning estimator failures into verdicts."""

from __future__ import annotations

from bt_core.evidence import EstimatorFailure, Evidence
from bt_core.registry import EstimatorSpec, get
from bt_core.scorecard import Verdict

CONTROL = "norm_only"  # the target-free magnitude control every method must beat


def spec_record(spec: EstimatorSpec, evidence: Evidence) -> dict:
    return {"name": spec.name, "origin": spec.origin, "params": evidence.estimator_params.get(spec.name, {})}


def failure_verdict(item: str, spec: EstimatorSpec, evidence: Evidence, err: EstimatorFailure) -> Verdict:
    return Verdict(item, spec.name, "fail", f"estimator failure: {err}", {}, spec_record(spec, evidence))


def control_spec() -> EstimatorSpec:
    return get(CONTROL)


def fmt(x: float) -> str:
    return "nan" if x != x else f"{x:.3f}"
