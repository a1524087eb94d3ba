"""PNG figures of a scorecard (matplotlib, headless), drawn from the scorecard JSON only.

* lift.png — lift per method per seed, rollout and step level, with chance (1×) and ceiling marks
  (the reference's Figure 1 analogue);
* auc.png — fluency-residualized within-group AUC with 95% CIs per seed (draw 0) and the other draws'
  AUCs, with the 0.5 line (Figure 2 analogue);
* alignment.png — token-level alignment of the behavior-token gradient with each target, when the setup
  item `in_context_targets` reports it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _estimator_records(data: dict, item: str) -> list[dict]:
    return [r for r in data["records"] if r["item"] == item and r["estimator"] != "setup"
            and r["figures"].get("per_seed")]


def lift_figure(data: dict, out: Path) -> Path | None:
    recs = _estimator_records(data, "magnitude_control")
    if not recs:
        return None
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=False)
    for ax, level in zip(axes, ("rollout", "step"), strict=True):
        for i, r in enumerate(recs):
            per = r["figures"]["per_seed"]
            vals = [(f if level == "rollout" else f.get("step", {})) for f in per.values()]
            lifts = [v.get("lift") for v in vals if v.get("lift") is not None]
            ceil = [v.get("ceiling_lift") for v in vals if v.get("ceiling_lift") is not None]
            x = i + np.linspace(-0.15, 0.15, max(len(lifts), 1))[: len(lifts)]
            ax.scatter(x, lifts, s=22, zorder=3, label=None)
            if ceil:
                ax.scatter(x[: len(ceil)], ceil, marker="_", s=120, color="grey", zorder=2)
        ax.axhline(1.0, color="black", lw=0.8, ls="--")
        ax.set_xticks(range(len(recs)), [r["estimator"] for r in recs], rotation=30, ha="right")
        ax.set_title(f"{level}-level lift per seed (— ceiling, -- chance)")
        ax.set_ylabel("precision@|GT| ÷ chance")
    fig.tight_layout()
    path = out / "lift.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def auc_figure(data: dict, out: Path) -> Path | None:
    recs = _estimator_records(data, "fluency_control")
    if not recs:
        return None
    draws = {r["estimator"]: r for r in _estimator_records(data, "draw_variance")}
    plt = _plt()
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(recs)), 4))
    for i, r in enumerate(recs):
        per = r["figures"]["per_seed"]
        xs = i + np.linspace(-0.2, 0.2, max(len(per), 1))[: len(per)]
        for x, (seed, f) in zip(xs, per.items(), strict=True):
            if f.get("auc") is None:
                continue
            lo, hi = f.get("ci_lo") or f["auc"], f.get("ci_hi") or f["auc"]
            ax.errorbar(x, f["auc"], yerr=[[f["auc"] - lo], [hi - f["auc"]]], fmt="o", ms=4, capsize=2, color="C0")
            other = draws.get(r["estimator"], {}).get("figures", {}).get("per_seed", {}).get(seed, {})
            extra = [a for d, a in other.get("auc", {}).items() if str(d) != "0" and a is not None]
            ax.scatter([x] * len(extra), extra, s=12, facecolors="none", edgecolors="C1", zorder=3)
    ax.axhline(0.5, color="black", lw=0.8, ls="--")
    ax.set_xticks(range(len(recs)), [r["estimator"] for r in recs], rotation=30, ha="right")
    ax.set_ylabel("residualized within-group AUC")
    ax.set_title("fluency control per seed (● draw 0 with 95% CI, ○ other draws)")
    fig.tight_layout()
    path = out / "auc.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def alignment_figure(data: dict, out: Path) -> Path | None:
    rec = next((r for r in data["records"] if r["item"] == "in_context_targets"), None)
    per = (rec or {}).get("figures", {}).get("per_seed")
    if not per:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 4))
    kinds = [k for k in next(iter(per.values())).get("alignment", {})]
    for j, kind in enumerate(kinds):
        for i, (seed, f) in enumerate(per.items()):
            a = f["alignment"][kind]
            x = j + (i - len(per) / 2) * 0.08
            ax.errorbar(x, a["mean"], yerr=[[a["mean"] - a["ci_lo"]], [a["ci_hi"] - a["mean"]]], fmt="o", ms=4,
                        capsize=2, color=f"C{i}", label=f"seed {seed}" if j == 0 else None)
    ax.axhline(0.05, color="black", lw=0.8, ls="--")
    ax.axhline(0.0, color="grey", lw=0.5)
    ax.set_xticks(range(len(kinds)), kinds)
    ax.set_ylabel("cos(behavior-token gradient, target)")
    ax.set_title("token-level alignment (-- pass bar 0.05)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    path = out / "alignment.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def render(data: dict, out: Path) -> list[Path]:
    """Write every figure the scorecard has data for into `out`; returns their paths."""
    out.mkdir(parents=True, exist_ok=True)
    return [p for p in (lift_figure(data, out), auc_figure(data, out), alignment_figure(data, out)) if p]
