"""The setup-validity items in display order, and how their failures reach the estimator items.

* `gates="all"` (emergence, sketch_coverage, gt_minority, causal_gt): the fixtures themselves are
  broken, and every estimator item reports invalid-setup (`gate`).
* `gates="targets"` (in_context_targets): the targets may not carry the behavior, so the verdicts of
  estimators that read targets cannot be trusted either way: their items report invalid-setup, with
  the figures and the status the item's own rule gives kept in the record (`gate_targets`).
  Target-free estimators are unaffected. An estimator whose `score` failed keeps its own status
  (error, declined, or fail when refused): a broken method is broken on any fixture.
* `gates="none"` (advisory): quoted as a caveat in the verdicts of estimators that read targets
  (`attach_caveats`). No built-in item is advisory in this release.
"""

from __future__ import annotations

from bt_core.attribution.evidence import Evidence
from bt_core.attribution.registry import EstimatorSpec
from bt_core.reporting.scorecard import Status, Verdict

from . import causal_gt, emergence, gt_minority, in_context_targets, sketch_coverage
from ._base import Item, spec_record
from ._memo import memo

SETUP_ITEMS: tuple[Item, ...] = (
    emergence.ITEM,
    sketch_coverage.ITEM,
    in_context_targets.ITEM,
    gt_minority.ITEM,
    causal_gt.ITEM,
)
GATING_SETUP_ITEMS = tuple(i for i in SETUP_ITEMS if i.gates == "all")
TARGET_SETUP_ITEMS = tuple(i for i in SETUP_ITEMS if i.gates == "targets")
ADVISORY_SETUP_ITEMS = tuple(i for i in SETUP_ITEMS if i.gates == "none")


def setup_failures(evidence: Evidence, gates: str = "all") -> list[Verdict]:
    """The setup verdicts of items with this `gates` value that did not pass (memoized)."""
    items = {
        "all": GATING_SETUP_ITEMS,
        "targets": TARGET_SETUP_ITEMS,
        "none": ADVISORY_SETUP_ITEMS,
    }[gates]

    def run() -> list[Verdict]:
        return [v for v in (i.evaluate(evidence) for i in items) if v.status != Status.PASS]

    return memo(evidence, ("setup-failures", gates), run)


def gate(name: str, spec: EstimatorSpec, evidence: Evidence) -> Verdict | None:
    """The invalid-setup verdict of estimator item `name` when a gating setup item failed, else
    None."""
    broken = setup_failures(evidence)
    if not broken:
        return None
    names = ", ".join(f"{v.item} ({v.reason})" for v in broken)
    by = [v.item for v in broken]
    return Verdict(
        name,
        spec.name,
        Status.INVALID_SETUP,
        f"setup validity failed: {names}",
        {"gated_by": by},
        spec_record(spec, evidence),
        f"not judged: setup {', '.join(by)} failed",
    )


TARGET_FIELDS = {"targets", "target_examples"}


def reads_targets(spec: EstimatorSpec) -> bool:
    """Whether the estimator reads targets: by its declared `needs` (enforced: it sees nothing
    else); an estimator that declares nothing (a plain class or factory without `needs`) sees every
    field, targets among them, and is treated as reading them."""
    return bool(TARGET_FIELDS & set(spec.needs)) if spec.declares_needs else True


def gate_targets(v: Verdict, spec: EstimatorSpec, evidence: Evidence) -> Verdict:
    """`v` as invalid-setup when a target-gating setup item failed and `spec` reads targets; the
    figures and the rule's own status (`ungated_status`) are kept. An estimator failure stays a
    failure."""
    broken = setup_failures(evidence, "targets")
    if (
        not broken
        or not reads_targets(spec)
        or v.status == Status.INVALID_SETUP
        or v.figures.get("estimator_failure")
    ):
        return v
    names = "; ".join(f"{b.item} failed ({b.reason.split(' — ')[0]})" for b in broken)
    return Verdict(
        v.item,
        v.estimator,
        Status.INVALID_SETUP,
        f"the targets this estimator reads are not vouched for: {names}. The item's own rule gives "
        f"{str(v.status).upper()}: {v.reason}",
        {**v.figures, "ungated_status": str(v.status), "gated_by": [b.item for b in broken]},
        # short: what the rule found; gated_by: why it is not judged
        v.estimator_spec,
        v.short,
        v.margin,
    )


def caveats(spec: EstimatorSpec, evidence: Evidence) -> list[str]:
    """Advisory setup failures that concern this estimator (quoted in its verdicts)."""
    if not reads_targets(spec):
        return []
    return [
        f"setup caveat: {v.item} {v.reason.split(' — ')[0]}"
        for v in setup_failures(evidence, "none")
    ]


def attach_caveats(v: Verdict, spec: EstimatorSpec, evidence: Evidence) -> Verdict:
    """Quote the advisory setup failures that concern `spec` in its verdict (reason and figures)."""
    notes = caveats(spec, evidence) if v.status != Status.INVALID_SETUP else []
    if notes:
        v.figures["setup_caveats"] = notes
        v.reason += "".join(f" [{n}]" for n in notes)
    return v
