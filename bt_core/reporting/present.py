"""Presentations: the display-ready rows each checklist item writes into its verdict, and their
merge into the sections every rendering shows (terminal, Markdown, HTML, figures). Nothing here
knows an item.

A verdict's ``presentation`` (`scorecard.Verdict`; the scorecard may hold a top-level one, for rows
that belong to no record — the target-free controls) is::

    {"panels": [panel, ...], "sections": {key: {"title": str, "note": str}}}

A *panel* is a table or a figure, identified by its kind and ``key`` (a figure is written to
``<key>.png``, a table has the HTML id ``table-<key>``), shown in section ``section``:

    table: {"kind": "table", "key", "section", "title", "columns": [str, ...],
            "rows": [[str, ...], ...], "shared_rows": [[str, ...], ...], "terminal": bool}
    dots:  {"kind": "dots", "key", "section", "title", "caption", "horizontal": bool, "wide": bool,
            "band_label": str | None,
            "axes": [{"title": str, "label": str, "lines": [line, ...]}, ...],
            "rows": [row, ...], "shared_rows": [row, ...]}
      row:  {"label": str, "band": bool, "join": bool,
             "values": [{seed: [value, lo, hi]}, ...],  # one dict per axis; lo, hi: CI or None
             "extra": [{seed: [value, ...]}, ...]}        # hollow markers (other draws), per axis
      line: {"at": float, "style": "dashed" | "thin" | "dotted", "seed": str | None}
    ladder: {"kind": "ladder", "key", "section", "title", "caption",
             "rows": [{"estimator": str, "params": dict, "values": {seed: share of the ideal}}]}
      (the ladder's figure, `reporting/ladder.py`: each estimator's share of the ideal per seed
      against what scoring cost it; drawn where two or more of its rows are rungs)

Many records write a panel of the same key (one row each: their estimator's); `collect` merges
them: the spec (title, columns, axes) of the first record that has rows, every record's ``rows`` in
turn (setup records, then methods, controls and validation estimators), then ``shared_rows`` once —
rows that every record repeats (the controls' figures beside each estimator's), from the first
record that has them. A panel with shared rows only is not shown. A figure row with ``join`` adds
its values and hollow markers to the row of the same label another record wrote (shown only where
that row exists). Band rows are drawn on a grey background (the controls beside the methods).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from bt_core.reporting import summary

LABEL_MARK = "reads labels — validation only"
UNSANDBOXED_MARK = "unsandboxed"  # scored in a plain subprocess: nothing kept it from the answers
SETUP_SECTION = "setup"  # panels of this section are shown beside the setup items' table
OLD_SCORECARD = (
    "This scorecard holds no item presentations (it was written before each item wrote its own "
    "rows): the items' tables and figures are not shown; the verdicts, margins and reasons are."
)


def cell(x: Any) -> str:
    """A figure in a table cell: "—" when missing (None or NaN), 3 decimals for a float."""
    if x is None or (isinstance(x, float) and x != x):
        return "—"
    return f"{x:.3f}" if isinstance(x, float) else str(x)


def ci_cell(value: Any, lo: Any, hi: Any) -> str:
    """ "0.700 [0.600, 0.800]"."""
    return f"{cell(value)} [{cell(lo)}, {cell(hi)}]"


def estimator_label(rec: dict) -> str:
    """The estimator's name as shown in every table: marked when it reads the labels, and when it
    was scored outside the sandbox (docs/sandbox.md)."""
    spec = rec.get("estimator_spec") or {}
    name = f"{rec['estimator']} [{LABEL_MARK}]" if spec.get("reads_labels") else rec["estimator"]
    return f"{name} [{UNSANDBOXED_MARK}]" if spec.get("unsandboxed") else name


def seed_columns(first: str, seeds) -> list[str]:
    return [first, *[f"seed {s}" for s in seeds]]


def table(
    key: str,
    section: str,
    title: str,
    columns: list[str],
    rows=(),
    shared_rows=(),
    terminal: bool = True,
) -> dict:
    """A table panel; `terminal`: shown in the terminal too (else Markdown and HTML only)."""
    return {
        "kind": "table",
        "key": key,
        "section": section,
        "title": title,
        "columns": list(columns),
        "rows": [list(r) for r in rows],
        "shared_rows": [list(r) for r in shared_rows],
        "terminal": terminal,
    }


def axis(label: str, title: str = "", lines=()) -> dict:
    """One subplot of a dots figure: its value axis' label, title and reference lines (`line`)."""
    return {"title": title, "label": label, "lines": list(lines)}


def line(at: float | None, style: str = "dashed", seed: str | None = None) -> dict:
    return {"at": at, "style": style, "seed": seed}


def point(value: Any, lo: Any = None, hi: Any = None) -> list:
    """One marker: its value and CI ends (None where there is none)."""
    return [value, lo, hi]


def dot_row(
    label: str,
    values: list[dict],
    band: bool = False,
    extra: list[dict] | None = None,
    join: bool = False,
) -> dict:
    """A category of a dots figure: per axis, {seed: `point`} (and hollow markers in `extra`)."""
    return {"label": label, "band": band, "join": join, "values": values, "extra": extra or []}


