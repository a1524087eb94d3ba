"""PNG figures of a scorecard (matplotlib, headless), drawn from the scorecard JSON only.

Each figure comes with a title and a caption that says what it shows and how to read it (`Figure`):

* ``margin_<item>.png`` — per estimator item whose records carry a `margin`: each estimator's margin over
  its deciding control per seed, with its CI and the bar (`margins.py`);
* lift.png — lift per estimator and seed at both levels, beside the target-free controls and the surface
  baseline that decide magnitude_control, with chance (1×) and each seed's ceiling (the reference's Figure 1);
* auc.png — fluency-residualized within-group AUC with 95% CIs per seed (draw 0), the other draws, and
  the draw control's and the surface baseline's AUC (Figure 2 analogue);
* lds.png — the counterfactual LDS with CIs per seed, beside the controls' and the datamodel ceiling;
* alignment.png — token-level alignment of the behavior-token gradient with each target, when the setup
  item `in_context_targets` reports it.
"""

from __future__ import annotations

from pathlib import Path

from bt_core.reporting import summary
from bt_core.reporting.margins import margin_figures
from bt_core.reporting.plotting import Figure, plt, save, seed_style, seeds_of


def _records(data: dict, item: str) -> list[dict]:
    """The item's estimator records with per-seed figures, methods first, then controls, then validation."""
    order = {n: i for i, (n, _) in enumerate(summary.estimators(data))}
    recs = [r for r in summary.estimator_records(data)
            if r["item"] == item and (r.get("figures") or {}).get("per_seed")]
    return sorted(recs, key=lambda r: order.get(r["estimator"], 0))


def _seed_legend(ax, seeds: list[str], **kw) -> None:
    handles = [ax.scatter([], [], s=22, **seed_style(seeds, s), label=f"seed {s}") for s in seeds]
    ax.legend(handles=handles, fontsize=7, **kw)


def lift_figure(data: dict, out: Path) -> Figure | None:
    recs = _records(data, "magnitude_control")
    base = (data.get("baselines") or {}).get("per_seed") or {}
    seeds = seeds_of(data) or list(base)
    if not recs and not base:
        return None
    controls = [*(data.get("baselines") or {}).get("controls", {}), "surface"] if base else []
    names = [summary.clip(r["estimator"], 16) for r in recs] + [f"{c} (control)" if c != "surface" else
                                                                "surface baseline" for c in controls]
    p = plt()
    fig, axes = p.subplots(1, 2, figsize=(13, 4.4))
    for ax, level in zip(axes, ("rollout", "step"), strict=True):
        def est(r, s, level=level):
            f = r["figures"]["per_seed"].get(s, {})
            return (f if level == "rollout" else f.get("step", {})).get("lift")
        cols = [[est(r, s) for s in seeds] for r in recs]
        cols += [[(base.get(s, {}).get(level, {}).get(c) or {}).get("lift") for s in seeds] for c in controls]
        for i, col in enumerate(cols):
            for j, (s, v) in enumerate(zip(seeds, col, strict=True)):
                if v is not None:
                    ax.scatter(i + (j - (len(seeds) - 1) / 2) * 0.12, v, s=20, zorder=3, **seed_style(seeds, s))
        for s in seeds:
            ceil = base.get(s, {}).get(level, {}).get("ceiling_lift")
            if ceil is not None:
                ax.axhline(ceil, color=seed_style(seeds, s)["color"], lw=0.8, ls=":", zorder=1)
        if controls:
            ax.axvspan(len(recs) - 0.5, len(cols) - 0.5, color="0.9", zorder=0)
            ax.text(len(recs) - 0.4, ax.get_ylim()[1], "target-free controls", va="top", fontsize=8, color="0.3")
        ax.axhline(1.0, color="black", lw=0.8, ls="--")
        ax.set_xticks(range(len(names)), names, rotation=35, ha="right", fontsize=8)
        ax.set_title(f"{level} level", fontsize=10)
        ax.set_ylabel("lift: precision@|GT| ÷ chance")
    _seed_legend(axes[0], seeds, loc="upper left")
    fig.tight_layout()
    return Figure(save(fig, out / "lift.png"), "lift", "Lift per estimator and seed, beside the controls",
                  "Each marker is one seed (colour and shape = seed) of an estimator's precision among its top "
                  "|GT| rollouts divided by chance, at rollout level (left) and step level (right). The grey band "
                  "holds the target-free controls and the surface baseline that decide magnitude_control: a "
                  "method passes only where it sits above every one of them on every seed (the paired CI decides; "
                  "see the margin figure). Dashed: chance (1×); dotted, in the seed's colour: that seed's ceiling.")


