"""What every figure shares: the `Figure` record (path, page section, title, caption), the headless
matplotlib, and one colour and marker per seed so that a seed looks the same in every figure."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

MARKERS = "osD^vP*Xph"
DPI = 100


@dataclass(frozen=True)
class Figure:
    path: Path
    section: str  # where the page shows it: "margins", "lift", "auc", "lds", "setup"
    title: str
    caption: str  # what it shows and how to read it


def plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as pyplot

    return pyplot


def seed_style(seeds: list[str], s: str) -> dict:
    """The colour and marker of seed `s`: every figure draws a seed the same way."""
    i = seeds.index(s) if s in seeds else len(seeds)
    return {"color": f"C{i % 10}", "marker": MARKERS[i % len(MARKERS)]}


def seeds_of(data: dict) -> list[str]:
    return [str(s) for s in data.get("seeds") or []]


def seed_legend(ax, seeds: list[str], extra=(), above: bool = False) -> None:
    """The seeds' legend (plus `extra` handles), outside the axes: inside, wherever it went, it
    covered a marker on some scorecard (the LDS ceiling at 1.0, a seed's margin at the axis end).
    On the right, or in one row `above` the axes (where labels sit on the right)."""
    handles = [ax.scatter([], [], s=22, **seed_style(seeds, s), label=f"seed {s}") for s in seeds]
    handles += list(extra)
    where = (
        {"loc": "lower right", "bbox_to_anchor": (1.0, 1.02), "ncol": len(handles)}
        if above
        else {"loc": "upper left", "bbox_to_anchor": (1.01, 1.0)}
    )
    ax.legend(handles=handles, fontsize=7, borderaxespad=0.0, **where)


def save(fig, path: Path) -> Path:
    fig.savefig(path, dpi=DPI)
    plt().close(fig)
    return path
