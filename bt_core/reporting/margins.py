"""The margin figure of each estimator item, drawn from the records' `margin` (see
`scorecard.Verdict`) without knowing the item: one row per estimator (methods, then the built-in
controls, then validation estimators, each group on its own background), one marker per seed with
the CI of the margin, the bar, and the deciding control named beside each row.
"""

from __future__ import annotations

from pathlib import Path

from bt_core.reporting import summary
from bt_core.reporting.plotting import Figure, plt, save, seed_legend, seed_style, seeds_of

BANDS = {"control": ("0.90", None), "validation": ("#efe6f7", "///")}  # background, hatch per role


def _rows(data: dict, item: str) -> list[dict]:
    order = {n: i for i, (n, _) in enumerate(summary.estimators(data))}
    recs = [
        r
        for r in summary.estimator_records(data)
        if r["item"] == item and (r.get("margin") or {}).get("per_seed")
    ]
    return sorted(recs, key=lambda r: order.get(r["estimator"], 0))


def _deciding(rec: dict) -> str:
    """The deciding control of the record's worst seed (its lowest lower end)."""
    entries = [
        e
        for e in (rec["margin"].get("per_seed") or {}).values()
        if summary.lower_end(e) is not None
    ]
    if not entries:
        return "no comparison"
    return min(entries, key=summary.lower_end)["versus"] or "—"


def margin_figure(data: dict, item: str, out: Path) -> Figure | None:
    recs = _rows(data, item)
    if not recs:
        return None
    seeds = seeds_of(data) or list(recs[0]["margin"]["per_seed"])
    m0 = recs[0]["margin"]
    p = plt()
    fig, ax = p.subplots(figsize=(7.2, 0.42 * len(recs) + 1.5))
    for i, r in enumerate(recs):
        band = BANDS.get(summary.role(r))
        if band:
            ax.axhspan(
                i - 0.5,
                i + 0.5,
                fc=band[0],
                hatch=band[1],
                ec="#c9b3e0" if band[1] else band[0],
                lw=0.5,
                zorder=0,
            )
        held = r["status"] == "invalid-setup"
        for j, s in enumerate(seeds):
            e = r["margin"]["per_seed"].get(s) or {}
            v = e.get("value")
            if v is None or v != v:
                continue
            st, y = seed_style(seeds, s), i + (j - (len(seeds) - 1) / 2) * 0.18
            ci = e.get("ci")
            xerr = [[v - ci[0]], [ci[1] - v]] if ci and None not in ci else None
            ax.errorbar(
                v,
                y,
                xerr=xerr,
                fmt=st["marker"],
                color=st["color"],
                ms=5,
                capsize=2,
                elinewidth=1,
                mfc="white" if held else st["color"],
                zorder=3,
            )
        pooled = r["margin"].get("pooled")
        if pooled and pooled.get("value") is not None:
            ci = pooled.get("ci")
            ax.errorbar(
                pooled["value"],
                i,
                xerr=[[pooled["value"] - ci[0]], [ci[1] - pooled["value"]]]
                if ci and None not in ci
                else None,
                fmt="|",
                color="black",
                ms=14,
                capsize=4,
                lw=2,
                zorder=4,
            )
    bar = m0.get("bar", 0.0)
    ax.axvline(bar, color="black", lw=1, ls="--", zorder=2)
    ax.set_yticks(range(len(recs)), [_label(r) for r in recs], fontsize=8)
    ax.set_ylim(len(recs) - 0.5, -0.5)
    right = ax.secondary_yaxis("right")
    right.set_yticks(
        range(len(recs)), [f"vs {summary.clip(_deciding(r), 26)}" for r in recs], fontsize=7
    )
    right.tick_params(length=0)
    ax.set_xlabel(summary.clip(m0.get("figure", "margin"), 90), fontsize=8)
    # above the one-row legend (`seed_legend(..., above=True)`), not beside it: a long legend
    # reached over the title's start ("magnitude_c…" under the seeds' markers)
    ax.set_title(item, fontsize=10, loc="left", pad=20)
    held = ax.scatter(
        [],
        [],
        s=22,
        marker="o",
        facecolors="white",
        edgecolors="black",
        label="held back (invalid-setup)",
    )
    seed_legend(ax, seeds, [held], above=True)
    fig.tight_layout()
    return Figure(
        save(fig, out / f"margin_{item}.png"),
        "margins",
        f"{item}: margin over the deciding control",
        caption(item, m0),
    )


def _label(rec: dict) -> str:
    name = summary.clip(rec["estimator"], 18)
    return {"control": f"{name} (control)", "validation": f"{name} (validation)"}.get(
        summary.role(rec), name
    )


def caption(item: str, margin: dict) -> str:
    return (
        f"The margin: {margin.get('figure', 'the margin')}, per seed (colour and shape = seed), "
        "against the comparison that decides that seed — the one it loses to worst or beats "
        "least, named on the right for the worst seed. Whiskers: 95% CI. A seed clears the bar "
        f"(dashed, {margin.get('bar', 0.0):g}) when the whisker's left end — the marker, where "
        "there is no CI — lies right of it. Black bar: across-seed mean with its CI. Hollow: "
        "held back as invalid-setup (the rule's own figure). Grey rows: built-in controls; "
        "hatched violet: validation estimators that read the labels."
    )


MARGIN_INTRO = (
    "How to read these: one figure per item, one row per estimator. Right of the dashed line means "
    "the estimator beats the comparison that decides the item on that seed (a target-free control, "
    "the item's bar, or fluency itself); left means it loses to it — by that much. A method that "
    "passes has every seed's whisker clear of the line."
)


def margin_figures(data: dict, out: Path) -> list[Figure]:
    return [f for f in (margin_figure(data, i, out) for i in summary.items(data)) if f is not None]