def auc_figure(data: dict, out: Path) -> Figure | None:
    recs = _records(data, "fluency_control")
    if not recs:
        return None
    seeds = seeds_of(data) or list(recs[0]["figures"]["per_seed"])
    draws = {r["estimator"]: r for r in _records(data, "draw_variance")}
    base = (data.get("baselines") or {}).get("per_seed") or {}
    p = plt()
    fig, ax = p.subplots(figsize=(max(7.0, 0.75 * len(recs) + 3), 4.2))
    for i, r in enumerate(recs):
        for j, s in enumerate(seeds):
            f = r["figures"]["per_seed"].get(s) or {}
            if f.get("auc") is None:
                continue
            x, st = i + (j - (len(seeds) - 1) / 2) * 0.14, seed_style(seeds, s)
            lo, hi = f.get("ci_lo", f["auc"]), f.get("ci_hi", f["auc"])
            ax.errorbar(x, f["auc"], yerr=[[f["auc"] - (lo if lo is not None else f["auc"])],
                                           [(hi if hi is not None else f["auc"]) - f["auc"]]],
                        fmt=st["marker"], color=st["color"], ms=4, capsize=2)
            other = (draws.get(r["estimator"], {}).get("figures", {}).get("per_seed", {}).get(s) or {}).get("auc", {})
            extra = [a for d, a in other.items() if str(d) != "0" and a is not None]
            ax.scatter([x] * len(extra), extra, s=12, facecolors="none", edgecolors=st["color"], zorder=3)
    n = len(recs)
    for k, name in enumerate(("norm_only", "surface")):
        for j, s in enumerate(seeds):
            v = ((base.get(s) or {}).get("draws", {}).get("0") or {}).get(name)
            if v is not None:
                ax.scatter(n + k + (j - (len(seeds) - 1) / 2) * 0.14, v, s=20, **seed_style(seeds, s))
    ax.axvspan(n - 0.5, n + 1.5, color="0.9", zorder=0)
    ax.axhline(0.5, color="black", lw=0.8, ls="--")
    ax.set_xticks(range(n + 2), [summary.clip(r["estimator"], 16) for r in recs] + ["norm_only (control)",
                                                                                    "surface (the label)"],
                  rotation=35, ha="right", fontsize=8)
    ax.set_ylabel("residualized within-group AUC")
    _seed_legend(ax, seeds, loc="lower left")
    fig.tight_layout()
    return Figure(save(fig, out / "auc.png"), "auc", "Fluency-residualized within-group AUC",
                  "Filled markers: an estimator's AUC for behavior vs non-behavior siblings of the same prompt, "
                  "after removing what fluency explains, on draw 0 of each seed (colour and shape = seed), with "
                  "its 95% cluster-bootstrap CI; hollow circles: the same on the other draws. The grey band holds "
                  "the norm-only control and the surface baseline (on draws it is the behavior "
                  "label itself, so nothing beats it against that label; the causal label's AUCs "
                  "are in the tables). Dashed: 0.5, no better than a coin within a group; a pass "
                  "needs the CI above it.")


