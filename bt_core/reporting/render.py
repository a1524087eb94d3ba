"""Renderings of a written scorecard JSON: terminal tables, Markdown, PNG figures, self-contained
HTML.

Everything here reads the JSON dict only, so every rendering shows exactly what the scorecard says.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from tabulate import tabulate

from bt_core.atomic import write_text_atomic
from bt_core.reporting import compare, present, summary
from bt_core.reporting.page import NOT_PROVENANCE
from bt_core.reporting.scorecard import load
from bt_core.reporting.tables import (  # noqa: F401 — re-exported: the tables' long-standing home
    LABEL_MARK,
    label,
    matrix,
    setup_rows,
    status_cell,
)

TERMINAL_WIDTH = 120  # columns every terminal table keeps within (wider tables are split)


def cell_code(rec: dict) -> str:
    """A verdict in a terminal grid cell: PASS, FAIL, ERROR, DECLINED (the estimator could not be
    scored), INVALID (the item's own evidence is unusable), or gated / gated:FAIL (a setup gate held
    it back; after the colon, what the item's rule gives)."""
    if rec["status"] != "invalid-setup":
        return rec["status"].upper()
    rule = summary.rule_status(rec)
    return ("gated" if (rec.get("figures") or {}).get("gated_by") else "INVALID") + (
        f":{rule.upper()}" if rule else ""
    )


def _width(col: list[str]) -> int:
    return max((len(line) for c in col for line in str(c).split("\n")), default=0)


def fit(
    headers: list[str], rows: list[list[str]], fixed: int, width: int = TERMINAL_WIDTH, **kw
) -> list[str]:
    """`tabulate` (simple) tables of `rows` within `width` columns: the first `fixed` columns repeat
    in each table, the others are split between tables where one would be wider."""

    def table(cols: list[int]) -> str:
        pick = lambda row: [row[k] for k in (*range(fixed), *cols)]  # noqa: E731
        return tabulate([pick(r) for r in rows], headers=pick(headers), tablefmt="simple", **kw)

    def wide(t: str) -> int:
        return max(len(line) for line in t.splitlines())

    out, cur = [], []
    for j in range(fixed, len(headers)):
        if cur and wide(table([*cur, j])) > width:
            out.append(table(cur))
            cur = []
        cur.append(j)
    return [*out, table(cur)]


def _name(rec: dict, width: int = 24) -> str:
    spec = rec.get("estimator_spec") or {}
    return (
        summary.clip(rec["estimator"], width - 15) + " [reads labels]"
        if spec.get("reads_labels")
        else summary.clip(rec["estimator"], width)
    )


def terminal_grid(data: dict) -> list[str]:
    """Estimators (grouped: methods, controls, validation) × items, one code per cell
    (`cell_code`)."""
    g, its = summary.grid(data), summary.items(data)
    rows = []
    for name, role in summary.estimators(data):
        first = next(g[(name, i)] for i in its if (name, i) in g)
        rows.append([_name(first), role] + [_grid_cell(g.get((name, i))) for i in its])
    heads = [summary.item_heading(data, i, "\n").replace("_", "\n") for i in its]
    return fit(["estimator", "role", *heads], rows, fixed=2)


def _grid_cell(rec: dict | None) -> str:
    """A terminal grid cell: the verdict's code, and on a second line each other view's status
    ("ref FAIL"), reported beside it."""
    if rec is None:
        return "—"
    others = [f"{w[:3]} {st.upper()}" for w, st in summary.other_views(rec)]
    return "\n".join([cell_code(rec), *others])


GRID_LEGEND = (
    "PASS and FAIL are judged; the rest are not: gated = invalid-setup: a failed setup item held "
    "the verdict back; INVALID = the item's own evidence is unusable; ERROR = the estimator raised "
    "or returned scores that cannot be ranked; DECLINED = it declined the problem; after a colon, "
    "what the item's own rule gives; [reads labels] = validation only, never a method (the "
    "planted labels are not the replayed truth: it is not expected to pass the causal items). A "
    "control fails the item aimed at its confound and may pass one whose question it answers."
)


VIEW_LEGEND = (
    " Under an item's name, the view its verdict is judged in; a cell's second line is the other "
    "view's verdict (ref = reference, cau = causal), reported beside it and never gating."
)


def why_lines(data: dict) -> list[str]:
    """Per method (and per plug-in, whatever its role): each item's verdict and its one-line why."""
    g, its, out = summary.grid(data), summary.items(data), []
    for name, role in summary.estimators(data):
        recs = [g[(name, i)] for i in its if (name, i) in g]
        if role != "method" and all(
            (r.get("estimator_spec") or {}).get("origin", "builtin") == "builtin" for r in recs
        ):
            continue
        out.append(f"{_name(recs[0], 60)} ({role})")
        out += [
            summary.clip(f"  {r['item']:<18} {cell_code(r):<12} {summary.short(r)}", TERMINAL_WIDTH)
            for r in recs
        ]
    return out


def best_lines(data: dict) -> list[str]:
    rows = [
        [
            item,
            r["estimator"] if r else "—",
            summary.clip(f"{cell_code(r)}: {summary.short(r)}" if r else "no method was run", 76),
        ]
        for item, r in summary.best(data).items()
    ]
    return fit(["item", "best method", "verdict: why"], rows, fixed=1) if rows else []


def render_terminal(data: dict) -> str:
    """What the terminal shows: the summary, the setup items, the verdict grid, the best method per
    item, each method's why per item, and the items' own tables (`present`) that they mark for the
    terminal — every table within `TERMINAL_WIDTH` columns."""
    parts = [
        "\n".join(
            textwrap.fill(line, TERMINAL_WIDTH, subsequent_indent="  ")
            for line in summary.headline(data)
        )
    ]
    setup, held = summary.setup_records(data), summary.gated(data)
    if setup:
        parts += fit(
            ["setup item", "status", "held back", "why"],
            [
                [r["item"], r["status"].upper(), str(held.get(r["item"], 0)), summary.short(r, 76)]
                for r in setup
            ],
            fixed=1,
        )
    if summary.estimator_records(data):
        legend = GRID_LEGEND + (VIEW_LEGEND if data.get("gate_view") else "")
        parts += terminal_grid(data) + ["\n".join(textwrap.wrap(legend, TERMINAL_WIDTH))]
        parts += ["best method per item\n" + "\n\n".join(best_lines(data))]
        lines = why_lines(data)
        if lines:
            parts.append(
                "why, per method (full reasons in the scorecard's .md and .html)\n"
                + "\n".join(lines)
            )
    for sec in present.collect(data):
        for p in sec.of("table"):
            if p.get("terminal", True):
                tables = fit(p["columns"], present.table_rows(p), fixed=1, disable_numparse=True)
                parts += [p["title"] + "\n" + tables[0], *tables[1:]]
    if present.predates(data):
        parts.append(textwrap.fill(present.OLD_SCORECARD, TERMINAL_WIDTH))
    return "\n\n".join(parts)


def _md(rows: list[list[str]]) -> list[list[str]]:
    """Cells with their pipes escaped ("|GT|" would split a Markdown cell)."""
    return [[str(c).replace("|", "\\|") for c in r] for r in rows]


def markdown_sections(data: dict) -> list[str]:
    """The items' own tables (`present`) under their sections, each section's note after them."""
    out = []
    for sec in present.collect(data):
        tables = sec.of("table")
        if not tables:
            continue
        out += [f"## {sec.title}", ""]
        for p in tables:
            table = tabulate(_md(present.table_rows(p)), headers=p["columns"], tablefmt="github")
            out += [f"### {p['title']}", "", table, ""]
        if sec.note:
            out += [sec.note, ""]
    if present.predates(data):
        out += [present.OLD_SCORECARD, ""]
    return out


def render_markdown(data: dict) -> str:
    out = [
        f"# BehaviorTrace scorecard ({data.get('scale', '?')} scale)",
        "",
        (
            f"schema `{data['schema']}` · seeds {data.get('seeds')} · config "
            f"`{data.get('config_hash')}` · commit `{data.get('git_commit')}` · created "
            f"{data['created']}"
        ),
        "",
        *[f"- {line}" for line in summary.headline(data)],
        "",
    ]
    best = [
        [
            i,
            r["estimator"] if r else "—",
            f"{cell_code(r)}: {summary.short(r)}" if r else "no method was run",
        ]
        for i, r in summary.best(data).items()
    ]
    if best:
        out += [
            "## Best method per item",
            "",
            tabulate(_md(best), headers=["item", "best method", "verdict: why"], tablefmt="github"),
            "",
        ]
    if setup_rows(data):
        out += [
            "## Setup validity",
            "",
            tabulate(
                _md(setup_rows(data, 400)),
                headers=["item", "status", "evidence"],
                tablefmt="github",
            ),
            "",
        ]
    headers, rows = matrix(data, why=True)
    out += ["## Verdicts", "", tabulate(_md(rows), headers=headers, tablefmt="github"), ""]
    out += markdown_sections(data)
    out += ["## Reasons", ""]
    # a long reason as one line per seed (reasons ran to 1,400 characters)
    for r in data["records"]:
        head, parts = summary.reason_parts(r["reason"])
        out += [
            f"- **{r['item']} × {label(r)}** — {r['status'].upper()}: {head}",
            *[f"  - {p}" for p in parts],
        ]
    cmp = data.get("comparison")
    if cmp:
        out += [
            "",
            "## Comparison with the baseline",
            "",
            f"baseline `{cmp['baseline']}`, tolerance {cmp['tolerance']}",
            "",
        ] + [f"- {x}" for x in compare.listed(cmp)]
    meta = {k: v for k, v in data.items() if k not in NOT_PROVENANCE}
    out += ["", "## Provenance", "", "```json", json.dumps(meta, indent=1), "```", ""]
    return "\n".join(out)


def render_all(json_path: Path) -> dict[str, Path]:
    """Render Markdown, figures and HTML beside the scorecard JSON. Returns the written paths."""
    from bt_core.reporting import figures
    from bt_core.reporting.page import render_html

    data = load(json_path)
    md = json_path.with_suffix(".md")
    write_text_atomic(md, render_markdown(data))
    figs = figures.render(data, json_path.with_name(json_path.stem + "_figures"))
    page = json_path.with_suffix(".html")
    write_text_atomic(page, render_html(data, figs))
    fig_dir = json_path.with_name(json_path.stem + "_figures")
    return {"json": json_path, "markdown": md, "html": page, "figures": fig_dir}
