"""The scorecard as one self-contained HTML page (no JavaScript, no download): a summary first, the
verdict grid coloured by status with each cell's one-line why and its full reason one click away (a
<details> that opens in place), the margin figures, then each section the items' presentations hold
(`present`: their figures with captions, their tables, the section's note), every reason and the
provenance. It renders whatever rows each item writes; it reads only the scorecard JSON.
"""

from __future__ import annotations

import base64
import json
from html import escape

from tabulate import tabulate

from bt_core.reporting import compare, present, summary
from bt_core.reporting.margins import MARGIN_INTRO

STATUS_CLASS = {
    "pass": "st-pass",
    "fail": "st-fail",
    "invalid-setup": "st-invalid",
    "error": "st-error",
    "declined": "st-error",
}
MARGINS = "Margins over the deciding control"
NOT_PROVENANCE = ("records", "comparison", "baselines", "presentation")  # shown elsewhere
# the page's own ids: an item's section of the same key gets "section-<key>" instead
RESERVED = {
    "summary",
    "best",
    "verdict-grid",
    "verdicts",
    "setup-validity",
    "setup",
    "margins",
    "reasons",
    "provenance",
}

CSS = """
:root{--pass:#1a7f37;--pass-bg:#dafbe1;--fail:#b42318;--fail-bg:#fee4e2;--inv:#8a6d00;--inv-bg:#fff4cc;
--err:#57606a;--err-bg:#eaeef2;--ink:#1f2328;--mute:#59636e;--line:#d0d7de;--val:#6e40aa;--val-bg:#f3ecfb}
*{box-sizing:border-box}body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;\
color:var(--ink);
margin:0;background:#f6f8fa}main{max-width:1320px;margin:0 auto;padding:20px 28px 60px}
h1{font-size:24px;margin:4px 0}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid \
var(--line);
padding-bottom:4px}h3{font-size:15px;margin:14px 0 6px}.meta{color:var(--mute);font-size:12px}
code{font-size:12px}section{background:#fff;border:1px solid var(--line);border-radius:8px;\
padding:14px 18px;
margin:14px 0}.cards{display:grid;grid-template-columns:1fr 1fr 2fr;gap:14px}
.card{border:1px solid var(--line);border-radius:8px;padding:10px 14px;background:#fff}
.card h3{margin-top:0}.big{font-size:26px;font-weight:600}
table{border-collapse:collapse;font-size:13px}td,th{border:1px solid var(--line);padding:4px 8px;
vertical-align:top;text-align:left}th{background:#f0f3f6}
.chip{display:inline-block;border-radius:10px;padding:0 8px;font-size:11px;font-weight:700;\
letter-spacing:.02em}
.chip.st-pass{background:var(--pass);color:#fff}.chip.st-fail{background:var(--fail);color:#fff}
.chip.st-invalid{background:var(--inv);color:#fff}.chip.st-error{background:var(--err);color:#fff}
td.st-pass{background:var(--pass-bg)}td.st-fail{background:var(--fail-bg)}td.st-invalid{background:var(--inv-bg)}
td.st-error{background:var(--err-bg)}
table.grid td.cell{width:170px;position:relative}table.grid .why{display:block;font-size:12px;\
color:#333}table.grid .view{display:block;font-size:11px;color:var(--mute);margin-top:2px}
.rulechip{display:inline-block;margin-left:4px;border-radius:10px;padding:0 6px;font-size:10px;\
font-weight:700;
border:1.5px solid var(--mute);color:var(--mute);background:#fff}\
.rulechip.st-pass{border-color:var(--pass);
color:var(--pass)}.rulechip.st-fail{border-color:var(--fail);color:var(--fail)}
details>summary{cursor:pointer;list-style:none}details>summary::-webkit-details-marker{display:none}
td.cell details[open]>.full{position:absolute;z-index:5;left:0;top:100%;width:560px;background:#fff;
border:1px solid #888;border-radius:6px;padding:10px 12px;box-shadow:0 6px 18px rgba(0,0,0,.18);\
font-size:12px}
.full ul{margin:4px 0 0 16px;padding:0}tr.group th{background:#e8ecf0;font-size:12px;\
text-transform:uppercase;
letter-spacing:.04em}tr.validation td.name{background:var(--val-bg);border-left:4px solid \
var(--val)}
tr.validation td{background-image:repeating-linear-gradient(135deg,transparent 0 8px,rgba(110,64,\
170,.07) 8px 10px)}
.badge{display:inline-block;font-size:10px;border-radius:4px;padding:0 5px;margin-left:4px;\
border:1px solid}
.badge.val{color:var(--val);border-color:var(--val)}.badge.ctl{color:var(--mute);border-color:var(--mute)}
.badge.ext{color:#0550ae;border-color:#0550ae}
.alert{border-left:4px solid var(--fail);background:var(--fail-bg);padding:6px 10px;margin:6px 0;\
border-radius:4px}
.figs{display:grid;grid-template-columns:1fr 1fr;gap:14px}figure{margin:0;background:#fff;\
border:1px solid var(--line);
border-radius:8px;padding:8px}figure img{width:100%}figcaption{font-size:12px;color:#333;\
margin-top:4px}
figcaption b{display:block;font-size:13px;color:var(--ink)}figure.wide{grid-column:1 / -1}
.tables{display:flex;flex-wrap:wrap;gap:18px}.legend span{margin-right:14px}
"""


