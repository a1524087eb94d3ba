"""Machinery shared by checklist items: setup gating, per-seed results → verdicts, estimator failures.

An estimator item module defines `NAME`, `TITLE`, `USES_CONTROL` and
`evaluate_seed(spec, evidence, seed, draw=0) -> dict` returning the seed's figures plus
``status`` ("pass" | "fail" | "invalid-setup") and ``why`` (a short reason quoting the figures).
`seed_verdict` turns those per-seed results into the item's `Verdict`: every seed must pass.
"""

from __future__ import annotations

from collections.abc import Callable

from bt_core.evidence import EstimatorFailure, Evidence
from bt_core.registry import EstimatorSpec, get
from bt_core.scorecard import Verdict

CONTROL = "norm_only"  # the target-free magnitude control every method must beat


def spec_record(spec: EstimatorSpec, evidence: Evidence) -> dict:
    return {"name": spec.name, "origin": spec.origin, "params": evidence.estimator_params.get(spec.name, {})}


def control_spec() -> EstimatorSpec:
    return get(CONTROL)


def fmt(x: float) -> str:
    return "nan" if x != x else f"{x:.3f}"


def setup_failures(evidence: Evidence, advisory: bool = False) -> list[Verdict]:
    """The gating (or, with `advisory`, the advisory) setup verdicts that did not pass (memoized)."""
    from checklist import ADVISORY_SETUP_ITEMS, GATING_SETUP_ITEMS

    items = ADVISORY_SETUP_ITEMS if advisory else GATING_SETUP_ITEMS

    def run() -> list[Verdict]:
        return [v for v in (m.evaluate_setup(evidence) for m in items) if v.status != "pass"]

    return evidence.memo(("setup-failures", advisory), run)


TARGET_FIELDS = {"targets", "target_examples"}


def reads_targets(spec: EstimatorSpec) -> bool:
    """Whether the estimator reads targets: by its declared `needs`; an estimator that declares nothing
    (a plain class or factory without `needs`) is assumed to."""
    from bt_core.registry import Estimator

    declared = any("needs" in vars(c) for c in getattr(spec.factory, "__mro__", ())
                   if c not in (Estimator, object))
    return bool(TARGET_FIELDS & set(spec.needs)) if declared else True


def attach_caveats(v: Verdict, spec: EstimatorSpec, evidence: Evidence) -> Verdict:
    """Quote the advisory setup failures that concern `spec` in its verdict (reason and figures)."""
    notes = caveats(spec, evidence) if v.status != "invalid-setup" else []
    if notes:
        v.figures["setup_caveats"] = notes
        v.reason += "".join(f" [{n}]" for n in notes)
    return v


def caveats(spec: EstimatorSpec, evidence: Evidence) -> list[str]:
    """Advisory setup failures that concern this estimator (quoted in its verdicts)."""
    if not reads_targets(spec):
        return []
    return [f"setup caveat: {v.item} {v.reason.split(' — ')[0]}" for v in setup_failures(evidence, advisory=True)]

def gate(name: str, spec: EstimatorSpec, evidence: Evidence) -> Verdict | None:
    """The invalid-setup verdict of item `name` when a gating setup item failed, else None."""
    broken = setup_failures(evidence)
    if not broken:
        return None
    names = ", ".join(f"{v.item} ({v.reason})" for v in broken)
    return Verdict(name, spec.name, "invalid-setup", f"setup validity failed: {names}", {},
                   spec_record(spec, evidence))


def seed_results(module, spec: EstimatorSpec, evidence: Evidence, draw: int = 0) -> dict[int, dict]:
    """`module.evaluate_seed` on every seed, memoized; raises EstimatorFailure."""
    return {s: evidence.memo((module.NAME, spec.name, s, draw),
                             lambda s=s: module.evaluate_seed(spec, evidence, s, draw))
            for s in evidence.seeds}


def seed_verdict(module, spec: EstimatorSpec, evidence: Evidence,
                 results: Callable[[], dict] | None = None, extra: dict | None = None) -> Verdict:
    """The item's verdict: invalid-setup if the setup failed or any seed's evidence is unusable; fail if
    any seed fails (or the estimator is the control the item compares against); else pass. Advisory
    setup failures are quoted as caveats."""
    return attach_caveats(_seed_verdict(module, spec, evidence, results, extra), spec, evidence)


def _seed_verdict(module, spec: EstimatorSpec, evidence: Evidence, results, extra) -> Verdict:
    rec = spec_record(spec, evidence)
    gated = gate(module.NAME, spec, evidence)
    if gated:
        return gated
    try:
        per_seed = results() if results else seed_results(module, spec, evidence)
    except EstimatorFailure as e:
        return Verdict(module.NAME, spec.name, "fail", f"estimator failure: {e}", {}, rec)
    figures = {"per_seed": per_seed, **(extra or {})}
    key = getattr(module, "HEADLINE", None)
    if key:
        vals = [r[key] for r in per_seed.values() if isinstance(r.get(key), (int, float)) and r[key] == r[key]]
        figures["headline"] = {"figure": f"min {key} over seeds", "value": min(vals) if vals else None}
    summary = "; ".join(f"seed {s}: {r['why']}" for s, r in per_seed.items())
    invalid = [s for s, r in per_seed.items() if r["status"] == "invalid-setup"]
    if invalid:
        return Verdict(module.NAME, spec.name, "invalid-setup", f"unusable evidence on seed(s) {invalid} — {summary}",
                       figures, rec)
    if getattr(module, "USES_CONTROL", False) and spec.name == CONTROL:
        return Verdict(module.NAME, spec.name, "fail", f"this is the {CONTROL} control itself — {summary}",
                       figures, rec)
    failing = [s for s, r in per_seed.items() if r["status"] != "pass"]
    if failing:
        return Verdict(module.NAME, spec.name, "fail", f"fails on seed(s) {failing} — {summary}", figures, rec)
    return Verdict(module.NAME, spec.name, "pass", f"holds on every seed — {summary}", figures, rec)


def setup_verdict(name: str, per_seed: dict[int, dict], extra: dict | None = None) -> Verdict:
    """A setup item's verdict (estimator "setup"): pass iff every seed's check passes."""
    failing = [s for s, r in per_seed.items() if r["status"] != "pass"]
    summary = "; ".join(f"seed {s}: {r['why']}" for s, r in per_seed.items())
    figures = {"per_seed": per_seed, **(extra or {})}
    if failing:
        return Verdict(name, "setup", "fail", f"fails on seed(s) {failing} — {summary}", figures)
    return Verdict(name, "setup", "pass", summary, figures)
