"""Renderings of a written scorecard JSON: terminal tables, Markdown, PNG figures, self-contained HTML.

Everything here reads the JSON dict only, so every rendering shows exactly what the scorecard says.
"""

from __future__ import annotations

import base64
import html
import json
from pathlib import Path
from typing import Any

from tabulate import tabulate

from bt_core.atomic import write_text_atomic
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


def matrix(data: dict) -> tuple[list[str], list[list[str]]]:
    """Rows = estimators, columns = estimator items; cells = status."""
    _, recs = split(data)
    items = list(dict.fromkeys(r["item"] for r in recs))
    ests = list(dict.fromkeys(r["estimator"] for r in recs))
    cell = {(r["estimator"], r["item"]): r["status"].upper() for r in recs}
    return ["estimator", *items], [[e] + [cell.get((e, i), "—") for i in items] for e in ests]


def render_terminal(data: dict) -> str:
    parts = []
    if setup_rows(data):
        parts.append(tabulate(setup_rows(data, 80), headers=["setup item", "status", "evidence"], tablefmt="simple"))
    headers, rows = matrix(data)
    if rows:
        parts.append(tabulate(rows, headers=headers, tablefmt="simple"))
    return "\n\n".join(parts)


def lift_table(data: dict, level: str) -> tuple[list[str], list[list[str]]]:
    """The reference's table: lift (precision@|GT| ÷ chance) per estimator and seed, plus chance and ceiling."""
    _, recs = split(data)
    mags = [r for r in recs if r["item"] == "magnitude_control" and r["figures"].get("per_seed")]
    if not mags:
        return [], []
    seeds = list(mags[0]["figures"]["per_seed"])
    def fig(r, s):
        f = r["figures"]["per_seed"].get(s, {})
        return f if level == "rollout" else f.get("step", {})
    rows = [[r["estimator"]] + [_fmt(fig(r, s).get("lift")) for s in seeds] for r in mags]
    first = mags[0]
    rows.append(["chance (precision)"] + [_fmt(fig(first, s).get("chance")) for s in seeds])
    rows.append(["ceiling (lift)"] + [_fmt(fig(first, s).get("ceiling_lift")) for s in seeds])
    return ["lift", *[f"seed {s}" for s in seeds]], rows


def auc_table(data: dict) -> tuple[list[str], list[list[str]]]:
    _, recs = split(data)
    flu = [r for r in recs if r["item"] == "fluency_control" and r["figures"].get("per_seed")]
    if not flu:
        return [], []
    seeds = list(flu[0]["figures"]["per_seed"])
    def cell(f):
        return f"{_fmt(f.get('auc'))} [{_fmt(f.get('ci_lo'))}, {_fmt(f.get('ci_hi'))}]"
    rows = [[r["estimator"]] + [cell(r["figures"]["per_seed"][s]) for s in seeds] for r in flu]
    return ["fluency-residualized AUC [95% CI]", *[f"seed {s}" for s in seeds]], rows


def render_markdown(data: dict) -> str:
    out = [f"# BehaviorTrace scorecard ({data.get('scale', '?')} scale)", "",
           f"schema `{data['schema']}` · seeds {data.get('seeds')} · config `{data.get('config_hash')}` · "
           f"commit `{data.get('git_commit')}` · created {data['created']}", ""]
    if setup_rows(data):
        out += ["## Setup validity", "", tabulate(setup_rows(data, 400), headers=["item", "status", "evidence"],
                                                  tablefmt="github"), ""]
    headers, rows = matrix(data)
    out += ["## Verdicts", "", tabulate(rows, headers=headers, tablefmt="github"), ""]
    for level in ("rollout", "step"):
        h, rows = lift_table(data, level)
        if rows:
            out += [f"## {level.capitalize()}-level lift (precision@|GT| ÷ chance)", "",
                    tabulate(rows, headers=h, tablefmt="github"), ""]
    h, rows = auc_table(data)
    if rows:
        out += ["## Fluency-residualized within-group AUC (draw 0, saturated checkpoint)", "",
                tabulate(rows, headers=h, tablefmt="github"), ""]
    out += ["## Reasons", ""]
    out += [f"- **{r['item']} × {r['estimator']}** — {r['status'].upper()}: {r['reason']}" for r in data["records"]]
    cmp = data.get("comparison")
    if cmp:
        out += ["", "## Comparison with the baseline", "",
                f"baseline `{cmp['baseline']}`, tolerance {cmp['tolerance']}",
                ""] + [f"- {x}" for x in cmp["regressions"] or ["no regression"]]
    meta = {k: v for k, v in data.items() if k not in ("records", "comparison")}
    out += ["", "## Provenance", "", "```json", json.dumps(meta, indent=1), "```", ""]
    return "\n".join(out)


def render_html(data: dict, figures: list[Path]) -> str:
    """One self-contained page: tables plus the PNG figures embedded as data URIs."""
    def table(headers, rows):
        return tabulate(rows, headers=headers, tablefmt="unsafehtml") if rows else ""
    body = [f"<h1>BehaviorTrace scorecard ({html.escape(str(data.get('scale')))} scale)</h1>",
            f"<p>seeds {data.get('seeds')} · config <code>{data.get('config_hash')}</code> · commit "
            f"<code>{data.get('git_commit')}</code> · {data['created']}</p>"]
    if setup_rows(data):
        body += ["<h2>Setup validity</h2>", table(["item", "status", "evidence"],
                                                 [[html.escape(c) for c in r] for r in setup_rows(data, 400)])]
    body += ["<h2>Verdicts</h2>", table(*matrix(data))]
    for level in ("rollout", "step"):
        h, rows = lift_table(data, level)
        if rows:
            body += [f"<h2>{level.capitalize()}-level lift</h2>", table(h, rows)]
    h, rows = auc_table(data)
    if rows:
        body += ["<h2>Fluency-residualized within-group AUC</h2>", table(h, rows)]
    for f in figures:
        b64 = base64.b64encode(f.read_bytes()).decode()
        body.append(f'<figure><img alt="{f.stem}" src="data:image/png;base64,{b64}"><figcaption>{f.stem}'
                    "</figcaption></figure>")
    body += ["<h2>Reasons</h2><ul>"] + [
        f"<li><b>{html.escape(r['item'])} × {html.escape(r['estimator'])}</b> — {r['status'].upper()}: "
        f"{html.escape(r['reason'])}</li>" for r in data["records"]] + ["</ul>"]
    style = ("body{font-family:sans-serif;max-width:1100px;margin:auto}table{border-collapse:collapse}"
             "td,th{border:1px solid #ccc;padding:3px 8px}img{max-width:100%}")
    return f"<!doctype html><html><head><meta charset='utf-8'><title>BehaviorTrace scorecard</title>" \
           f"<style>{style}</style></head><body>{''.join(body)}</body></html>"


def render_all(json_path: Path) -> dict[str, Path]:
    """Render Markdown, figures and HTML beside the scorecard JSON. Returns the written paths."""
    from bt_core.reporting import figures

    data = load(json_path)
    md = json_path.with_suffix(".md")
    write_text_atomic(md, render_markdown(data))
    figs = figures.render(data, json_path.with_name(json_path.stem + "_figures"))
    page = json_path.with_suffix(".html")
    write_text_atomic(page, render_html(data, figs))
    fig_dir = json_path.with_name(json_path.stem + "_figures")
    return {"json": json_path, "markdown": md, "html": page, "figures": fig_dir}