def _chip(status: str, text: str | None = None) -> str:
    return (
        f'<span class="chip {STATUS_CLASS.get(status, "")}">{escape(text or status.upper())}</span>'
    )


def _reason_html(reason: str) -> str:
    """A long reason as a list: one entry per seed ("seed N: …") where it quotes seeds."""
    head, parts = summary.reason_parts(reason)
    if not parts:
        return f"<p>{escape(reason)}</p>"
    return f"<p>{escape(head)}</p><ul>" + "".join(f"<li>{escape(p)}</li>" for p in parts) + "</ul>"


def _origin_label(origin: str) -> str:
    """The badge of an estimator that is not built in, from its origin
    (`bt_core.attribution.registry.EstimatorSpec.origin`): a library the suite wraps is an adapter
    (the suite's code around someone else's method), a distribution's entry point or a module path
    is the user's own plug-in."""
    kind, _, where = origin.partition(":")
    if kind == "adapter":
        return f"adapter · {where}"
    if kind == "plugin":
        return f"plug-in · {where}"
    return "plug-in"


def _badges(rec: dict) -> str:
    spec, role = rec.get("estimator_spec") or {}, summary.role(rec)
    out = ""
    if role == "validation":
        out += '<span class="badge val">validation only · reads labels</span>'
    elif role == "control":
        out += '<span class="badge ctl">control</span>'
    origin = str(spec.get("origin", "builtin"))
    if origin != "builtin":
        out += f'<span class="badge ext" title="{escape(origin)}">{escape(_origin_label(origin))}</span>'
    if spec.get("unsandboxed"):  # scored in a plain subprocess (docs/sandbox.md)
        why = escape(str((spec.get("scoring") or {}).get("why", "")))
        out += f'<span class="badge val" title="{why}">unsandboxed</span>'
    return out


def _cell(rec: dict | None) -> str:
    """A grid cell: coloured by status, the status chip (and, where a gate or a refusal overrode it,
    what the item's rule gives), the one-line why; a click opens the full reason in place."""
    if rec is None:
        return "<td>—</td>"
    st, rule = rec["status"], summary.rule_status(rec)
    gate = (rec.get("figures") or {}).get("gated_by")
    ruled = (
        f'<span class="rulechip {STATUS_CLASS.get(rule, "")}">rule {escape(rule.upper())}</span>'
        if rule
        else ""
    )
    held = (
        f"<p><i>Held back by the failed setup item(s) {escape(', '.join(gate))}.</i></p>"
        if gate
        else ""
    )
    title = escape(summary.clip(rec.get("reason", ""), 600), quote=True)
    return (
        f'<td class="cell {STATUS_CLASS.get(st, "")}" '
        f'title="{title}"><details><summary>{_chip(st)}{ruled}'
        f'<span class="why">{escape(summary.short(rec))}</span>{_other_views(rec)}</summary>'
        '<div class="full">'
        f"<b>{escape(rec['item'])} × {escape(rec['estimator'])}</b> — {escape(st.upper())}{held}"
        f"{_reason_html(rec.get('reason', ''))}</div></details></td>"
    )


def _other_views(rec: dict) -> str:
    """The record's other views' statuses, beside its verdict (they never gate)."""
    return "".join(
        f'<span class="view">{escape(w)} view <span class="rulechip {STATUS_CLASS.get(st, "")}">'
        f"{escape(st.upper())}</span></span>"
        for w, st in summary.other_views(rec)
    )


