"""Renderings of a written scorecard JSON: terminal tables, Markdown, PNG figures, self-contained HTML.

Everything here reads the JSON dict only, so every rendering shows exactly what the scorecard says.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

from tabulate import tabulate

from bt_core.atomic import write_text_atomic
from bt_core.reporting import summary
from bt_core.reporting.scorecard import load


def _fmt(x: Any) -> str:
    return "—" if x is None else (f"{x:.3f}" if isinstance(x, float) else str(x))


def split(data: dict) -> tuple[list[dict], list[dict]]:
    recs = data["records"]
    return [r for r in recs if r["estimator"] == "setup"], [r for r in recs if r["estimator"] != "setup"]


def setup_rows(data: dict, width: int = 110) -> list[list[str]]:
    setup, _ = split(data)
    return [[r["item"], r["status"].upper(), r["reason"][:width] + ("…" if len(r["reason"]) > width else "")]
            for r in setup]


LABEL_MARK = "reads labels — validation only"


def label(rec: dict) -> str:
    """The estimator's name as shown in every table: marked when it reads the labels."""
    spec = rec.get("estimator_spec") or {}
    return f"{rec['estimator']} [{LABEL_MARK}]" if spec.get("reads_labels") else rec["estimator"]


def status_cell(rec: dict) -> str:
    """The status, and what the item's own rule gives when the record is invalid-setup only because the
    targets it reads are not vouched for (`ungated_status`)."""
    rule = (rec.get("figures") or {}).get("ungated_status")
    return rec["status"].upper() + (f" (rule: {rule.upper()})" if rule else "")


def matrix(data: dict, why: bool = False) -> tuple[list[str], list[list[str]]]:
    """Rows = estimators (methods, controls, validation), columns = estimator items; cells = status (and,
    with `why`, the record's one-line why)."""
    recs = summary.estimator_records(data)
    items = summary.items(data)
    names = {r["estimator"]: label(r) for r in recs}
    cell = {(r["estimator"], r["item"]): status_cell(r) + (f" — {summary.short(r)}" if why else "") for r in recs}
    return ["estimator", "role", *items], [[names[e], role] + [cell.get((e, i), "—") for i in items]
                                           for e, role in summary.estimators(data)]


TERMINAL_WIDTH = 120  # columns every terminal table keeps within (wider tables are split)


def cell_code(rec: dict) -> str:
    """A verdict in a terminal grid cell: PASS, FAIL, INVALID (the item's own evidence is unusable), or
    gated / gated:FAIL (a setup gate held it back; after the colon, what the item's rule gives)."""
    if rec["status"] != "invalid-setup":
        return rec["status"].upper()
    rule = summary.rule_status(rec)
    return ("gated" if (rec.get("figures") or {}).get("gated_by") else "INVALID") + (f":{rule.upper()}" if rule else "")


def _width(col: list[str]) -> int:
    return max((len(line) for c in col for line in str(c).split("\n")), default=0)


def fit(headers: list[str], rows: list[list[str]], fixed: int, width: int = TERMINAL_WIDTH, **kw) -> list[str]:
    """`tabulate` (simple) tables of `rows` within `width` columns: the first `fixed` columns repeat in each
    table, the others are split between tables where one would be wider."""
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
    return summary.clip(rec["estimator"], width - 15) + " [reads labels]" if spec.get("reads_labels") else \
        summary.clip(rec["estimator"], width)


def terminal_grid(data: dict) -> list[str]:
    """Estimators (grouped: methods, controls, validation) × items, one code per cell (`cell_code`)."""
    g, its = summary.grid(data), summary.items(data)
    rows = []
    for name, role in summary.estimators(data):
        first = next(g[(name, i)] for i in its if (name, i) in g)
        rows.append([_name(first), role] + [cell_code(g[(name, i)]) if (name, i) in g else "—" for i in its])
    return fit(["estimator", "role", *[i.replace("_", "\n") for i in its]], rows, fixed=2)


GRID_LEGEND = ("gated = invalid-setup: a failed setup item held the verdict back; INVALID = the item's own "
               "evidence is unusable; after a colon, what the item's own rule gives; [reads labels] = validation "
               "only, never a method.")


def why_lines(data: dict) -> list[str]:
    """Per method (and per plug-in, whatever its role): each item's verdict and its one-line why."""
    g, its, out = summary.grid(data), summary.items(data), []
    for name, role in summary.estimators(data):
        recs = [g[(name, i)] for i in its if (name, i) in g]
        if role != "method" and all((r.get("estimator_spec") or {}).get("origin", "builtin") == "builtin"
                                    for r in recs):
            continue
        out.append(f"{_name(recs[0], 60)} ({role})")
        out += [summary.clip(f"  {r['item']:<18} {cell_code(r):<12} {summary.short(r)}", TERMINAL_WIDTH)
                for r in recs]
    return out


