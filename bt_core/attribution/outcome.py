"""One `score` call and what came of it: the same code in the judge (in-process scoring) and in the
scoring worker (`bt_core.attribution.worker`), so both paths fail an estimator with the same reason.

`Outcome` travels from the worker as JSON next to a ``.npy`` of the scores (never a pickle: the
judge unpickles nothing a plug-in wrote).
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import numpy as np
from pytest_benchmark.timers import default_timer

from bt_core.attribution.frames import raised_in
from bt_core.attribution.problem import AttributionProblem, undeclared_reads
from bt_core.attribution.registry import Declined
from bt_core.extras import MissingExtra

__all__ = ["Outcome", "call_score"]


@dataclass
class Outcome:
    """What one `score` call gave. `scores` (n_units,) float64 when it returned something numeric;
    else `error` holds the reason as it follows "estimator NAME on PROBLEM" in a failure message."""

    scores: np.ndarray | None = None
    error: str | None = None
    declined: bool = False  # it raised `Declined` (a documented limitation)
    missing_extra: str | None = None  # it raised `MissingExtra`: the install message
    undeclared: list[str] = field(default_factory=list)  # fields it read without declaring them
    # refused before it ran (its files lie in the artifact cache): the method's failure, not a crash
    refused: bool = False
    seconds: float = 0.0  # the call itself, where it ran

    def as_json(self) -> dict:
        d = asdict(self)
        d.pop("scores")
        return d

    @classmethod
    def from_json(cls, d: dict, scores: np.ndarray | None) -> Outcome:
        return cls(
            scores=scores,
            **{k: d[k] for k in ("error", "declined", "missing_extra", "undeclared", "seconds")},
            refused=bool(d.get("refused", False)),
        )


def _raised(e: BaseException, factory) -> Outcome:
    tb = traceback.format_exception_only(type(e), e)[-1].strip()
    where_raised = raised_in(e, factory)  # the frame in the plug-in's own code
    if isinstance(e, Declined):
        return Outcome(error=f" declined: {e}", declined=True)
    if isinstance(e, MissingExtra):
        return Outcome(error=f": {e}", missing_extra=str(e))
    if isinstance(e, ValueError) and "read-only" in str(e):
        tb += " (its inputs are read-only: copy an array before changing it)"
    return Outcome(error=f" raised {tb}" + (f" ({where_raised})" if where_raised else ""))


def call_score(build: Callable[[], object], factory, given: AttributionProblem) -> Outcome:
    """``build().score(given)``, classified: an exception (a write into its read-only inputs among
    them, or its `pytest.skip`) becomes an error; a read of an undeclared field is noted even when
    caught."""
    start = default_timer()
    try:
        raw = build().score(given)
    except BaseException as e:  # a plug-in's bug becomes a failed item, not a crashed session
        if isinstance(e, (KeyboardInterrupt, SystemExit, GeneratorExit)):
            raise
        out = _raised(e, factory)
        # whatever it raised after an undeclared read
        out.undeclared = list(undeclared_reads(given))
        out.seconds = default_timer() - start
        return out
    seconds = default_timer() - start
    if undeclared_reads(given):  # it caught the error and returned scores anyway
        return Outcome(undeclared=list(undeclared_reads(given)), seconds=seconds)
    try:
        s = np.asarray(raw, dtype=np.float64)
    except (TypeError, ValueError) as e:
        return Outcome(
            error=f" returned {type(raw).__name__} that is not numeric: {e}", seconds=seconds
        )
    return Outcome(scores=s, seconds=seconds)