def verdict_grid(data: dict) -> str:
    g, its = summary.grid(data), summary.items(data)
    head = (
        "<tr><th>estimator</th>"
        + "".join(
            f"<th>{escape(i)}<br><span class=meta>{escape(summary.item_view(data, i))} view"
            "</span></th>"
            if summary.item_view(data, i)
            else f"<th>{escape(i)}</th>"
            for i in its
        )
        + "</tr>"
    )
    rows, last = [], None
    for name, role in summary.estimators(data):
        if role != last:
            rows.append(
                '<tr class="group"><th '
                f'colspan="{len(its) + 1}">{escape(summary.ROLE_TITLES.get(role, role))}</th></tr>'
            )
            last = role
        first = next(g[(name, i)] for i in its if (name, i) in g)
        rows.append(
            (
                f'<tr class="{escape(role)}" data-estimator="{escape(name)}"><td '
                f'class="name"><b>{escape(name)}</b>{_badges(first)}</td>'
            )
            + "".join(_cell(g.get((name, i))) for i in its)
            + "</tr>"
        )
    legend = (
        '<p class="legend">'
        + _chip("pass")
        + " holds on every seed "
        + _chip("fail")
        + " fails (the why names the comparison it loses: a control, a bar, or chance) "
        + _chip("invalid-setup")
        + " not judged: a failed setup gate or unusable evidence held it back "
        + _chip("error")
        + "/"
        + _chip("declined")
        + (
            " not judged: the estimator raised, returned scores that cannot be ranked, or declined "
            'the problem; <span class="rulechip">rule '
            "…</span> is what the item's own rule gives. Hover a cell for its reason, click it to "
            "open it in "
            "full.</p>"
        )
    )
    return f'<table class="grid" id="verdicts">{head}{"".join(rows)}</table>{legend}'


def summary_section(data: dict) -> str:
    setup, held, counts = (
        summary.setup_records(data),
        summary.gated(data),
        summary.judged_counts(data),
    )
    n_rec = len(summary.estimator_records(data))
    ok = sum(r["status"] == "pass" for r in setup)
    gates = "".join(
        (
            f"<li>{_chip(r['status'], 'HELD' if r['status'] == 'pass' else 'FAILED')} "
            f"<b>{escape(r['item'])}</b><br><span "
            f"class=meta>{escape(summary.short(r, 70))}</span></li>"
        )
        for r in setup
    )
    alerts = "".join(
        (
            f'<div class="alert"><b>{escape(r["item"])} failed</b>: it held back '
            f"{held.get(r['item'], 0)} of {n_rec} estimator verdicts as invalid-setup. "
            f"{escape(summary.short(r, 200))}</div>"
        )
        for r in setup
        if r["status"] != "pass"
    )
    best = "".join(
        f"<tr><td>{escape(i)}</td><td>{escape(r['estimator']) if r else '—'}</td>"
        + (
            (
                f"<td class='{STATUS_CLASS[r['status']]}'>{_chip(r['status'])} "
                f"{escape(summary.short(r))}</td>"
            )
            if r
            else "<td>no method was run</td>"
        )
        + "</tr>"
        for i, r in summary.best(data).items()
    )
    return (
        f'<section id="summary"><h2>At a glance</h2>{alerts}<div class="cards">'
        f'<div class="card"><h3>Setup gates</h3><div class="big">{ok} of {len(setup)} held</div>'
        f'<ul style="padding-left:0;list-style:none">{gates}</ul></div>'
        '<div class="card"><h3>Estimators judged</h3><div '
        f'class="big">{counts["judged_everywhere"]} of '
        f"{counts['estimators']}</div><p>judged (pass or fail) on every item — "
        f"<b>{summary.methods_judged(counts)}</b>; {counts['held_back']} not judged on at "
        f"least one. Verdicts: {summary.verdict_counts(counts)}. "
        f"{summary.plural(counts['method'], 'method')}, "
        f"{summary.plural(counts['control'], 'built-in control')}, "
        f"{summary.plural(counts['validation'], 'validation estimator')}.</p></div>"
        f'<div class="card"><h3>Best method per item</h3><table id="best">'
        f"<tr><th>item</th><th>method</th><th>verdict</th></tr>{best}</table>"
        "<p class=meta>A pass ranks first, then the highest worst-seed margin; controls and "
        "validation "
        "estimators are not methods.</p></div></div></section>"
    )


def _setup_table(data: dict) -> str:
    held = summary.gated(data)
    rows = "".join(
        f"<tr><td><b>{escape(r['item'])}</b></td>{_cell(r)}<td>{held.get(r['item'], 0)}</td></tr>"
        for r in summary.setup_records(data)
    )
    return (
        '<table class="grid" id="setup" style="width:100%"><tr><th>setup item</th>'
        f"<th>verdict (click for the evidence)</th><th>verdicts held back</th></tr>{rows}</table>"
    )


def _table(panel: dict) -> str:
    rows = [[escape(str(c)) for c in row] for row in present.table_rows(panel)]
    html = tabulate(rows, headers=[escape(c) for c in panel["columns"]], tablefmt="unsafehtml")
    return (
        f"<div><h3>{escape(panel['title'])}</h3>"
        + html.replace("<table>", f'<table id="table-{escape(panel["key"])}">', 1)
        + "</div>"
    )


