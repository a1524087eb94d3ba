"""The fidelity table: one row per reference finding, the reference's figures beside what the suite
measured at each scale, read from scorecards only (nothing here recomputes a figure).

    python -m behaviortrace.benchmarks.fidelity default=scorecard.json [real=real/scorecard.json]
        [--plain-gas default=plain/scorecard.json] [--markdown OUT.md] [--agreement-figure OUT.png]

Each cell summarizes the scorecard's own figures over its seeds (ranges: min–max). A scorecard that
lacks an item (a scale run without the estimators a row needs) shows "—". With two or more
scorecards it also reports the verdict agreement: the share of (built-in estimator × estimator item)
verdicts on which the scales agree, over the pairs both scorecards hold (and draws it as a bar
figure with --agreement-figure).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from behaviortrace.benchmarks.fidelity_reference import P2_NEAR_CHANCE
from behaviortrace.benchmarks.fidelity_reference import cells as reference_cells
from tabulate import tabulate

from bt_core.attribution import catalog
from bt_core.reporting.scorecard import judged

# The reference column: its per-seed results file, read with each finding's rule
# (`fidelity_reference`)
REFERENCE = reference_cells()
TITLES = {
    "P1": "P1 magnitude (step level)",
    "P2": "P2 headroom (trained window, step level)",
    "P3": "P3 coverage",
    "P4": "P4 in-context targets",
    "P5": "P5 fluency",
    "P6": "P6 seed/draw instability",
    "causal": "causal check (leave-GT-out)",
    "LDS": "LDS against replayed retraining",
}
# built-in targeted methods
METHODS = ("cosine", "cosine_centred", "dot", "tracincp", "trak", "tracin_adam")
# the reference's P1 configuration: step-level GAS, TRAK, TracInCP
STEP_METHODS = ("cosine", "trak", "tracincp")
# the reference's rollout-level direction score: GAS group-centred, minimal-pair target
GAS = "cosine_centred"
# the built-ins whose verdicts the agreement counts: the methods above, the local buffer, and every
# built-in control and validation estimator, read from their classes' `role` (not metagrad: built
# only with replays)
ROLE_ORDER = ("control", "validation")
BUILTINS = (
    *METHODS,
    "local_buffer",
    *(
        s.name
        for r in ROLE_ORDER
        for s in catalog.available()
        if s.origin == "builtin" and s.role == r
    ),
)


def _rng(values) -> str:
    v = [x for x in values if isinstance(x, (int, float)) and x == x]
    if not v:
        return "—"
    lo, hi = min(v), max(v)
    return f"{lo:.3g}" if abs(hi - lo) < 5e-4 else f"{lo:.3g}–{hi:.3g}"


class Card:
    def __init__(self, path: Path):
        self.data = json.loads(Path(path).read_text())
        self.recs = {(r["estimator"], r["item"]): r for r in self.data["records"]}
        self.seeds = [str(s) for s in self.data.get("seeds", [])]

    def per_seed(self, est: str, item: str) -> dict:
        r = self.recs.get((est, item))
        return (r or {}).get("figures", {}).get("per_seed") or {}

    def status(self, est: str, item: str) -> str | None:
        r = self.recs.get((est, item))
        return None if r is None else r["status"]


def p1(c: Card) -> str:
    """Step level: norm-only's lift against the best of step-level GAS, TRAK and TracInCP, per seed;
    the reference's way = norm-only matches or beats the best targeted method."""
    base = (c.data.get("baselines") or {}).get("per_seed") or {}
    norm = {s: b["step"]["norm_only"]["lift"] for s, b in base.items()}
    best = {}
    for m in STEP_METHODS:
        for s, f in c.per_seed(m, "magnitude_control").items():
            best[s] = max(best.get(s, float("-inf")), f.get("step", {}).get("lift", float("nan")))
    if not norm:
        return "—"
    wins = sum(1 for s in norm if s in best and norm[s] >= best[s])
    # the baselines are measured, the methods were not judged (a setup gate stopped them)
    if not best:
        return f"norm-only {_rng(norm.values())}×; targeted: not judged"
    tail = f"; norm-only ≥ best targeted on {wins} of {len(norm)} seeds"
    return f"norm-only {_rng(norm.values())}×; targeted {_rng(best.values())}×{tail}"


