"""Verdicts and the scorecard. The JSON is the source of truth; Markdown, HTML, figures and the
terminal table are rendered from the written JSON (bt_core.reporting.render), never from live
objects, so what people cite is exactly what was written.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from bt_core.atomic import write_text_atomic

SCHEMA = "behaviortrace.scorecard/1"


class Status(StrEnum):
    """The outcome of a checklist item. A `StrEnum`, so it is written to JSON as the plain
    string."""

    PASS = "pass"
    FAIL = "fail"
    INVALID_SETUP = "invalid-setup"  # the fixtures cannot test the item: never a pass
    # the estimator could not be judged: it raised, or returned scores that cannot be ranked (the
    # wrong shape, a NaN, all equal), or a plug-in's optional extra is absent
    ERROR = "error"
    DECLINED = "declined"  # it declined the problem (`Declined`: a documented limitation)


# the statuses that are not a judgement of the method: never green, and never exit 1 (an item
# failed), which belongs to the judged failures alone (`fixtures.gate`)
NOT_JUDGED = (Status.INVALID_SETUP, Status.ERROR, Status.DECLINED)


# how good a status is, for a comparison with a baseline and the best method per item: a pass, then
# a verdict held back by the fixtures or a documented limitation, then a failure or a crash
RANK = {"pass": 2, "invalid-setup": 1, "declined": 1, "error": 0, "fail": 0}


def judged(status: str) -> bool:
    """Whether `status` judges the method (pass or fail), not a verdict held back."""
    return Status(status) in (Status.PASS, Status.FAIL)


STATUSES = tuple(s.value for s in Status)
# an estimator's role, recorded as estimator_spec.role (`Estimator.role` declares it); also the
# display order of the estimator groups
ROLES = ("method", "control", "validation")
# "Worst status wins": the precedence that combines several statuses (seeds, draws, items) into one.
# Evidence that cannot test the item outranks a failure: a verdict over seeds is invalid-setup if
# any seed is, else fail if any seed fails. `FAIL_FIRST` is the order within one seed where a
# failing part is the estimator's failure whatever another part's setup (headroom's two levels).
# An estimator that could not be scored (error, declined) outranks both: nothing of it was judged.
WORST_FIRST = (Status.ERROR, Status.DECLINED, Status.INVALID_SETUP, Status.FAIL, Status.PASS)
FAIL_FIRST = (Status.ERROR, Status.DECLINED, Status.FAIL, Status.INVALID_SETUP, Status.PASS)


def worst_status(statuses: Iterable[str], order: tuple[Status, ...] = WORST_FIRST) -> Status:
    """The first status of `order` among `statuses` (strings or `Status`); PASS when there are
    none."""
    given = {Status(s) for s in statuses}
    return next((s for s in order if s in given), Status.PASS)


SHORT_MAX = 80  # characters of a verdict's `short`


@dataclass
class Verdict:
    """The outcome of one checklist item for one estimator (or for the setup).

    `short` and `margin` let a renderer show what decided a verdict without knowing the item:

    * ``short``: one line, at most `SHORT_MAX` characters, e.g. "loses to advantage (step) by 0.43";
    * ``margin``: the estimator's margin over the comparison that decides the item (its *deciding
      control*: the one with the lowest CI lower bound, i.e. the one it loses to worst or beats
      least)::

          {"figure": "what the margin measures (an axis label)", "bar": 0.0,
           "per_seed": {"0": {"value": float | None, "ci": [lo, hi] | None, "versus": "advantage
               (step)",
                              "status": "fail"}, ...},
           "pooled": {...same keys, across seeds...}}            # optional

      A seed clears the bar when its CI's lower end (its value, where there is no CI) exceeds `bar`.

    ``presentation`` holds the display-ready rows the item writes for its record (tables, figures;
    the schema is `bt_core.reporting.present`): the renderings show them without knowing the item.
    """

    item: str
    estimator: str  # estimator name, or "setup" for setup-validity items
    # pass | fail | invalid-setup | error | declined (a plain string is accepted and converted)
    status: Status
    reason: str  # one or two sentences with the figures that decided it
    figures: dict[str, Any] = field(default_factory=dict)  # per-seed numbers behind the verdict
    estimator_spec: dict[str, Any] = field(default_factory=dict)  # name, params, origin
    # one line for a grid cell: what decided it ("loses to advantage (step) by 0.43")
    short: str = ""
    # the deciding comparison per seed (see `Verdict`)
    margin: dict[str, Any] = field(default_factory=dict)
    presentation: dict[str, Any] = field(default_factory=dict)  # its rows (`reporting.present`)
    # estimator items: the view the verdict is judged in ("causal" or "reference"; "" for setup
    # items), and every view's {"status", "short", "headline"}
    # (`behaviortrace.checklist._base.Item.judge`)
    view: str = ""
    views: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status={self.status!r}; must be one of {STATUSES}")
        self.status = Status(self.status)
        if len(self.short) > SHORT_MAX:
            self.short = self.short[: SHORT_MAX - 1] + "…"


class Scorecard:
    """Collects verdicts during a session; written once at session end."""

    def __init__(self, meta: dict[str, Any]):
        self.meta = meta
        self.records: list[Verdict] = []

    def add(self, v: Verdict) -> None:
        self.records.append(v)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            **self.meta,
            "records": [asdict(r) for r in self.records],
        }

    def write_json(self, path: Path) -> Path:
        """Write the scorecard JSON to `path` atomically (render the rest with
        `render.render_all(path)`)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, json.dumps(clean(self.to_dict()), indent=1, allow_nan=False))
        return path


def num(x: float | None) -> str:
    """A figure in a short line: 2 decimals, 3 significant digits below 0.01 (a margin of 0.004 is
    not 0)."""
    if x is None or x != x:
        return "n/a"
    return f"{x:.2f}" if abs(x) >= 0.01 or x == 0 else f"{x:.2g}"


def clean(o):
    """JSON-safe copy: numpy scalars/arrays to Python, NaN/inf to null (strict JSON for every
    reader)."""
    if isinstance(o, StrEnum):
        return o.value
    if isinstance(o, dict):
        return {str(k): clean(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [clean(v) for v in o]
    # numpy arrays and scalars, without importing numpy
    if hasattr(o, "tolist") and hasattr(o, "dtype"):
        return clean(o.tolist())
    if isinstance(o, float) and not math.isfinite(o):
        return None
    return o


def load(path: Path) -> dict[str, Any]:
    data = json.loads(Path(path).read_text())
    if data.get("schema") != SCHEMA:
        raise ValueError(
            f"{path} has schema {data.get('schema')!r}, expected {SCHEMA!r}: not a BehaviorTrace "
            "scorecard or one from an incompatible version"
        )
    return data
