"""Estimator item — the linear datamodeling score (LDS) against counterfactual replays of the
stream.

The other items score a method against labels that the reply's text and advantage give away. This
one scores it against what retraining does (TRAK's / dattri's LDS on the logged RL stream): M
subsets of the trained window's rollouts have their weight in the logged loss changed, and the
stream is replayed to the measurement checkpoint (`bt_core.counterfactual.replay`); the measured
    change is
Δ_m = NLL_m − NLL_full of the behavior token on held-out trigger probes (positive: the subset had
taught the behavior). An estimator's prediction for subset m is the sum of its rollout scores over
the subset (a step-level-only method: its step score broadcast to the step's rollouts), so positive
LDS means "high scores predict that weakening those rollouts weakens the behavior".   LDS =
Spearman(prediction_m, Δ_m) over the M subsets.

**What it judges: small reweightings of local subsets** (`reweight_<i>`, M = `n_reweight` = 32 at
default, 24 at smoke): each draws `local_fraction` = 5% of the trained window, from the window
without its first step, and keeps those rollouts at weight 1 − δ (δ = `reweight_delta` = 0.01)
instead of 1; each is replayed in float64 from step 0 beside a float64 replay of the logged stream
(`full_f64`). Reported beside it, not judged: the same subsets removed whole (`local_<i>`, δ = 1)
and half-window removals (`lds_<i>`).

*Why not whole-rollout removals* (written from `metagrad`'s figures alone, before any other
estimator was scored on the new subsets). `metagrad` is the exact derivative of this very measure
with respect to every rollout's weight, checked against central finite differences
(tests/test_metagrad.py); it is the one calibration the rule may use. Every score the item can judge
enters it as a sum over the subset: an additive model, which is a first-order model of the response,
and whose exact answer is that derivative. Judged on whole removals, the causal ideal failed default
seeds 0 and 1 (local LDS 0.73 [0.54, 0.87] and −0.14 [−0.42, 0.14]; half window 0.35 and −0.14).
Seed 1 is not a wrong derivative (finite differences agree to 1.5e-4; a float32 replay equals a
float64 one to 1e-5): scaling the rollouts of local_0 by w = 0.99 / 0.9 / 0.5 / 0 moved the NLL by
−0.00006 / −0.00074 / +0.0082 / +0.0252 where the derivative predicts −0.00006 / −0.00062 / −0.0031
/ −0.0062. A removal of 240 whole rollouts leaves the region where the 80-step AdamW trajectory is
linear in the weights (AdamW's update m̂/√v̂ is scale-free, the clip couples every rollout of a
step, and the downstream steps amplify the interactions: MAGIC's "metasmoothness" is missing at this
scale). A Spearman over such removals then ranks the subsets by that curvature — by how the removed
rollouts interact through the optimizer — which no sum of per-rollout scores can express and which
the exact per-rollout answer itself gets backwards. That is not attribution; a rule its ideal fails
measures something else. (On the smoke seeds the same removals gave 0.96/0.97/0.98; TRAK's choice of
half-window subsets is about the variance of the indicators under retraining noise, which bit-exact
replays do not have.)

*Why δ = 0.01 and float64.* Where the response is first order, the measured Δ_m is what the additive
model is a model of, and the bit-exact replay has no retraining noise to average out, so small
changes give clean signal. On the least smooth seed (default 1) the response to w = 0.99 matched the
derivative to the two digits shown and w = 0.9 departed from it by 19%: δ = 0.01 is judged, the
largest of those two sizes inside the first-order region. At δ = 0.01 the response is ~6e-5 nats;
float32 replay rounding moved it by 7% (local_0 of default seed 1: −6.70e-5 in float32, −6.26e-5 in
float64; at δ = 0.001 float32 was 70% off, float64 linear to 1%: −6.19e-6), so the judged replays
run in float64 (1.7× a float32 replay). The reweighted subsets are the local subsets' own draws, so
removal and reweighting are compared on the same rollouts. The rule, its CIs and its controls are
unchanged; only the perturbation it measures changed.

*What the exact influence gave on the judged subsets* (measured after the rule and δ were fixed,
which stay as written above). Smoke, M = 24: LDS 0.99 [0.94, 1.00], 1.00 [0.98, 1.00], 1.00 [0.99,
1.00] on seeds 0–2 (local removals of the same subsets 0.91, 0.85, 0.94; half window 0.62, 0.19,
0.17). Not every subset is first order at δ = 0.01: on smoke seed 0 the subsets holding rollouts of
the window's second step (AdamW's second update, still near the sign regime of the first) depart by
up to 38% of the largest Δ (reweight_13: −1.11e-4 measured, −2.04e-4 predicted) and reach the
derivative only at δ = 1e-4 (−1.98e-2 per unit δ against −2.04e-2); without that step's rollouts δ =
0.01 is first order (9.31e-3 against 9.28e-3). The median subset is within 1%, and the Spearman
absorbs the rest. Default, M = 32: 1.00 [1.00, 1.00], 0.93 [0.83, 0.97], 1.00, 1.00, 1.00 on seeds
0–4 (the same subsets removed whole: 0.76, −0.16, 0.83, 0.83, 0.59; half window 0.09, 0.03, 0.69,
0.60, 0.32). Every other estimator measured stayed far below it (at most 0.72, `cosine` on seed 4; ≤
0.50 on seeds 0–3; docs/counterfactual.md has the table): the rule now separates the exact influence
from its approximations, where the removal rule had let the controls tie it.

Rule, on every seed, on the judged subsets:

* the 95% bootstrap CI over subsets (N_BOOT = 2000 percentile resamples of the M subsets) of the
  estimator's LDS has its lower bound > 0, and
* paired against every target-free control (`controls.CONTROL_NAMES`: advantage, signed_norm,
  norm_only) and the surface baseline (behavior text × sign(A)), the 95% CI of the LDS *difference*,
  over the same resample indices, has its lower bound > 0.

A control compared with itself differs by exactly 0 in every resample (lower bound 0, not > 0): the
rule fails it without a special case. The **ceiling** beside every verdict is `metagrad`'s own LDS
on the same subsets, and each LDS is also shown as a share of it; the reported subsets (local
removals, half window) are shown the same way. The oracle (GT counts) is not a perfect LDS
predictor: a subset's GT count ignores every other rollout's effect, and a random subset holds about
its share of GT.
"""

