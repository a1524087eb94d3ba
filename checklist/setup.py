"""The setup-validity items in display order, and how their failures reach the estimator items.

When a gating setup item fails, the fixtures themselves are broken and every estimator item reports
invalid-setup (`gate`). An advisory item's failure is quoted as a caveat in the verdicts of estimators
that read targets (`attach_caveats`).
"""

from __future__ import annotations

from behaviortrace.checklist import emergence, gt_minority, in_context_targets, sketch_coverage
from behaviortrace.checklist._base import Item, spec_record

from bt_core.attribution.evidence import Evidence
from bt_core.attribution.registry import Estimator, EstimatorSpec
from bt_core.reporting.scorecard import Status, Verdict

SETUP_ITEMS: tuple[Item, ...] = (emergence.ITEM, sketch_coverage.ITEM, in_context_targets.ITEM, gt_minority.ITEM)
GATING_SETUP_ITEMS = tuple(i for i in SETUP_ITEMS if i.gating)
ADVISORY_SETUP_ITEMS = tuple(i for i in SETUP_ITEMS if not i.gating)


def setup_failures(evidence: Evidence, advisory: bool = False) -> list[Verdict]:
    """The gating (or, with `advisory`, the advisory) setup verdicts that did not pass (memoized)."""
    items = ADVISORY_SETUP_ITEMS if advisory else GATING_SETUP_ITEMS

    def run() -> list[Verdict]:
        return [v for v in (i.evaluate(evidence) for i in items) if v.status != Status.PASS]

    return evidence.memo(("setup-failures", advisory), run)


def gate(name: str, spec: EstimatorSpec, evidence: Evidence) -> Verdict | None:
    """The invalid-setup verdict of estimator item `name` when a gating setup item failed, else None."""
    broken = setup_failures(evidence)
    if not broken:
        return None
    names = ", ".join(f"{v.item} ({v.reason})" for v in broken)
    return Verdict(name, spec.name, Status.INVALID_SETUP, f"setup validity failed: {names}", {},
                   spec_record(spec, evidence))


TARGET_FIELDS = {"targets", "target_examples"}


def reads_targets(spec: EstimatorSpec) -> bool:
    """Whether the estimator reads targets: by its declared `needs`; an estimator that declares nothing
    (a plain class or factory without `needs`) is assumed to."""
    declared = any("needs" in vars(c) for c in getattr(spec.factory, "__mro__", ())
                   if c not in (Estimator, object))
    return bool(TARGET_FIELDS & set(spec.needs)) if declared else True


def caveats(spec: EstimatorSpec, evidence: Evidence) -> list[str]:
    """Advisory setup failures that concern this estimator (quoted in its verdicts)."""
    if not reads_targets(spec):
        return []
    return [f"setup caveat: {v.item} {v.reason.split(' — ')[0]}" for v in setup_failures(evidence, advisory=True)]


def attach_caveats(v: Verdict, spec: EstimatorSpec, evidence: Evidence) -> Verdict:
    """Quote the advisory setup failures that concern `spec` in its verdict (reason and figures)."""
    notes = caveats(spec, evidence) if v.status != Status.INVALID_SETUP else []
    if notes:
        v.figures["setup_caveats"] = notes
        v.reason += "".join(f" [{n}]" for n in notes)
    return v
