"""PNG figures of a scorecard (matplotlib, headless), drawn from the scorecard JSON only, knowing no
item.

Each figure comes with a title and a caption that says what it shows and how to read it (`Figure`):

* ``margin_<item>.png`` — per estimator item whose records carry a `margin`: each estimator's margin
  over its deciding control per seed, with its CI and the bar (`margins.py`);
* ``<key>.png`` — every "dots" panel the items' presentations hold (`present`): one category per row
  (an estimator, a control, a target kind), one marker per seed with its CI, hollow markers for
  extra values (other draws), the reference lines the panel names, band rows on a grey background;
* ``ladder.png`` — when two or more rungs of the ladder were judged (`ladder.py`): cost against
  the share of the ideal, in the LDS section.
"""

from __future__ import annotations

import re
from pathlib import Path

from bt_core.reporting import present, summary
from bt_core.reporting.ladder import ladder_figure
from bt_core.reporting.margins import margin_figures
from bt_core.reporting.plotting import Figure, plt, save, seed_legend, seed_style, seeds_of

LINES = {
    "dashed": {"color": "black", "lw": 0.8, "ls": "--"},
    "thin": {"color": "grey", "lw": 0.5},
    "dotted": {"lw": 0.8, "ls": ":"},
}


def _seeds(data: dict, rows: list[dict]) -> list[str]:
    found = [s for r in rows for per in r.get("values") or [] for s in per]
    return seeds_of(data) or list(dict.fromkeys(found))


def _draw_axis(
    ax, k: int, spec: dict, rows: list[dict], seeds: list[str], horizontal: bool
) -> None:
    """Subplot `k` of a dots panel: each row's markers (CI whiskers), hollow extras, lines, band."""
    step = min(0.14, 0.6 / max(len(seeds), 1))
    for i, r in enumerate(rows):
        vals = r["values"][k] if len(r.get("values") or []) > k else {}
        extra = r["extra"][k] if len(r.get("extra") or []) > k else {}
        if r.get("band"):
            (ax.axhspan if horizontal else ax.axvspan)(
                i - 0.5, i + 0.5, color="0.9", zorder=0, lw=0
            )
        for j, s in enumerate(seeds):
            st, at = seed_style(seeds, s), i + (j - (len(seeds) - 1) / 2) * step
            v, lo, hi = (list(vals.get(s) or []) + [None] * 3)[:3]
            if isinstance(v, (int, float)) and v == v:
                err = [[v - lo], [hi - v]] if lo is not None and hi is not None else None
                xy, kw = ((v, at), {"xerr": err}) if horizontal else ((at, v), {"yerr": err})
                ax.errorbar(
                    *xy, **kw, fmt=st["marker"], color=st["color"], ms=4, capsize=2, zorder=3
                )
            more = [x for x in extra.get(s) or [] if isinstance(x, (int, float))]
            pos = [(x, at) for x in more] if horizontal else [(at, x) for x in more]
            if pos:
                ax.scatter(
                    *zip(*pos, strict=True),
                    s=12,
                    facecolors="none",
                    edgecolors=st["color"],
                    zorder=3,
                )
    for ln in spec.get("lines") or []:
        if ln.get("at") is None:
            continue
        style = dict(LINES.get(ln.get("style"), LINES["dashed"]))
        if ln.get("seed") is not None:
            style["color"] = seed_style(seeds, str(ln["seed"]))["color"]
        (ax.axvline if horizontal else ax.axhline)(ln["at"], zorder=1, **style)
    labels = [summary.clip(r["label"], 22) for r in rows]
    if horizontal:
        ax.set_yticks(range(len(rows)), labels, fontsize=8)
        ax.set_ylim(len(rows) - 0.5, -0.5)
        ax.set_xlabel(spec.get("label", ""))
    else:
        # turned when the labels would not fit side by side (about 48 characters of 8-pt text
        # across one panel): four "… (control)" labels collided upright
        crowded = len(rows) > 4 or sum(len(x) for x in labels) > 48
        turn = {"rotation": 35, "ha": "right"} if crowded else {}
        ax.set_xticks(range(len(rows)), labels, fontsize=8, **turn)
        ax.set_xlim(-0.5, len(rows) - 0.5)
        ax.set_ylabel(spec.get("label", ""))
    if spec.get("title"):
        ax.set_title(spec["title"], fontsize=10)


def dots_figure(panel: dict, seeds: list[str], out: Path) -> Figure | None:
    """A merged dots panel (`present.collect`) as a PNG, or None when it has no row."""
    rows = [*panel["rows"], *panel["shared_rows"]]
    axes_spec = panel.get("axes") or [{}]
    if not rows:
        return None
    n, horizontal = len(axes_spec), bool(panel.get("horizontal"))
    size = (
        (8.0 * n, 0.34 * len(rows) + 1.4)
        if horizontal
        else (min(14.0, max(6.5, (0.6 * len(rows) + 2.0) * n)), 4.4)
    )
    p = plt()
    fig, axes = p.subplots(1, n, figsize=size, squeeze=False)
    for k, (ax, spec) in enumerate(zip(axes[0], axes_spec, strict=True)):
        _draw_axis(ax, k, spec, rows, seeds, horizontal)
        band = [i for i, r in enumerate(rows) if r.get("band")]
        if panel.get("band_label") and band and not horizontal:
            ax.text(
                band[0] - 0.4,
                ax.get_ylim()[1],
                panel["band_label"],
                va="top",
                fontsize=8,
                color="0.3",
            )
    seed_legend(axes[-1][-1], seeds)
    fig.tight_layout()
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", panel["key"])
    return Figure(
        save(fig, out / f"{name}.png"), panel["section"], panel["title"], panel.get("caption", "")
    )


def render(data: dict, out: Path) -> list[Figure]:
    """Write every figure the scorecard has data for into `out`; returns them in page order."""
    out.mkdir(parents=True, exist_ok=True)
    figs = list(margin_figures(data, out))
    for sec in present.collect(data):
        for panel in sec.of("dots"):
            figs.append(dots_figure(panel, _seeds(data, panel["rows"]), out))
    figs.append(ladder_figure(data, out))
    return [f for f in figs if f is not None]
