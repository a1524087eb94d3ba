"""Verdicts and the scorecard: JSON is the source of truth; Markdown and the terminal table are
rendered from it (never from live objects), so what people cite is exactly what was written.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tabulate import tabulate

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

    def write(self, path: Path) -> tuple[Path, Path]:
        """Write `path` (JSON) atomically and its Markdown rendering beside it (`.md`)."""
        data = self.to_dict()
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        _atomic_write(path, json.dumps(data, indent=1, default=_json_default))
        md = path.with_suffix(".md")
        _atomic_write(md, render_markdown(data))
        return path, md


def _json_default(o):
    import numpy as np

    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"not JSON serializable: {type(o).__name__}")


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


def _matrix(data: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Rows = estimators, columns = items; cells = status."""
    recs = data["records"]
    items = list(dict.fromkeys(r["item"] for r in recs))
    ests = list(dict.fromkeys(r["estimator"] for r in recs))
    cell = {(r["estimator"], r["item"]): r["status"].upper() for r in recs}
    rows = [[e] + [cell.get((e, i), "—") for i in items] for e in ests]
    return ["estimator", *items], rows


def render_terminal(data: dict[str, Any]) -> str:
    headers, rows = _matrix(data)
    return tabulate(rows, headers=headers, tablefmt="simple")


def render_markdown(data: dict[str, Any]) -> str:
    headers, rows = _matrix(data)
    out = [f"# BehaviorTrace scorecard ({data.get('scale', '?')} scale)", "",
           f"schema `{data['schema']}` · seeds {data.get('seeds')} · commit `{data.get('git_commit')}` · "
           f"created {data['created']}", "", "## Verdicts", "",
           tabulate(rows, headers=headers, tablefmt="github"), "", "## Reasons", ""]
    for r in data["records"]:
        out.append(f"- **{r['item']} × {r['estimator']}** — {r['status'].upper()}: {r['reason']}")
    out += ["", "## Figures per seed", ""]
    for r in data["records"]:
        per_seed = r["figures"].get("per_seed")
        if per_seed:
            out += [f"### {r['item']} × {r['estimator']}", "",
                    tabulate([{"seed": s, **v} for s, v in per_seed.items()], headers="keys",
                             tablefmt="github", floatfmt=".3f"), ""]
    out += ["## Provenance", "", "```json", json.dumps({k: data[k] for k in data if k not in ("records",)},
                                                       indent=1, default=str), "```", ""]
    return "\n".join(out)