def lds_figure(data: dict, out: Path) -> Figure | None:
    recs = _records(data, "counterfactual")
    recs = [r for r in recs if any("lds" in f for f in r["figures"]["per_seed"].values())]
    if not recs:
        return None
    seeds = seeds_of(data) or list(recs[0]["figures"]["per_seed"])
    ref = next((r for r in recs if all("baselines_lds" in r["figures"]["per_seed"].get(s, {}) for s in seeds)), None)
    rows = [(summary.clip(r["estimator"], 18), {s: (f.get("lds"), f.get("ci")) for s, f in
                                               r["figures"]["per_seed"].items()}) for r in recs]
    if ref is not None:
        per = ref["figures"]["per_seed"]
        for b in per[seeds[0]]["baselines_lds"]:
            rows.append((f"{b} (control)" if b != "surface" else "surface baseline",
                         {s: (per[s]["baselines_lds"][b], per[s]["baselines_ci"][b]) for s in seeds}))
        rows.append(("ceiling (datamodel)", {s: (per[s].get("ceiling"), None) for s in seeds}))
    p = plt()
    fig, ax = p.subplots(figsize=(8, 0.34 * len(rows) + 1.4))
    for i, (_, vals) in enumerate(rows):
        for j, s in enumerate(seeds):
            v, ci = vals.get(s, (None, None))
            if v is None:
                continue
            y, st = i + (j - (len(seeds) - 1) / 2) * 0.2, seed_style(seeds, s)
            xerr = [[v - ci[0]], [ci[1] - v]] if ci and None not in ci else None
            ax.errorbar(v, y, xerr=xerr, fmt=st["marker"], color=st["color"], ms=4, capsize=2)
    ax.axhspan(len(recs) - 0.5, len(rows) - 0.5, color="0.9", zorder=0)
    ax.axvline(0.0, color="black", lw=0.8, ls="--")
    ax.set_yticks(range(len(rows)), [n for n, _ in rows], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("LDS: Spearman(summed scores of a removed subset, replayed Δ behavior NLL)")
    _seed_legend(ax, seeds, loc="lower right")
    fig.tight_layout()
    return Figure(save(fig, out / "lds.png"), "lds", "Counterfactual LDS per estimator and seed",
                  "Each marker is one seed's linear datamodeling score (colour and shape = seed) with its 95% "
                  "bootstrap CI over the removed subsets: how well an estimator's summed scores predict what "
                  "replaying the stream without those rollouts does to the behavior. Right of the dashed 0 line "
                  "is better than no information. The grey band holds the controls, the surface baseline and "
                  "the step-count datamodel's held-out ceiling; a pass needs the CI above 0 and the paired CI "
                  "above every control.")


def alignment_figure(data: dict, out: Path) -> Figure | None:
    rec = next((r for r in data["records"] if r["item"] == "in_context_targets"), None)
    per = (rec or {}).get("figures", {}).get("per_seed")
    if not per:
        return None
    seeds = list(per)
    p = plt()
    fig, ax = p.subplots(figsize=(6.5, 3.8))
    kinds = list(next(iter(per.values())).get("alignment", {}))
    for j, kind in enumerate(kinds):
        for i, (seed, f) in enumerate(per.items()):
            a, st = f["alignment"][kind], seed_style(seeds, seed)
            ax.errorbar(j + (i - (len(per) - 1) / 2) * 0.1, a["mean"], yerr=[[a["mean"] - a["ci_lo"]],
                                                                             [a["ci_hi"] - a["mean"]]],
                        fmt=st["marker"], color=st["color"], ms=4, capsize=2, label=f"seed {seed}" if j == 0 else None)
    bar = (rec.get("figures") or {}).get("in_context_min")
    if bar is not None:
        ax.axhline(bar, color="black", lw=0.8, ls="--")
    ax.axhline(0.0, color="grey", lw=0.5)
    ax.set_xticks(range(len(kinds)), kinds)
    ax.set_ylabel("cos(behavior-token gradient, target)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return Figure(save(fig, out / "alignment.png"), "setup", "Token-level alignment of the targets (setup)",
                  "Each marker is one seed's mean cosine, on draw 0, between the behavior-token gradient and "
                  "each target kind, with its 95% CI (colour and shape = seed). Dashed: the in_context_targets bar "
                  "— the in-context target must have its CI above it on every seed and draw, or the verdicts of "
                  "every estimator that reads targets are held back as invalid-setup.")


def render(data: dict, out: Path) -> list[Figure]:
    """Write every figure the scorecard has data for into `out`; returns them in page order."""
    out.mkdir(parents=True, exist_ok=True)
    figs = [*margin_figures(data, out), lift_figure(data, out), auc_figure(data, out), lds_figure(data, out),
            alignment_figure(data, out)]
    return [f for f in figs if f is not None]