def p2(c: Card) -> str:
    """Step level inside the trained window: ceiling − chance and each method's precision − chance;
    the reference's way on a seed = every step-level method and random within `P2_NEAR_CHANCE` of
    chance."""
    rows = c.per_seed("random", "headroom") or next(
        (c.per_seed(m, "headroom") for m in METHODS if c.per_seed(m, "headroom")), {}
    )
    room = [f["step"]["headroom"] for f in rows.values() if "step" in f]
    if not room:
        return "—"
    gaps, near = [], 0
    for s in rows:
        g = [
            c.per_seed(m, "headroom").get(s, {}).get("step", {}) for m in (*STEP_METHODS, "random")
        ]
        g = [f["precision"] - f["chance"] for f in g if "precision" in f]
        gaps += g
        near += bool(g) and max(abs(x) for x in g) <= P2_NEAR_CHANCE
    return (
        f"ceiling − chance {_rng(room)}; methods' precision − chance {_rng(gaps)}; every method "
        f"within {P2_NEAR_CHANCE} of chance on {near} of {len(rows)} seeds"
    )


def p3(c: Card) -> str:
    cov = next((r for (e, i), r in c.recs.items() if e == "setup" and i == "sketch_coverage"), None)
    if cov is None:
        return "—"
    ratios = [
        t["norm2_ratio"]
        for f in cov["figures"]["per_seed"].values()
        for t in (f.get("token_rows") or {}).values()
    ]
    return f"{cov['status']}: ‖Sg‖²/‖g‖² of the trigger/behavior rows {_rng(ratios)}"


def p4(c: Card) -> str:
    """The reference's way on a seed: on every draw, in-context CI lower > 0.05 and constructed CI
    upper < 0.05."""
    r = c.recs.get(("setup", "in_context_targets"))
    if r is None:
        return "—"
    ic, co, both = [], [], 0
    per_seed = r["figures"]["per_seed"]
    for f in per_seed.values():
        draws = list(f["per_draw"].values())
        ic += [d["in_context"]["mean"] for d in draws]
        co += [d["constructed"]["ci_hi"] for d in draws]
        both += all(
            d["in_context"]["ci_lo"] > 0.05 and d["constructed"]["ci_hi"] < 0.05 for d in draws
        )
    passing = sum(1 for f in per_seed.values() if f["status"] == "pass")
    return (
        f"in-context {_rng(ic)} (CI lower > 0.05 on {passing} of {len(per_seed)} seeds); "
        f"constructed CI upper {_rng(co)}; both halves of the reference's bar on {both} of "
        f"{len(per_seed)} seeds"
    )


def _raw(c: Card | None, est: str, seed: str) -> float | None:
    if c is None:
        return None
    return c.per_seed(est, "fluency_control").get(seed, {}).get("raw_auc")


def p5(c: Card, plain: Card | None = None) -> str:
    """At the analysis checkpoint, fluency's raw within-group AUC against the reference's own
    comparison set (`E2_1_per_rollout_mp.py`, `_GRAD` and the "raw fluency beats every raw gradient
    AUC" line): GAS group-centred and plain GAS, both with the minimal-pair target, and norm-only.
    The reference's way on a seed = raw fluency > the best raw AUC of the three (strictly, as its
    test is written). Plain GAS with the minimal-pair target is not a built-in default (`cosine`'s
    default target is in-context): `plain` is a scorecard of `cosine` run with
    `--estimator-param cosine.target=minimal_pair`; without it the in-context `cosine` stands in
    and the cell says so. The older comparison against every built-in targeted method is reported
    beside it."""
    flu = c.per_seed(GAS, "fluency_control") or next(
        (c.per_seed(m, "fluency_control") for m in BUILTINS if c.per_seed(m, "fluency_control")), {}
    )
    if not flu:
        return "—"
    # a seed whose sibling groups are all behavior (or all not) has no within-group pair: no AUC at
    # all
    judged = {s: f for s, f in flu.items() if f.get("fluency_auc") is not None}
    rate = [f.get("sampled_rate") for f in flu.values()]
    fauc = [f["fluency_auc"] for f in judged.values()]

    def method(key: str) -> list[float]:
        return [
            f[key]
            for m in METHODS
            for f in c.per_seed(m, "fluency_control").values()
            if f.get(key) is not None
        ]

    ref_set = ((c, GAS), (plain if plain is not None else c, "cosine"), (c, "norm_only"))
    ref_wins = ref_n = 0
    for s, f in judged.items():
        raws = [_raw(card, est, s) for card, est in ref_set]
        if any(r is None for r in raws):
            continue
        ref_n += 1
        ref_wins += f["fluency_auc"] > max(raws)
    at_or_above = sum(
        1
        for s, f in judged.items()
        if all(f["fluency_auc"] >= (_raw(c, m, s) or 0) for m in METHODS)
    )
    skipped = len(flu) - len(judged)
    tail = (
        f" ({skipped} seed(s) without a sibling group that mixes behavior and not)"
        if skipped
        else ""
    )
    stand_in = "plain GAS minimal-pair" if plain is not None else "plain GAS in-context (stand-in)"
    return (
        f"saturated {_rng(rate)}; fluency AUC {_rng(fauc)}; gradient methods raw "
        f"{_rng(method('raw_auc'))}, residualized {_rng(method('auc'))}; fluency > GAS centred, "
        f"{stand_in} and norm-only (the reference's set, raw) on {ref_wins} of {ref_n} seeds; "
        f"fluency ≥ every built-in gradient method (raw) on {at_or_above} of {len(judged)} "
        f"seeds{tail}"
    )


