"""The fidelity table's reference column, read from the reference study's own per-seed results.

`reference/results_table.csv` is the reference's `data/results/results_table.csv`, vendored
unmodified (Apache-2.0; provenance in `reference/README.md`). Each finding's cell is computed here
from its rows with the reference's own rule for that finding — the same rule `benchmarks.fidelity`
applies to our scorecards — so the two columns say the same thing about the same quantity. Findings
the file does not hold (P3, P4, the causal check) are quoted from the paper's text and say so.
"""

from __future__ import annotations

import csv
from collections import defaultdict
from pathlib import Path

CSV = Path(__file__).resolve().parent / "reference" / "results_table.csv"
# the reference's step-level targeted methods for P1
STEP_TARGETED = ("C1-cosine", "TRAK", "TracInCP")
# the reference's P2 statement: every method within ~0.03 of chance in the window
P2_NEAR_CHANCE = 0.03
# its pre-registered rollout-level pass rule (+ beats norm-only)
GAS_BAR = {"ci_lower": 0.5, "ci_max_width": 0.15}

# Not in the CSV: the paper's text (PAPER_NOTES "Findings"), labelled as such in the table.
PAPER_TEXT = {
    "P3": "paper text: trigger and behavior rows covered by the whole-gradient CountSketch",
    "P4": (
        "paper text (not in results_table.csv): in-context +0.230, +0.114, +0.295 (CI lower > "
        "0.05) and constructed CI upper < 0.05 on 3 of 3 seeds"
    ),
    "causal": (
        "paper text (matched setup): leave-GT-out Δs_b +0.35, +0.15, +0.30; random removal 0.000"
    ),
    "LDS": "not measured by the reference",
}


def _rng(values: list[float], fmt: str = "{:.3g}") -> str:
    v = [x for x in values if x == x]
    if not v:
        return "—"
    lo, hi = min(v), max(v)
    return fmt.format(lo) if abs(hi - lo) < 5e-4 else f"{fmt.format(lo)}–{fmt.format(hi)}"


def load(path: Path = CSV) -> dict[str, dict[str, dict[str, dict]]]:
    """table → seed → method → row (value, lo, hi, chance, ceiling as floats; NaN where blank)."""
    out: dict = defaultdict(lambda: defaultdict(dict))
    with Path(path).open(newline="") as f:
        for r in csv.DictReader(f):
            out[r["table"]][r["seed"]][r["method"]] = {
                k: float(r[k]) if r[k] != "" else float("nan")
                for k in ("value", "lo", "hi", "chance", "ceiling")
            }
    return out


def p1(t: dict) -> str:
    """Step level over the whole run: norm-only's lift vs the best targeted method's, per seed."""
    norm, best, wins = [], [], 0
    for rows in t["overall"].values():
        chance = rows["norm-only"]["chance"]
        n = rows["norm-only"]["value"] / chance
        b = max(rows[m]["value"] / chance for m in STEP_TARGETED)
        norm.append(n), best.append(b)
        wins += n >= b
    return (
        f"norm-only {_rng(norm)}×; targeted (cosine, TRAK, TracInCP) {_rng(best)}×; norm-only ≥ "
        f"best targeted on {wins} of {len(norm)} seeds"
    )


def p2(t: dict) -> str:
    """Step level inside the trained window (nonzero early steps): ceiling − chance, methods −
    chance."""
    room, gaps, near = [], [], 0
    for rows in t["early_nonzero"].values():
        chance = rows["random"]["chance"]
        room.append(rows["random"]["ceiling"] - chance)
        g = [r["value"] - chance for r in rows.values()]
        gaps += g
        near += max(abs(x) for x in g) <= P2_NEAR_CHANCE
    return (
        f"ceiling − chance {_rng(room)}; methods' precision − chance {_rng(gaps)}; every method "
        f"within {P2_NEAR_CHANCE} of chance on {near} of {len(room)} seeds"
    )


def _rollout_tables(t: dict, kind: str) -> dict[str, dict]:
    """seed-or-draw → method → row of the raw or residualized minimal-pair tables (pre-registered +
    diag)."""
    out = dict(t.get(f"mp_{kind}", {}))
    out.update(t.get(f"mp_{kind}_diag", {}))
    return out


def p5(t: dict) -> str:
    """Raw within-group AUC: fluency at or above every gradient method, per seed/draw the file
    holds."""
    raw = _rollout_tables(t, "raw")
    at_or_above = sum(
        1
        for rows in raw.values()
        if all(rows["fluency"]["value"] >= r["value"] for m, r in rows.items() if m != "fluency")
    )
    fl = [rows["fluency"]["value"] for rows in raw.values()]
    gas = [rows["GAS_centered"]["value"] for rows in raw.values()]
    return (
        f"fluency AUC {_rng(fl)}, GAS centred raw {_rng(gas)}; fluency ≥ every gradient method on "
        f"{at_or_above} of {len(raw)} (seed 2 + 2 diagnostic draws; seeds 0/1 not in the file)"
    )


def p6(t: dict) -> str:
    """Residualized GAS group-centred AUC; how many rows fail the pre-registered rule."""
    res = _rollout_tables(t, "residualized")
    auc, fails = [], 0
    for rows in res.values():
        g = rows["GAS_centered"]
        auc.append(g["value"])
        ok = (
            g["lo"] > GAS_BAR["ci_lower"]
            and g["hi"] - g["lo"] <= GAS_BAR["ci_max_width"]
            and g["value"] > rows["norm_only"]["value"]
        )
        fails += not ok
    return (
        f"GAS centred residualized AUC {_rng(auc)}; the pre-registered rule fails on {fails} of "
        f"{len(res)} (paper text adds seeds 0/1: 0.486, 0.624)"
    )


def cells(path: Path = CSV) -> dict[str, str]:
    """finding → the reference column's text."""
    t = load(path)
    return {
        "P1": p1(t),
        "P2": p2(t),
        "P3": PAPER_TEXT["P3"],
        "P4": PAPER_TEXT["P4"],
        "P5": p5(t),
        "P6": p6(t),
        "causal": PAPER_TEXT["causal"],
        "LDS": PAPER_TEXT["LDS"],
    }