def best_lines(data: dict) -> list[str]:
    rows = [[item, r["estimator"] if r else "—",
             summary.clip(f"{cell_code(r)}: {summary.short(r)}" if r else "no method was run", 76)]
            for item, r in summary.best(data).items()]
    return fit(["item", "best method", "verdict: why"], rows, fixed=1) if rows else []


def render_terminal(data: dict) -> str:
    """What the terminal shows: the summary, the setup items, the verdict grid, the best method per item,
    each method's why per item, and the lift of every estimator beside the controls — every table within
    `TERMINAL_WIDTH` columns."""
    parts = ["\n".join(textwrap.fill(line, TERMINAL_WIDTH, subsequent_indent="  ")
                       for line in summary.headline(data))]
    setup, held = summary.setup_records(data), summary.gated(data)
    if setup:
        parts += fit(["setup item", "status", "held back", "why"],
                     [[r["item"], r["status"].upper(), str(held.get(r["item"], 0)), summary.short(r, 76)]
                      for r in setup], fixed=1)
    if summary.estimator_records(data):
        parts += terminal_grid(data) + ["\n".join(textwrap.wrap(GRID_LEGEND, TERMINAL_WIDTH))]
        parts += ["best method per item\n" + "\n\n".join(best_lines(data))]
        lines = why_lines(data)
        if lines:
            parts.append("why, per method (full reasons in the scorecard's .md and .html)\n" + "\n".join(lines))
    for level in ("rollout", "step"):
        h, rows = lift_table(data, level)
        if not rows:
            h, rows = baseline_table(data, level)
        if rows:
            parts += fit([f"{level} lift" if i == 0 else x for i, x in enumerate(h)], rows, fixed=1,
                         disable_numparse=True)
    return "\n\n".join(parts)


def lift_table(data: dict, level: str) -> tuple[list[str], list[list[str]]]:
    """The reference's table: lift (precision@|GT| ÷ chance) per estimator and seed, then the controls, the
    surface baseline, chance and ceiling (from the scorecard's `baselines`)."""
    _, recs = split(data)
    mags = [r for r in recs if r["item"] == "magnitude_control" and r["figures"].get("per_seed")]
    base = (data.get("baselines") or {}).get("per_seed") or {}
    seeds = list(mags[0]["figures"]["per_seed"]) if mags else list(base)
    if not seeds:
        return [], []
    def fig(r, s):
        f = r["figures"]["per_seed"].get(s, {})
        return f if level == "rollout" else f.get("step", {})
    rows = [[label(r)] + [_fmt(fig(r, s).get("lift")) for s in seeds] for r in mags]
    rows += baseline_rows(data, level, seeds)
    return ["lift", *[f"seed {s}" for s in seeds]], rows


def baseline_rows(data: dict, level: str, seeds: list[str]) -> list[list[str]]:
    """Rows of the controls' and the surface baseline's lift, chance (precision) and ceiling (lift)."""
    b = data.get("baselines") or {}
    per = b.get("per_seed") or {}
    if not per:
        return []
    get = lambda s, *keys: _dig(per.get(str(s), {}).get(level, {}), *keys)  # noqa: E731
    rows = [[f"control: {c}"] + [_fmt(get(s, c, "lift")) for s in seeds] for c in b.get("controls", {})]
    rows.append(["surface baseline"] + [_fmt(get(s, "surface", "lift")) for s in seeds])
    rows.append(["chance (precision)"] + [_fmt(get(s, "chance")) for s in seeds])
    rows.append(["ceiling (lift)"] + [_fmt(get(s, "ceiling_lift")) for s in seeds])
    return rows


def baseline_table(data: dict, level: str) -> tuple[list[str], list[list[str]]]:
    """The controls and the surface baseline alone (terminal): lift per seed at `level`."""
    per = (data.get("baselines") or {}).get("per_seed") or {}
    seeds = list(per)
    rows = baseline_rows(data, level, seeds)
    return ([f"{level} lift", *[f"seed {s}" for s in seeds]], rows) if rows else ([], [])


def _dig(d, *keys):
    for k in keys:
        d = d.get(k) if isinstance(d, dict) else None
    return d


def auc_table(data: dict) -> tuple[list[str], list[list[str]]]:
    _, recs = split(data)
    flu = [r for r in recs if r["item"] == "fluency_control" and r["figures"].get("per_seed")]
    if not flu:
        return [], []
    seeds = list(flu[0]["figures"]["per_seed"])
    def cell(f):
        return f"{_fmt(f.get('auc'))} [{_fmt(f.get('ci_lo'))}, {_fmt(f.get('ci_hi'))}]"
    rows = [[label(r)] + [cell(r["figures"]["per_seed"][s]) for s in seeds] for r in flu]
    per = (data.get("baselines") or {}).get("per_seed") or {}
    for name, shown in (("norm_only", "control: norm_only"), ("surface", "surface baseline (the label)")):
        rows.append([shown] + [_fmt(_dig(per.get(s, {}), "draws", "0", name)) for s in seeds])
    return ["fluency-residualized AUC [95% CI]", *[f"seed {s}" for s in seeds]], rows


