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


def matrix(data: dict) -> tuple[list[str], list[list[str]]]:
    """Rows = estimators (with their role), columns = estimator items; cells = status."""
    _, recs = split(data)
    items = list(dict.fromkeys(r["item"] for r in recs))
    names = {r["estimator"]: label(r) for r in recs}
    roles = {r["estimator"]: (r.get("estimator_spec") or {}).get("role", "—") for r in recs}
    cell = {(r["estimator"], r["item"]): status_cell(r) for r in recs}
    return ["estimator", "role", *items], [[names[e], roles[e]] + [cell.get((e, i), "—") for i in items]
                                           for e in names]


def render_terminal(data: dict) -> str:
    parts = []
    if setup_rows(data):
        parts.append(tabulate(setup_rows(data, 80), headers=["setup item", "status", "evidence"], tablefmt="simple"))
    headers, rows = matrix(data)
    if rows:
        parts.append(tabulate(rows, headers=headers, tablefmt="simple"))
    for level in ("rollout", "step"):
        h, rows = baseline_table(data, level)
        if rows:
            parts.append(tabulate(rows, headers=h, tablefmt="simple", disable_numparse=True))
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
    """The counterfactual item's LDS [95% CI] (share of the ceiling) per estimator and seed, then the
    controls', the surface baseline's and the ceiling (the same on every record; read from the first)."""
    _, recs = split(data)
    lds = [r for r in recs if r["item"] == "counterfactual" and r["figures"].get("per_seed")]
    if not lds:
        return [], []
    seeds = list(lds[0]["figures"]["per_seed"])
    def cell(f):
        ci = f.get("ci") or [None, None]
        sh = f.get("share")
        share = f" ({100 * sh:.0f}%)" if isinstance(sh, float) and sh == sh else ""  # of the ceiling
        return f"{_fmt(f.get('lds'))} [{_fmt(ci[0])}, {_fmt(ci[1])}]{share}"
    rows = [[label(r)] + [cell(r["figures"]["per_seed"][s]) for s in seeds] for r in lds]
    ref = next((r for r in lds if all("baselines_lds" in r["figures"]["per_seed"][s] for s in seeds)), None)
    if ref is not None:
        per = ref["figures"]["per_seed"]
        for name in per[seeds[0]]["baselines_lds"]:
            shown = "surface baseline" if name == "surface" else f"control: {name}"
            rows.append([shown] + [f"{_fmt(per[s]['baselines_lds'][name])} [{_fmt(per[s]['baselines_ci'][name][0])}, "
                                   f"{_fmt(per[s]['baselines_ci'][name][1])}]" for s in seeds])
        rows.append([f"ceiling ({per[seeds[0]].get('ceiling_features', 'step-count datamodel')})"]
                    + [_fmt(per[s]["ceiling"]) for s in seeds])
    return ["LDS [95% CI]", *[f"seed {s}" for s in seeds]], rows


SURFACE_NOTE = ("The surface baseline reads only the reply text and the advantage: 1 if the reply contains the "
                "behavior token × sign(A); on draws it is the behavior flag, i.e. the label. A method that does not "
                "beat it on the stream has not shown more than text matching of the rewarded behavior and fails "
                "magnitude_control; on draws it is the label and is only reported.")


def render_markdown(data: dict) -> str:
    out = [f"# BehaviorTrace scorecard ({data.get('scale', '?')} scale)", "",
           f"schema `{data['schema']}` · seeds {data.get('seeds')} · config `{data.get('config_hash')}` · "
           f"commit `{data.get('git_commit')}` · created {data['created']}", ""]
    if setup_rows(data):
        md_rows = [[c.replace("|", "\\|") for c in r] for r in setup_rows(data, 400)]  # "|GT|" splits a cell
        out += ["## Setup validity", "", tabulate(md_rows, headers=["item", "status", "evidence"],
                                                  tablefmt="github"), ""]
    headers, rows = matrix(data)
    out += ["## Verdicts", "", tabulate(rows, headers=headers, tablefmt="github"), ""]
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
    if data.get("baselines"):
        body.append(f"<p>Controls: {html.escape(_controls_line(data))}. {html.escape(SURFACE_NOTE)}</p>")
    h, rows = auc_table(data)
    if rows:
        body += ["<h2>Fluency-residualized within-group AUC</h2>", table(h, rows)]
    for f in figures:
        b64 = base64.b64encode(f.read_bytes()).decode()
        body.append(f'<figure><img alt="{f.stem}" src="data:image/png;base64,{b64}"><figcaption>{f.stem}'
                    "</figcaption></figure>")
    body += ["<h2>Reasons</h2><ul>"] + [
        f"<li><b>{html.escape(r['item'])} × {html.escape(label(r))}</b> — {r['status'].upper()}: "
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