def p6(c: Card) -> str:
    """GAS group-centred (minimal-pair target), residualized, across seeds and draws; the
    reference's way on a seed = the pre-registered rollout-level rule (`fluency_control`) fails on
    at least one of its draws."""
    seeds = [f.get("auc") for f in c.per_seed(GAS, "fluency_control").values()]
    dv = c.per_seed(GAS, "draw_variance")
    draws = [a for f in dv.values() for a in (f.get("auc") or {}).values()]
    # the reference's rule alone (the behavior label), not the causal label it did not have: the
    # same under either gating view
    ref = [(f.get("reference_status") or f.get("status") or {}).values() for f in dv.values()]
    flips = sum(_flips(list(statuses)) for statuses in ref)
    fails = sum(1 for statuses in ref if any(st != "pass" for st in statuses))
    if not seeds:
        return "—"
    return (
        f"GAS centred residualized AUC {_rng(seeds)} across seeds, {_rng(draws)} across draws; "
        f"{flips} draw verdict flip(s); the rule fails on a draw of {fails} of {len(dv)} seeds"
    )


def _flips(statuses: list[str]) -> int:
    """How many of a seed's draws differ from the majority verdict (seed_variance.judge_spread's
    flips)."""
    if not statuses:
        return 0
    majority = max(set(statuses), key=statuses.count)
    return sum(st != majority for st in statuses)


def _mean(values) -> float:
    return sum(values) / len(values) if values else float("nan")


def causal(c: Card) -> str:
    r = c.recs.get(("setup", "causal_gt"))
    if r is None:
        return "—"
    f = r["figures"]["per_seed"].values()
    ok = sum(1 for x in f if x.get("status") == "pass")
    return (
        f"{r['status']} ({ok} of {len(f)} seeds): leave-GT-out Δs_b "
        f"{_rng([x.get('s_b_drop_gt') for x in f])} (ΔNLL "
        f"{_rng([x.get('delta_gt') for x in f])}); random removal Δs_b "
        f"{_rng([_mean(x.get('s_b_drop_random')) for x in f])} (ΔNLL "
        f"{_rng([x.get('delta_random_mean') for x in f])}); "
        + (
            f"control run (no bonus) s_b {_rng([x.get('s_b_control_final') for x in f])}; "
            if any(x.get("s_b_control_final") is not None for x in f)
            else ""
        )
        + f"no-bonus replay s_b {_rng([x.get('s_b_no_bonus') for x in f])}"
    )


def lds(c: Card) -> str:
    best = {m: [f.get("lds") for f in c.per_seed(m, "counterfactual").values()] for m in METHODS}
    best = {m: v for m, v in best.items() if v}
    if not best:
        return "—"
    any_rec = next(c.per_seed(m, "counterfactual") for m in best)
    adv = [f.get("baselines_lds", {}).get("advantage") for f in any_rec.values()]
    passes = {
        m: sum(1 for f in c.per_seed(m, "counterfactual").values() if f.get("status") == "pass")
        for m in best
    }
    top = max(best, key=lambda m: sum(x for x in best[m] if x == x) / len(best[m]))
    return (
        f"best method {top} LDS {_rng(best[top])} (passes {passes[top]} of {len(best[top])} "
        f"seeds); advantage control {_rng(adv)}"
    )


ROWS = {"P1": p1, "P2": p2, "P3": p3, "P4": p4, "P5": p5, "P6": p6, "causal": causal, "LDS": lds}


def table(
    cards: dict[str, Card], plain: dict[str, Card] | None = None
) -> tuple[list[str], list[list[str]]]:
    """`plain`: per scale, the plain-GAS (minimal-pair target) scorecard P5 compares against."""
    plain = plain or {}

    def cell(k: str, name: str, c: Card) -> str:
        return p5(c, plain.get(name)) if k == "P5" else ROWS[k](c)

    headers = ["finding", "reference", *cards]
    return headers, [
        [TITLES[k], REFERENCE[k], *(cell(k, n, c) for n, c in cards.items())] for k in ROWS
    ]


