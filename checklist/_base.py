"""What every checklist module shares: the `Item` description and verdict helpers.

Each item module ends with ``ITEM = Item(...)``; `behaviortrace.checklist` lists them in display
order.
The controls every item compares with are defined in `behaviortrace.checklist.controls`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Literal

import numpy as np

from bt_core.attribution.evidence import EstimatorFailure, Evidence
from bt_core.attribution.registry import EstimatorSpec
from bt_core.reporting.present import LABEL_MARK, UNSANDBOXED_MARK  # marks beside a record's name
from bt_core.reporting.scorecard import Status, Verdict, clean, worst_status

GATES = ("all", "targets", "none")

# The two views an estimator item's rule can take (issue 48). The causal view asks the item's
# question of causal truth: the replayed counterfactuals on the stream, the one-step causal label on
# draws. The reference view asks it of the planted labels, as the reference study did: those can be
# read off the reply's text and reward, so a text reader can pass them. One view gates the exit code
# (`--gate-view`, causal by default); the other is recorded and shown beside it.
CAUSAL = "causal"
REFERENCE = "reference"
VIEWS = (CAUSAL, REFERENCE)
DEFAULT_VIEW = CAUSAL


@dataclass(frozen=True)
class Item:
    """One checklist item: its name, what it checks, and how it is evaluated.

    A setup item (`kind="setup"`) is evaluated once per fixture set: ``evaluate(evidence) ->
    Verdict``. An estimator item with one view (`views`) is evaluated as ``evaluate(spec,
    evidence)``, one with several as ``evaluate(spec, evidence, view)`` per view (`judge`).
    What its failure does is `gates`: "all" makes every estimator item invalid-setup; "targets"
    makes the items of estimators that read targets invalid-setup (their figures kept, the rule's
    own status quoted); "none" (advisory) quotes it as a caveat in their verdicts. An estimator item
    is evaluated per estimator: ``evaluate(spec, evidence) -> Verdict``.

    `present` turns the item's record (the verdict as the scorecard JSON holds it) into the rows it
    shows (`bt_core.reporting.present`: tables, figures); `judge` evaluates and writes them into the
    verdict.
    How an item declares them: docs/architecture.md."""

    name: str
    title: str  # one line: what a pass means
    kind: Literal["setup", "estimator"]
    evaluate: Callable[..., Verdict]
    reference: str = ""  # the reference study's pitfall or finding it guards against (P1 … P6)
    gates: str = "all"  # setup items only: "all" | "targets" | "none" (advisory)
    # per-seed figure compared against a baseline scorecard (--scorecard-compare); per view where
    # the item has several ({view: figure})
    headline: str | dict[str, str] | None = None
    present: Callable[[dict], dict] | None = None  # record → its presentation (tables and figures)
    # estimator items: the views its rule has; with more than one, ``evaluate(spec, evidence,
    # view)`` is called for each (with one, ``evaluate(spec, evidence)``)
    views: tuple[str, ...] = (REFERENCE,)

    def __post_init__(self) -> None:
        if self.kind not in ("setup", "estimator"):
            raise ValueError(
                f"Item {self.name!r}: kind={self.kind!r} must be 'setup' or 'estimator'"
            )
        if self.gates not in GATES:
            raise ValueError(f"Item {self.name!r}: gates={self.gates!r} must be one of {GATES}")
        if self.kind == "estimator" and self.gates != "all":
            raise ValueError(
                f"Item {self.name!r}: only setup items gate selectively (gates={self.gates!r})"
            )
        if not self.views or any(v not in VIEWS for v in self.views):
            raise ValueError(f"Item {self.name!r}: views={self.views!r} must be taken from {VIEWS}")

    def headline_for(self, view: str) -> str | None:
        """The per-seed headline figure of the item's verdict in `view`."""
        return self.headline.get(view) if isinstance(self.headline, dict) else self.headline

    def view_for(self, gating: str) -> str:
        """The view this item's verdict is judged in when `gating` gates: that one where the item
        has it, else the only one it has (`counterfactual` is causal only)."""
        return gating if gating in self.views else self.views[0]

    def judge(self, *args, view: str = DEFAULT_VIEW) -> Verdict:
        """The verdict, with the item's presentation written into it. A setup item:
        ``evaluate(evidence)``. An estimator item: its rule in every view it has; the verdict is
        the one in `view_for(view)`, and ``views`` records each view's status, short line and
        headline figure (the other view is reported beside it, never gating)."""
        if self.kind == "setup":
            v = self.evaluate(*args)
        else:
            if view not in VIEWS:
                raise ValueError(f"view={view!r}: choose one of {VIEWS}")
            own = self.view_for(view)
            each = (
                {w: self.evaluate(*args, w) for w in self.views}
                if len(self.views) > 1
                else {own: self.evaluate(*args)}
            )
            v = each[own]
            v.view = own
            # each view's headline too, so that --scorecard-compare sees the other view's
            # regressions (reported beside the gating view's, never gating)
            v.views = {
                w: {
                    "status": str(x.status),
                    "short": x.short,
                    "headline": x.figures.get("headline"),
                }
                for w, x in each.items()
            }
        if self.present is not None:
            v.presentation = self.present(clean(asdict(v)))
        return v

    @property
    def gating(self) -> bool:
        """Whether its failure turns some estimator items invalid-setup (not merely a caveat)."""
        return self.gates != "none"


