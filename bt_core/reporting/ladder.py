"""The ladder's figure (issue 62, `docs/ladder.md`): cost on a log x axis, the causal LDS as a share
of the ideal's on y, one marker per estimator and seed: the rungs (R0 … R4(k) and `metagrad`, R5)
by colour, every other estimator in grey with its name.

One drawing (`plot`) for both places it appears:

* the scorecard page, whenever two or more rungs were judged (`ladder_figure`): the cost is the
  checklist's own timer on the seed's stream problem (wall seconds of `score`, as the user's
  session scored it: sandboxed or not, the first problem of a process paying torch's first calls);
* `benchmarks/bench_ladder.py`, where the cost is CPU seconds on one core in a fresh process.

It reads the scorecard JSON only: a rung is known by its spec (`metagrad`, or a `rung` parameter).
"""

from __future__ import annotations

from pathlib import Path

from bt_core.reporting.plotting import Figure, plt, save, seed_style

IDEAL = "metagrad"
ITEM = "counterfactual"  # the item whose per-seed figures hold the LDS and its share of the ideal


def rung_label(name: str, params: dict | None) -> str | None:
    """The rung an estimator is ("R0" … "R4(k)", "R5 (metagrad)"), or None for any other."""
    if name == IDEAL:
        return "R5 (metagrad)"
    rung = (params or {}).get("rung")
    if not isinstance(rung, str):
        return None
    return f"{rung}({params.get('k')})" if rung == "R4" else rung


def plot(
    rows: list[dict],
    path: Path,
    title: str,
    xlabel: str,
    vline: tuple[float, str] | None = None,
) -> Path:
    """`rows`: [{"label", "rung" (bool), "points": {seed: (cost, share)}, "hollow": seeds (optional:
    points whose cost was not measured, drawn hollow at a stand-in cost)}]; rungs in colour (one
    per rung, in the legend), others grey and named beside their lowest point; `vline` an (x,
    text) reference line (the float64 replay's cost in the benchmark)."""
    pyplot = plt()
    fig, ax = pyplot.subplots(figsize=(8.5, 4.6))
    drawn = [  # a point needs a positive cost (log axis) and a share
        {
            str(s): xy
            for s, xy in r["points"].items()
            if xy[1] is not None and xy[0] is not None and xy[0] == xy[0] and xy[0] > 0
        }
        for r in rows
    ]
    seeds = sorted({s for pts in drawn for s in pts}, key=lambda s: (len(s), s))
    for j, (r, pts) in enumerate(zip(rows, drawn, strict=True)):
        colour = f"C{j % 10}" if r["rung"] else "0.55"
        for s, (x, y) in pts.items():
            hollow = s in {str(h) for h in r.get("hollow") or ()}
            ax.scatter(
                x,
                y,
                s=30 if r["rung"] else 18,
                marker=seed_style(seeds, s)["marker"],
                facecolors="none" if hollow else colour,
                edgecolors=colour,
                alpha=0.9,
            )
        if r["rung"]:  # the rungs by colour in the legend, the others named beside them
            ax.scatter([], [], color=f"C{j % 10}", marker="s", s=22, label=r["label"])
        elif pts:
            x, y = min(pts.values(), key=lambda xy: xy[1])
            ax.annotate(
                r["label"], (x, y), fontsize=7, xytext=(4, -9), textcoords="offset points",
                color="0.4",
            )  # fmt: skip
    if vline is not None:
        ax.axvline(vline[0], color="0.3", ls="--", lw=0.8)
        ax.annotate(
            vline[1],
            (vline[0], 0.02),
            fontsize=7,
            rotation=90,
            xytext=(3, 0),
            textcoords="offset points",
            color="0.3",
        )
    ax.axhline(1.0, color="0.7", lw=0.6)
    ax.axhline(0.0, color="0.7", lw=0.6)
    ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("causal LDS as a share of the ideal's")
    ax.set_ylim(min(-0.05, ax.get_ylim()[0]), 1.08)
    ax.set_title(title, fontsize=9)
    for s in seeds:
        ax.scatter([], [], color="0.3", marker=seed_style(seeds, s)["marker"], label=f"seed {s}")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    fig.tight_layout()
    return save(fig, path)


def _stream_seconds(timing: dict, seed: str) -> float | None:
    """The seed's stream problem's seconds from the scorecard's `scoring_time` entry."""
    for key, p in (timing.get("per_problem") or {}).items():
        if str(p.get("seed")) == seed and "/stream/" in key:
            return p.get("seconds")
    return None


def rows_of(data: dict) -> list[dict]:
    """The page's rows: every estimator with per-seed shares of the ideal on `ITEM`, rungs first
    in ladder order; each point (stream scoring seconds, share)."""
    recs = {r["estimator"]: r for r in data.get("records") or [] if r.get("item") == ITEM}
    times = data.get("scoring_time") or {}
    rows = []
    for name, rec in recs.items():
        spec = rec.get("estimator_spec") or {}
        label = rung_label(name, spec.get("params"))
        pts = {}
        for s, f in ((rec.get("figures") or {}).get("per_seed") or {}).items():
            share = f.get("share") if isinstance(f, dict) else None
            if isinstance(share, (int, float)) and share == share:
                pts[str(s)] = (_stream_seconds(times.get(name) or {}, str(s)), share)
        if pts:
            rows.append({"label": label or name, "rung": label is not None, "points": pts})
    # "R0" < "R0c" < "R1" < … < "R4(k)" < "R5" as strings; the others after, as judged
    return sorted(rows, key=lambda r: (not r["rung"], r["label"] if r["rung"] else ""))


CAPTION = (
    "Each judged rung of the ladder (docs/ladder.md: R0 the gradient dot product at the "
    "checkpoints … R5 the exact ideal, metagrad) by colour, every other estimator in grey: its "
    "causal LDS as a share of the ideal's (counterfactual item, one marker per seed) against what "
    "scoring the seed's stream cost in this session (wall seconds of the checklist's own timer, "
    "log axis; the first problem of a scoring process also pays its first calls, so compare "
    "within a seed). Higher at the same cost is better; the benchmark bench_ladder.py measures "
    "the costs in CPU seconds on one core."
)


def ladder_figure(data: dict, out: Path) -> Figure | None:
    """The ladder on the scorecard page (the LDS section), when two or more rungs were judged."""
    rows = rows_of(data)
    if sum(r["rung"] for r in rows) < 2:
        return None
    path = plot(
        rows,
        out / "ladder.png",
        f"The ladder: cost against share of the ideal ({data.get('scale')} scale)",
        "scoring seconds per seed, the stream problem (the checklist's timer)",
    )
    return Figure(path, "lds", "From cheap to exact: the ladder", CAPTION)