from __future__ import annotations

import numpy as np

from bt_core.attribution.evidence import EstimatorFailure, Evidence
from bt_core.attribution.registry import EstimatorSpec
from bt_core.metrics import lds_bootstrap, percentile_ci, subset_sums
from bt_core.reporting import present as pr
from bt_core.reporting.scorecard import Status, Verdict

from . import controls
from ._base import Item, fmt
from ._common import level_scores, seed_verdict
from ._memo import memo

NAME = "counterfactual"
TITLE = "scores predict what replaying the stream without a subset does (LDS), beyond every control"
N_BOOT = 2000  # bootstrap resamples of the subsets
ALPHA = 0.05  # two-sided: 95% percentile intervals
# the resample indices (shared by every estimator and control: differences are paired)
BOOT_SEED = 0xD5
BASELINES = (*controls.CONTROL_NAMES, controls.SURFACE)
MARGIN = "Δ LDS over the control (paired bootstrap 95% CI over subsets)"
JUDGED = "reweight"  # plan prefix of the judged subsets (local subsets at weight 1 − δ, float64)
REPORTED = {"local": "local_removal", "lds": "half_window"}  # reported prefix → its figures' key
CEILING = "metagrad"


def subsets(
    evidence: Evidence, seed: int, prefix: str = JUDGED
) -> tuple[np.ndarray, np.ndarray] | None:
    """(indicators (M, N) bool, measured Δ NLL (M,)) of seed's `prefix` subsets; None without
    them."""
    r = getattr(evidence.artifacts[seed], "replays", None)
    if r is None or not r.names(prefix):
        return None
    return memo(
        evidence,
        ("lds-subsets", seed, prefix),
        lambda: (r.indicators(prefix), np.array([r.delta(n) for n in r.names(prefix)])),
    )


def _ceiling_scores(evidence: Evidence, seed: int) -> np.ndarray | None:
    from bt_core.attribution.catalog import get

    try:
        # a figure beside the verdict, never the rule: kept in the cache (bt_core.attribution.kept)
        return evidence.kept_scores(get(CEILING), evidence.stream_problem(seed))
    except EstimatorFailure:
        return None


def baseline_figures(evidence: Evidence, seed: int, prefix: str = JUDGED) -> dict:
    """Every control's, the surface baseline's and the ceiling's (metagrad's) LDS with CI on
    `prefix` subsets."""

    def run() -> dict:
        x, y = subsets(evidence, seed, prefix)
        preds = [
            subset_sums(x, controls.stream_scores(evidence, seed, "rollout", b)) for b in BASELINES
        ]
        ceil = _ceiling_scores(evidence, seed)
        lds, boot = lds_bootstrap(
            np.stack(preds + ([] if ceil is None else [subset_sums(x, ceil)])), y, N_BOOT, BOOT_SEED
        )
        top = (
            (float(lds[-1]), percentile_ci(boot[-1], ALPHA))
            if ceil is not None
            else (float("nan"), (None, None))
        )
        return {
            "lds": {b: float(v) for b, v in zip(BASELINES, lds, strict=False)},
            "ci": {b: percentile_ci(bt, ALPHA) for b, bt in zip(BASELINES, boot, strict=False)},
            "boot": boot[: len(BASELINES)],
            "ceiling": top[0],
            "ceiling_ci": list(top[1]),
        }

    return memo(evidence, ("lds-baselines", seed, prefix), run)