def agreement(a: Card, b: Card, ungated: bool = False) -> tuple[float, int]:
    """Share of (built-in × estimator item) verdicts both hold on which they agree, and how many
    pairs.
    `ungated`: compare each item's own rule instead (a record a setup gate made invalid-setup keeps
    its rule's verdict as `ungated_status`), over the pairs both rules judge (pass or fail) —
    the final verdicts agree trivially where both scales gate every target reader."""

    def status(c: Card, e: str, i: str) -> str | None:
        if not ungated:
            return c.status(e, i)
        r = c.recs[(e, i)]
        return (r.get("figures") or {}).get("ungated_status") or r["status"]

    pairs = [(e, i) for (e, i) in a.recs if e in BUILTINS and (e, i) in b.recs]
    if ungated:
        pairs = [(e, i) for e, i in pairs if judged(status(a, e, i)) and judged(status(b, e, i))]
    if not pairs:
        return float("nan"), 0
    same = sum(status(a, e, i) == status(b, e, i) for e, i in pairs)
    return same / len(pairs), len(pairs)


def _cards(ap: argparse.ArgumentParser, specs: list[str], option: str = "") -> dict[str, Card]:
    cards = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not Path(path).is_file():
            ap.error(
                f"{option}{spec!r}: give SCALE=PATH to an existing scorecard.json (e.g. "
                "default=scorecard.json)"
            )
        cards[name] = Card(Path(path))
    return cards


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "scorecards",
        nargs="+",
        metavar="SCALE=PATH",
        help="a scorecard.json per scale, in column order",
    )
    ap.add_argument(
        "--plain-gas",
        action="append",
        default=[],
        metavar="SCALE=PATH",
        help="for P5, a scorecard of plain GAS with the minimal-pair target at SCALE (`pytest "
        "benchmarks --estimator=cosine --estimator-param cosine.target=minimal_pair -k "
        "fluency_control`); repeat per scale (default: none; the in-context cosine stands in)",
    )
    ap.add_argument(
        "--markdown", type=Path, help="also write the table (and the agreement) to this file"
    )
    ap.add_argument(
        "--agreement-figure", type=Path, help="PNG of the verdict agreement between the scales"
    )
    args = ap.parse_args(argv)
    cards = _cards(ap, args.scorecards)
    plain = _cards(ap, args.plain_gas, option="--plain-gas ")
    unknown = sorted(set(plain) - set(cards))
    if unknown:
        ap.error(
            f"--plain-gas {unknown[0]}=…: no scorecard for scale {unknown[0]!r} was given; "
            f"scales given: {', '.join(cards)}"
        )
    headers, rows = table(cards, plain)
    out = [tabulate(rows, headers=headers, tablefmt="github")]
    names = list(cards)
    agree = {}
    for i, x in enumerate(names):
        for y in names[i + 1 :]:
            share, n = agreement(cards[x], cards[y])
            rule, m = agreement(cards[x], cards[y], ungated=True)
            agree[f"{x} vs {y}"] = (share, rule)
            rules = (
                f"{rule:.0%} of {m}"
                if m
                else "none to compare (a failed setup gate left no rule verdict on one side)"
            )
            out.append(
                f"\nVerdict agreement {x} vs {y}: {share:.0%} of {n} (built-in × item) verdicts; "
                f"the items' own rules before the setup gates: {rules}"
            )
    text = "\n".join(out)
    print(text)
    if args.markdown:
        args.markdown.write_text(text + "\n")
    if args.agreement_figure and agree:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import numpy as np

        fig, ax = plt.subplots(figsize=(4 + 1.5 * len(agree), 3.6))
        x = np.arange(len(agree))
        ax.bar(
            x - 0.2,
            [100 * v[0] for v in agree.values()],
            0.4,
            color="#4c72b0",
            label="final verdicts",
        )
        ax.bar(
            x + 0.2,
            [100 * v[1] for v in agree.values()],
            0.4,
            color="#dd8452",
            label="items' own rules (before the setup gates)",
        )
        ax.set_xticks(x, list(agree))
        ax.set_ylim(0, 100)
        ax.set_ylabel("verdicts that agree (%)")
        ax.set_title("built-in estimator × item verdicts")
        ax.legend(
            loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=2, fontsize=8, frameon=False
        )
        fig.tight_layout()
        fig.savefig(args.agreement_figure, dpi=120)
    return 0


if __name__ == "__main__":
    sys.exit(main())
