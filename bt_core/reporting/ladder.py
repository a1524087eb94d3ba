"""The ladder's figure (issue 62, `docs/ladder.md`): cost on a log x axis, the causal LDS as a share
of the ideal's on y, one marker per estimator and seed: the rungs (R0 … R4(k) and `metagrad`, R5)
by colour, every other estimator in grey with its name.

One drawing (`plot`) for both places it appears:

* the scorecard page, whenever two or more rungs were judged (`ladder_figure`): the cost is the
  checklist's own timer on the seed's rollout-level stream problem (wall seconds of `score`, as
  the user's session scored it: sandboxed or not, the first problem of a process paying torch's
  first calls);
* `benchmarks/bench_ladder.py`, where the cost is CPU seconds on one core in a fresh process.

It reads the scorecard JSON only and knows no item: the shares come from the items' `ladder` panels
(`present.ladder`; the counterfactual item writes them), the costs from the session's
`scoring_time`; a rung is known by its spec (`metagrad`, or a `ladder_*` with a `rung` setting).
"""

from __future__ import annotations

from pathlib import Path

from bt_core.reporting import present
from bt_core.reporting.plotting import Figure, plt, save, seed_style, seeds_of

IDEAL = "metagrad"


def rung_label(name: str, params: dict | None) -> str | None:
    """The rung a built-in estimator is ("R0" … "R4(k)", "R5 (metagrad)"), or None for any other
    (a plug-in with a `rung` setting of its own included)."""
    if name == IDEAL:
        return "R5 (metagrad)"
    rung = (params or {}).get("rung")
    if not name.startswith("ladder_") or not isinstance(rung, str):
        return None
    return f"{rung}({params.get('k')})" if rung == "R4" else rung


# one colour per rung in every ladder figure (the page's and the benchmark's)
COLOURS = {"R0": "C0", "R0c": "C1", "R1": "C2", "R2": "C3", "R3": "C4", "R4": "C5", "R5": "C6"}


def _colour(label: str) -> str:
    return COLOURS.get(label.split("(")[0].split(" ")[0], "C7")


def plot(
    rows: list[dict],
    path: Path,
    title: str,
    xlabel: str,
    vline: tuple[float, str] | None = None,
    seeds: list[str] | None = None,
) -> Path:
    """`rows`: [{"label", "rung" (bool), "points": {seed: (cost, share)}, "hollow": seeds (optional:
    points whose cost was not measured, drawn hollow at a stand-in cost)}]; rungs in colour (one
    per rung, in the legend), others grey and named beside their lowest point; `vline` an (x,
    text) reference line (the float64 replay's cost in the benchmark); `seeds` the session's, so
    that a seed keeps its marker of the page's other figures (default: the drawn points')."""
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
    found = sorted({s for pts in drawn for s in pts}, key=lambda s: (len(s), s))
    seeds = [str(s) for s in seeds] if seeds else found
    for r, pts in zip(rows, drawn, strict=True):
        colour = _colour(r["label"]) if r["rung"] else "0.55"
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
            ax.scatter([], [], color=colour, marker="s", s=22, label=r["label"])
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
    ax.margins(x=0.15)  # room for the grey names beside the rightmost points
    ax.set_xlabel(xlabel)
    ax.set_ylabel("causal LDS as a share of the ideal's")
    ax.set_ylim(min(-0.05, ax.get_ylim()[0]), 1.08)
    ax.set_title(title, fontsize=9)
    for s in (s for s in seeds if s in found):
        ax.scatter([], [], color="0.3", marker=seed_style(seeds, s)["marker"], label=f"seed {s}")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    fig.tight_layout()
    return save(fig, path)


def _stream_seconds(timing: dict, seed: str) -> float | None:
    """The seconds of the seed's rollout-level stream problem (what the rungs score; a method
    that also scores the step level pays that besides) from the scorecard's `scoring_time`."""
    for key, p in (timing.get("per_problem") or {}).items():
        if str(p.get("seed")) == seed and key.endswith("/stream/rollout"):
            return p.get("seconds")
    return None


def rows_of(data: dict) -> list[dict]:
    """The page's rows, from the items' ladder panels (`present.ladder`): every estimator with a
    share of the ideal per seed, rungs first in ladder order; each point (the rollout-level stream
    problem's scoring seconds, share)."""
    times = data.get("scoring_time") or {}
    rows = []
    for sec in present.collect(data):
        for panel in sec.of("ladder"):
            for r in panel["rows"]:
                label = rung_label(r["estimator"], r.get("params"))
                timing = times.get(r["estimator"]) or {}
                pts = {s: (_stream_seconds(timing, s), v) for s, v in r["values"].items()}
                rows.append({"label": label or r["estimator"], "rung": label is not None,
                             "points": pts, "panel": panel})  # fmt: skip
    # "R0" < "R0c" < "R1" < … < "R4(k)" < "R5" as strings; the others after, as judged
    return sorted(rows, key=lambda r: (not r["rung"], r["label"] if r["rung"] else ""))


def ladder_figure(data: dict, out: Path) -> Figure | None:
    """The ladder on the scorecard page (the LDS section), when two or more rungs were judged."""
    rows = rows_of(data)
    timed = [r for r in rows if r["rung"] and any((x or 0) > 0 for x, _ in r["points"].values())]
    if len(timed) < 2:  # two rungs to compare, each with a point the log axis can draw
        return None
    path = plot(
        rows,
        out / "ladder.png",
        f"The ladder: cost against share of the ideal ({data.get('scale')} scale)",
        "scoring seconds per seed, the rollout-level stream problem (the checklist's timer)",
        seeds=seeds_of(data),
    )
    panel = timed[0]["panel"]
    return Figure(path, panel["section"], panel["title"], panel["caption"])