def _figures(figs, section: str, grid: bool = True, wide: frozenset = frozenset()) -> str:
    out = []
    for f in (x for x in figs if x.section == section):
        b64 = base64.b64encode(f.path.read_bytes()).decode()
        cls = ' class="wide"' if f.path.stem in wide else ""
        out.append(
            f'<figure{cls} id="fig-{escape(f.path.stem)}"><img alt="{escape(f.title)}" '
            f'src="data:image/png;base64,{b64}"><figcaption><b>{escape(f.title)}</b>{escape(f.caption)}'
            "</figcaption></figure>"
        )
    return (f'<div class="figs">{"".join(out)}</div>' if grid else "".join(out)) if out else ""


def item_section(sec: present.Section, figures: list) -> str:
    """One section of the items' presentations: a lone narrow figure beside the tables; else the
    figures (wide ones across the page), then the tables side by side; then the section's note."""
    wide = frozenset(p["key"] for p in sec.of("dots") if p.get("wide"))
    tables = "".join(_table(p) for p in sec.of("table"))
    note = f"<p class=meta>{escape(sec.note)}</p>" if sec.note else ""
    if len(sec.of("dots")) == 1 and not wide and tables:
        body = (
            f'<div class="figs">{_figures(figures, sec.key, grid=False)}<div>{tables}</div></div>'
        )
    else:
        body = _figures(figures, sec.key, wide=wide)
        body += f'<div class="tables">{tables}</div>' if tables else ""
    sid = f"section-{sec.key}" if sec.key in RESERVED else sec.key
    return f'<section id="{escape(sid)}"><h2>{escape(sec.title)}</h2>{body}{note}</section>'


def render_html(data: dict, figures: list) -> str:
    """One self-contained page; `figures` are `figures.Figure`s (embedded as data URIs)."""
    sections = present.collect(data)
    setup_sec = next((s for s in sections if s.key == present.SETUP_SECTION), None)
    body = [
        (
            f"<h1>BehaviorTrace scorecard <span class=meta>({escape(str(data.get('scale')))} "
            "scale)</span></h1>"
        ),
        (
            f"<p class=meta>seeds {escape(str(data.get('seeds')))} · config "
            f"<code>{escape(str(data.get('config_hash')))}</code> · commit "
            f"<code>{escape(str(data.get('git_commit')))}</code> · "
            f"{escape(str(data.get('created')))}</p>"
        ),
        summary_section(data),
        f'<section id="verdict-grid"><h2>Verdicts</h2>{verdict_grid(data)}</section>',
    ]
    if summary.setup_records(data):
        tables = "".join(_table(p) for p in setup_sec.of("table")) if setup_sec else ""
        figs = _figures(figures, present.SETUP_SECTION, grid=False)
        body.append(
            f'<section id="setup-validity"><h2>Setup validity</h2><div class="figs"><div>'
            f"{_setup_table(data)}</div>{figs}</div>{tables}</section>"
        )
    body.append(
        f'<section id="margins"><h2>{MARGINS}</h2><p>{escape(MARGIN_INTRO)}</p>'
        f"{_figures(figures, 'margins')}</section>"
    )
    body += [item_section(s, figures) for s in sections if s is not setup_sec]
    if present.predates(data):
        body.append(f'<section id="presentations"><p>{escape(present.OLD_SCORECARD)}</p></section>')
    body.append(_reasons(data))
    meta = {k: v for k, v in data.items() if k not in NOT_PROVENANCE}
    body.append(
        '<section id="provenance"><h2>Provenance</h2><details><summary>scale, seeds, config '
        "hash, artifact keys, versions "
        f"(click)</summary><pre>{escape(json.dumps(meta, indent=1))}</pre></details></section>"
    )
    return (
        "<!doctype html><html lang=en><head><meta charset='utf-8'><title>BehaviorTrace "
        f"scorecard</title><style>{CSS}</style></head><body><main>{''.join(body)}</main></body></html>"
    )


def _reasons(data: dict) -> str:
    groups = {}
    for r in data["records"]:
        groups.setdefault(r["estimator"], []).append(r)
    out = "".join(
        f"<details><summary><b>{escape(name)}</b> ({len(recs)} records)</summary><ul>"
        + "".join(
            (
                f"<li>{_chip(r['status'])} "
                f"<b>{escape(r['item'])}</b>{_reason_html(r.get('reason', ''))}</li>"
            )
            for r in recs
        )
        + "</ul></details>"
        for name, recs in groups.items()
    )
    cmp = data.get("comparison")
    if cmp:
        out += (
            (
                "<h3>Comparison with the baseline</h3><p>baseline "
                f"<code>{escape(str(cmp['baseline']))}</code>, tolerance "
                f"{cmp['tolerance']}</p><ul>"
            )
            + "".join(f"<li>{escape(x)}</li>" for x in compare.listed(cmp))
            + "</ul>"
        )
    return f'<section id="reasons"><h2>Every reason in full</h2>{out}</section>'
