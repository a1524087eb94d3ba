"""Verdicts and the scorecard. The JSON is the source of truth; Markdown, HTML, figures and the terminal
table are rendered from the written JSON (bt_core.report), never from live objects, so what people cite
is exactly what was written.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

SCHEMA = "behaviortrace.scorecard/1"
STATUSES = ("pass", "fail", "invalid-setup")


@dataclass
class Verdict:
    """The outcome of one checklist item for one estimator (or for the setup)."""

    item: str
    estimator: str  # estimator name, or "setup" for setup-validity items
    status: str  # pass | fail | invalid-setup
    reason: str  # one or two sentences with the figures that decided it
    figures: dict[str, Any] = field(default_factory=dict)  # per-seed numbers behind the verdict
    estimator_spec: dict[str, Any] = field(default_factory=dict)  # name, params, origin

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status={self.status!r}; must be one of {STATUSES}")


class Scorecard:
    """Collects verdicts during a session; written once at session end."""

    def __init__(self, meta: dict[str, Any]):
        self.meta = meta
        self.records: list[Verdict] = []

    def add(self, v: Verdict) -> None:
        self.records.append(v)

    def to_dict(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **self.meta,
                "records": [asdict(r) for r in self.records]}

    def write(self, path: Path) -> dict[str, Path]:
        """Write `path` (JSON) atomically, then render everything else from that JSON: Markdown (`.md`),
        PNG figures (`<stem>_figures/`) and a self-contained HTML page (`.html`)."""
        from bt_core import report

        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        _atomic_write(path, json.dumps(_clean(self.to_dict()), indent=1, allow_nan=False))
        return report.render_all(path)


def _clean(o):
    """JSON-safe copy: numpy scalars/arrays to Python, NaN/inf to null (strict JSON for every reader)."""
    import math

    import numpy as np

    if isinstance(o, dict):
        return {str(k): _clean(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_clean(v) for v in o]
    if isinstance(o, np.ndarray):
        return _clean(o.tolist())
    if isinstance(o, np.generic):
        o = o.item()
    if isinstance(o, float) and not math.isfinite(o):
        return None
    return o


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


def load(path: Path) -> dict[str, Any]:
    data = json.loads(Path(path).read_text())
    if data.get("schema") != SCHEMA:
        raise ValueError(f"{path} has schema {data.get('schema')!r}, expected {SCHEMA!r}: not a BehaviorTrace "
                         "scorecard or one from an incompatible version")
    return data