def dots(
    key: str,
    section: str,
    title: str,
    caption: str,
    axes: list[dict],
    rows=(),
    shared_rows=(),
    horizontal: bool = False,
    wide: bool = False,
    band_label: str | None = None,
) -> dict:
    """A figure: one category per row, one marker per seed (colour and shape = seed) with its CI."""
    return {
        "kind": "dots",
        "key": key,
        "section": section,
        "title": title,
        "caption": caption,
        "axes": axes,
        "rows": list(rows),
        "shared_rows": list(shared_rows),
        "horizontal": horizontal,
        "wide": wide,
        "band_label": band_label,
    }


def ladder(key: str, section: str, title: str, caption: str, rec: dict, shares: dict) -> dict:
    """A ladder panel's row: the record's estimator, its settings and its share of the ideal per
    seed (`shares`: {seed: float}; NaN or None where there is none)."""
    spec = rec.get("estimator_spec") or {}
    values = {str(s): v for s, v in shares.items() if isinstance(v, (int, float)) and v == v}
    row = {
        "estimator": rec["estimator"],
        "params": dict(spec.get("params") or {}),
        "values": values,
    }
    return {
        "kind": "ladder",
        "key": key,
        "section": section,
        "title": title,
        "caption": caption,
        "rows": [row] if values else [],
    }


def presentation(*panels: dict, sections: dict[str, dict] | None = None) -> dict:
    return {"panels": [p for p in panels if p], "sections": dict(sections or {})}


@dataclass
class Section:
    """A section of every rendering: its title, its note, and its merged panels in order."""

    key: str
    title: str = ""
    note: str = ""
    panels: list[dict] = field(default_factory=list)

    def of(self, kind: str) -> list[dict]:
        return [p for p in self.panels if p["kind"] == kind]


def sources(data: dict) -> list[dict]:
    """The presentations of a scorecard in display order: setup records, then the estimator records
    by role (methods, controls, validation; the scorecard's order within a role), then the top-level
    one."""
    order = {n: i for i, (n, _) in enumerate(summary.estimators(data))}
    recs = sorted(
        summary.estimator_records(data), key=lambda r: order.get(r["estimator"], len(order))
    )
    out = [r.get("presentation") for r in [*summary.setup_records(data), *recs]]
    return [p for p in [*out, data.get("presentation")] if p]


def has_presentations(data: dict) -> bool:
    """Whether the scorecard was written with presentations (an older one has none to show)."""
    return "presentation" in data or any("presentation" in r for r in data.get("records", []))


def predates(data: dict) -> bool:
    """Records but no presentation: say so (`OLD_SCORECARD`) where the tables would be."""
    return bool(data.get("records")) and not has_presentations(data)


def _merge(panel: dict, new: dict, joins: list) -> None:
    """Add a source's panel to the merged one; its joining rows wait in `joins` for every row."""
    own = [r for r in new["rows"] if not (panel["kind"] == "dots" and r.get("join"))]
    joins += [(panel, r) for r in new["rows"] if panel["kind"] == "dots" and r.get("join")]
    if not panel["rows"] and own:  # the spec of the first source with rows of its own
        panel.update({k: v for k, v in new.items() if k not in ("rows", "shared_rows")})
    panel["rows"] += own
    if not panel["shared_rows"]:
        panel["shared_rows"] = list(new.get("shared_rows") or [])


def _join(rows: list[dict], row: dict) -> None:
    """Add a joining row's values and hollow markers to the row of the same label, if any."""
    target = next((r for r in rows if r["label"] == row["label"]), None)
    if target is None:
        return
    for key in ("values", "extra"):
        mine = target.setdefault(key, [])
        for i, per_seed in enumerate(row.get(key) or []):
            while len(mine) <= i:
                mine.append({})
            for s, v in per_seed.items():
                mine[i][s] = [*mine[i].get(s, []), *v] if key == "extra" else v


def collect(data: dict) -> list[Section]:
    """Every section with its merged panels, in the order they first appear (module docstring)."""
    sections: dict[str, Section] = {}
    panels: dict[tuple[str, str], dict] = {}  # a table and a figure may share a key
    joins: list[tuple[dict, dict]] = []
    for pres in copy.deepcopy(sources(data)):  # joins change rows: never the scorecard's own
        for p in pres.get("panels") or []:
            sec = sections.setdefault(p["section"], Section(p["section"]))
            key = (p["kind"], p["key"])
            if key not in panels:
                panels[key] = {**p, "rows": [], "shared_rows": []}
                sec.panels.append(panels[key])
            _merge(panels[key], p, joins)
        for key, s in (pres.get("sections") or {}).items():
            sec = sections.setdefault(key, Section(key))
            sec.title = sec.title or s.get("title", "")
            sec.note = sec.note or s.get("note", "")
    for panel, row in joins:
        _join(panel["rows"], row)
    for sec in sections.values():
        sec.panels = [p for p in sec.panels if p["rows"]]
        sec.title = sec.title or sec.key.replace("_", " ")
    return [s for s in sections.values() if s.panels]


def table_rows(panel: dict) -> list[list[str]]:
    """A merged table's rows: every source's own, then the shared ones."""
    return [*panel["rows"], *panel["shared_rows"]]


def per_seed(rec: dict) -> dict:
    """The record's per-seed figures ({} where it has none: a gated or failed estimator)."""
    return (rec.get("figures") or {}).get("per_seed") or {}


def dig(d: Any, *keys: str) -> Any:
    """d[k1][k2]… or None where a key is missing."""
    for k in keys:
        d = d.get(k) if isinstance(d, dict) else None
    return d