def spec_record(spec: EstimatorSpec, evidence: Evidence) -> dict:
    """How the estimator of a verdict was built: name, origin, its actual settings (the target among
    them), whether it reads the labels (then `validation_only`, shown as "reads labels — validation
    only"), its role (control, validation or method) and where it was scored (`scoring`: sandboxed,
    in-process, or unsandboxed — then also `unsandboxed`, shown next to its name;
    docs/sandbox.md)."""
    rec = {
        "name": spec.name,
        "origin": spec.origin,
        "params": evidence.settings(spec),
        "levels": list(spec.levels),
        "reads_labels": spec.reads_labels,
        "role": spec.role,
    }
    if spec.reads_labels:
        rec["validation_only"] = LABEL_MARK
    scoring = evidence.scoring(spec)
    rec["scoring"] = scoring.record()
    if scoring.mode == "unsandboxed":
        rec["unsandboxed"] = UNSANDBOXED_MARK
    return rec


def failure_verdict(
    name: str, spec: EstimatorSpec, evidence: Evidence, e: EstimatorFailure
) -> Verdict:
    """The verdict of an item whose estimator could not be scored, with the reason: `declined` when
    it declined the problem (a documented limitation), `error` when it raised or its scores cannot
    be ranked — both not judged: a crash says nothing about what the method attributes, and a failed
    item (exit 1) must mean a judged one — and `fail` when it was refused for breaking the problem's
    contract (it read a field it did not declare, or its files lie in the artifact cache), like a
    label reader's refusal. A missing optional extra is
    marked in the figures (`missing_extra`): the suite reports a built-in adapter's as a skip naming
    the install command."""
    figures = {
        k: v
        for k, v in (
            ("declined", e.declined),
            ("missing_extra", e.missing_extra),
            ("refused", "broke the problem's contract" if e.refused else None),
        )
        if v
    }
    figures["estimator_failure"] = True
    return Verdict(
        name,
        spec.name,
        Status.FAIL if e.refused else Status.DECLINED if e.declined else Status.ERROR,
        f"estimator failure: {e}",
        figures,
        spec_record(spec, evidence),
        f"estimator failure: {e}",
    )


def fmt(x: float) -> str:
    return "nan" if x != x else f"{x:.3f}"


def spread(values: list[float]) -> dict:
    """min, max and SD (ddof 1) of the finite values; NaNs when there are none."""
    v = np.array([x for x in values if x == x], float)
    if v.size == 0:
        return {"min": float("nan"), "max": float("nan"), "sd": float("nan")}
    return {
        "min": float(v.min()),
        "max": float(v.max()),
        "sd": float(v.std(ddof=1)) if v.size > 1 else 0.0,
    }


def failing_first(clauses: list[tuple[bool, str]], sep: str = "; ") -> str:
    """Join (held, text) clauses with the ones that failed first, each in its own order: a one-line
    reason is cut at its end, so the clause that failed must lead (issue 39)."""
    return sep.join([t for ok, t in clauses if not ok] + [t for ok, t in clauses if ok])


def setup_verdict(name: str, per_seed: dict[int, dict], extra: dict | None = None) -> Verdict:
    """A setup item's verdict (estimator "setup"): pass iff every seed's check passes."""
    failing = [s for s, r in per_seed.items() if r["status"] != Status.PASS]
    summary = "; ".join(f"seed {s}: {r['why']}" for s, r in per_seed.items())
    figures = {"per_seed": per_seed, **(extra or {})}
    # a setup check passes or fails
    if worst_status(r["status"] for r in per_seed.values()) is not Status.PASS:
        short = f"fails on seed {', '.join(map(str, failing))}: {per_seed[failing[0]]['why']}"
        return Verdict(
            name,
            "setup",
            Status.FAIL,
            f"fails on seed(s) {failing} — {summary}",
            figures,
            short=short,
        )
    return Verdict(
        name, "setup", Status.PASS, summary, figures, short=f"holds on all {len(per_seed)} seed(s)"
    )