def _share(v: float, ceiling: float) -> float:
    return float(v / ceiling) if ceiling == ceiling and ceiling > 0 else float("nan")


def _lds(
    evidence: Evidence, seed: int, prefix: str, scores: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    x, y = subsets(evidence, seed, prefix)
    return lds_bootstrap(subset_sums(x, scores)[None, :], y, N_BOOT, BOOT_SEED)


def reported(evidence: Evidence, seed: int, scores: np.ndarray, prefix: str) -> dict | None:
    """The LDS on the reported `prefix` subsets (not judged): the estimator's, the baselines' and
    the ceiling's, with shares; None where the seed has none."""
    if subsets(evidence, seed, prefix) is None:
        return None
    lds, boot = _lds(evidence, seed, prefix, scores)
    base = baseline_figures(evidence, seed, prefix)
    return {
        "lds": float(lds[0]),
        "ci": list(percentile_ci(boot[0], ALPHA)),
        "ceiling": base["ceiling"],
        "share": _share(float(lds[0]), base["ceiling"]),
        "baselines_lds": base["lds"],
        "baselines_share": {b: _share(v, base["ceiling"]) for b, v in base["lds"].items()},
    }


def evaluate_seed(spec: EstimatorSpec, evidence: Evidence, seed: int, draw: int = 0) -> dict:
    data = subsets(evidence, seed)
    if data is None:
        return {
            "status": Status.INVALID_SETUP,
            "why": f"no {JUDGED}_<i> counterfactual replays were built for this seed "
            "(a cache built by an older plan?)",
        }
    x, y = data
    if np.ptp(y) == 0:
        return {
            "status": Status.INVALID_SETUP,
            "why": "every subset's replay measured the same behavior",
        }
    # native, or step scores broadcast
    scores, level = level_scores(spec, evidence, seed, "rollout")
    pred = subset_sums(x, scores)
    if np.ptp(pred) == 0:  # e.g. a method that scores only steps outside the trained window
        return {
            "lds": float("nan"),
            "level": level,
            "n_subsets": int(y.size),
            "margin": float("nan"),
            "chance_margin": float("nan"),
            "status": Status.FAIL,
            "why": (
                f"its prediction is the same for all {y.size} subsets: it gives the trained "
                "window's rollouts no ranking (LDS undefined)"
            ),
        }
    lds, boot = _lds(evidence, seed, JUDGED, scores)
    lo, hi = percentile_ci(boot[0], ALPHA)
    base = baseline_figures(evidence, seed)
    diffs = {b: percentile_ci(boot[0] - base["boot"][i], ALPHA) for i, b in enumerate(BASELINES)}
    beaten = {b: d[0] > 0 for b, d in diffs.items()}
    ok = lo > 0 and all(beaten.values())
    lost = [b for b, v in beaten.items() if not v]
    ceil = base["ceiling"]
    why = (
        f"LDS {fmt(float(lds[0]))} [{fmt(lo)}, {fmt(hi)}] over {y.size} reweighted subsets "
        f"({level}), "
        f"{fmt(_share(float(lds[0]), ceil))} of the ceiling (metagrad {fmt(ceil)}); "
        + ", ".join(f"{b} {fmt(base['lds'][b])}" for b in BASELINES)
        + (f"; not beaten (paired CI): {', '.join(lost)}" if lost else "")
    )
    return {
        "lds": float(lds[0]),
        "ci": [lo, hi],
        "level": level,
        "n_subsets": int(y.size),
        "diff_ci": {b: list(d) for b, d in diffs.items()},
        "baselines_lds": base["lds"],
        "baselines_ci": {b: list(c) for b, c in base["ci"].items()},
        "ceiling": ceil,
        "ceiling_ci": base["ceiling_ci"],
        "ceiling_features": f"{CEILING}'s LDS on the same subsets",
        "share": _share(float(lds[0]), ceil),
        "baselines_share": {b: _share(v, ceil) for b, v in base["lds"].items()},
        **{key: reported(evidence, seed, scores, prefix) for prefix, key in REPORTED.items()},
        "margin": lo,
        "chance_margin": float(lds[0]),
        "versus": {
            "LDS 0": {"value": float(lds[0]), "ci": [lo, hi]},
            **{
                b: {"value": float(lds[0]) - base["lds"][b], "ci": list(diffs[b])}
                for b in BASELINES
            },
        },
        "status": Status.PASS if ok else Status.FAIL,
        "why": why,
    }


def evaluate(spec: EstimatorSpec, evidence: Evidence) -> Verdict:
    return seed_verdict(
        NAME,
        evaluate_seed,
        spec,
        evidence,
        headline="lds",
        margin=MARGIN,
        extra={
            "n_boot": N_BOOT,
            "alpha": ALPHA,
            "baselines": list(BASELINES),
            "judged_subsets": JUDGED,
            "reported_subsets": list(REPORTED),
            "ceiling": CEILING,
        },
    )


CAPTION = (
    "Each marker is one seed's linear datamodeling score (colour and shape = seed) with its 95% "
    "bootstrap CI over the removed subsets: how well an estimator's summed scores predict what "
    "replaying the stream without those rollouts does to the behavior. Right of the dashed 0 line "
    "is better than no information. The grey band holds the controls, the surface baseline and the "
    "step-count datamodel's held-out ceiling; a pass needs the CI above 0 and the paired CI above "
    "every control."
)
TABLE = "Counterfactual LDS (Spearman of summed scores vs replayed ΔNLL over removed subsets)"
AXIS = "LDS: Spearman(summed scores of a removed subset, replayed Δ behavior NLL)"


def _lds_cell(f: dict) -> str:
    ci = f.get("ci") or [None, None]
    sh = f.get("share")
    share = f" ({100 * sh:.0f}%)" if isinstance(sh, float) and sh == sh else ""  # of the ceiling
    return pr.ci_cell(f.get("lds"), ci[0], ci[1]) + share


def _shared(per: dict, seeds: list[str]) -> tuple[list[list[str]], list[dict]]:
    """The controls', the surface baseline's and the ceiling's LDS (the same on every record): table
    rows and figure categories; none unless every seed has them."""
    if not all("baselines_lds" in per[s] for s in seeds):
        return [], []
    rows, dots = [], []
    for b in per[seeds[0]]["baselines_lds"]:
        vals = {s: (per[s]["baselines_lds"][b], *per[s]["baselines_ci"][b]) for s in seeds}
        surface = b == controls.SURFACE
        rows.append(
            [
                "surface baseline" if surface else f"control: {b}",
                *(pr.ci_cell(*v) for v in vals.values()),
            ]
        )
        dots.append(
            pr.dot_row(
                "surface baseline" if surface else f"{b} (control)",
                [{s: pr.point(*v) for s, v in vals.items()}],
                band=True,
            )
        )
    features = per[seeds[0]].get("ceiling_features", "step-count datamodel")
    rows.append([f"ceiling ({features})", *(pr.cell(per[s]["ceiling"]) for s in seeds)])
    ceiling = {s: pr.point(per[s].get("ceiling")) for s in seeds}
    return rows, [*dots, pr.dot_row("ceiling (datamodel)", [ceiling], band=True)]


def present(rec: dict) -> dict:
    """The estimator's LDS [CI] (share of the ceiling) per seed — a row of the LDS table, a figure
    category where it has an LDS — with the controls' and the ceiling's as the shared rows."""
    per = pr.per_seed(rec)
    if not per:
        return {}
    seeds = list(per)
    rows, dots = _shared(per, seeds)
    table = pr.table(
        "lds",
        "lds",
        TABLE,
        pr.seed_columns("LDS [95% CI]", seeds),
        [[pr.estimator_label(rec), *(_lds_cell(per[s]) for s in seeds)]],
        rows,
        terminal=False,
    )
    mine = {s: pr.point(f.get("lds"), *(f.get("ci") or [None, None])) for s, f in per.items()}
    judged = [pr.dot_row(rec["estimator"], [mine])] if any("lds" in f for f in per.values()) else []
    figure = pr.dots(
        "lds",
        "lds",
        "Counterfactual LDS per estimator and seed",
        CAPTION,
        [pr.axis(AXIS, lines=[pr.line(0.0)])],
        judged,
        dots,
        horizontal=True,
        legend="lower right",
    )
    return pr.presentation(table, figure, sections={"lds": {"title": "Counterfactual LDS"}})


ITEM = Item(
    NAME,
    TITLE,
    "estimator",
    evaluate,
    reference="causal ground truth (LDS, TRAK/dattri)",
    headline="lds",
    present=present,
)