def lds_table(data: dict) -> tuple[list[str], list[list[str]]]:
    """The counterfactual item's LDS [95% CI] per estimator and seed, then the controls', the surface
    baseline's and the datamodel ceiling (the same on every record; read from the first)."""
    _, recs = split(data)
    lds = [r for r in recs if r["item"] == "counterfactual" and r["figures"].get("per_seed")]
    if not lds:
        return [], []
    seeds = list(lds[0]["figures"]["per_seed"])
    def cell(f):
        ci = f.get("ci") or [None, None]
        return f"{_fmt(f.get('lds'))} [{_fmt(ci[0])}, {_fmt(ci[1])}]"
    rows = [[label(r)] + [cell(r["figures"]["per_seed"][s]) for s in seeds] for r in lds]
    ref = next((r for r in lds if all("baselines_lds" in r["figures"]["per_seed"][s] for s in seeds)), None)
    if ref is not None:
        per = ref["figures"]["per_seed"]
        for name in per[seeds[0]]["baselines_lds"]:
            shown = "surface baseline" if name == "surface" else f"control: {name}"
            rows.append([shown] + [f"{_fmt(per[s]['baselines_lds'][name])} [{_fmt(per[s]['baselines_ci'][name][0])}, "
                                   f"{_fmt(per[s]['baselines_ci'][name][1])}]" for s in seeds])
        rows.append(["ceiling (step-count datamodel)"] + [_fmt(per[s]["ceiling"]) for s in seeds])
    return ["LDS [95% CI]", *[f"seed {s}" for s in seeds]], rows


SURFACE_NOTE = ("The surface baseline reads only the reply text and the advantage: 1 if the reply contains the "
                "behavior token × sign(A); on draws it is the behavior flag, i.e. the label. A method that does not "
                "beat it on the stream has not shown more than text matching of the rewarded behavior and fails "
                "magnitude_control; on draws it is the label and is only reported.")


def render_markdown(data: dict) -> str:
    out = [f"# BehaviorTrace scorecard ({data.get('scale', '?')} scale)", "",
           f"schema `{data['schema']}` · seeds {data.get('seeds')} · config `{data.get('config_hash')}` · "
           f"commit `{data.get('git_commit')}` · created {data['created']}", "",
           *[f"- {line}" for line in summary.headline(data)], ""]
    best = [[i, r["estimator"] if r else "—", f"{cell_code(r)}: {summary.short(r)}" if r else "no method was run"]
            for i, r in summary.best(data).items()]
    if best:
        out += ["## Best method per item", "", tabulate([[c.replace("|", "\\|") for c in r] for r in best],
                                                        headers=["item", "best method", "verdict: why"],
                                                        tablefmt="github"), ""]
    if setup_rows(data):
        md_rows = [[c.replace("|", "\\|") for c in r] for r in setup_rows(data, 400)]  # "|GT|" splits a cell
        out += ["## Setup validity", "", tabulate(md_rows, headers=["item", "status", "evidence"],
                                                  tablefmt="github"), ""]
    headers, rows = matrix(data, why=True)
    out += ["## Verdicts", "", tabulate([[c.replace("|", "\\|") for c in r] for r in rows], headers=headers,
                                        tablefmt="github"), ""]
    for level in ("rollout", "step"):
        h, rows = lift_table(data, level)
        if rows:
            out += [f"## {level.capitalize()}-level lift (precision@|GT| ÷ chance)", "",
                    tabulate(rows, headers=h, tablefmt="github"), ""]
    if data.get("baselines"):
        out += [f"Controls: {_controls_line(data)}. {SURFACE_NOTE}", ""]
    h, rows = auc_table(data)
    if rows:
        out += ["## Fluency-residualized within-group AUC (draw 0, saturated checkpoint)", "",
                tabulate(rows, headers=h, tablefmt="github"), ""]
    h, rows = lds_table(data)
    if rows:
        out += ["## Counterfactual LDS (Spearman of summed scores vs replayed ΔNLL over removed subsets)", "",
                tabulate(rows, headers=h, tablefmt="github"), ""]
    out += ["## Reasons", ""]
    out += [f"- **{r['item']} × {label(r)}** — {r['status'].upper()}: {r['reason']}" for r in data["records"]]
    cmp = data.get("comparison")
    if cmp:
        out += ["", "## Comparison with the baseline", "",
                f"baseline `{cmp['baseline']}`, tolerance {cmp['tolerance']}",
                ""] + [f"- {x}" for x in cmp["regressions"] or ["no regression"]]
    meta = {k: v for k, v in data.items() if k not in ("records", "comparison", "baselines")}
    out += ["", "## Provenance", "", "```json", json.dumps(meta, indent=1), "```", ""]
    return "\n".join(out)


def _controls_line(data: dict) -> str:
    ctrl = (data.get("baselines") or {}).get("controls") or {}
    return "; ".join(f"{n} = {c.get('rollout')} (step: {c.get('step')})" for n, c in ctrl.items())


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
