"""Estimator item — the linear datamodeling score (LDS) against counterfactual replays of the stream.

The other items score a method against labels that the reply's text and advantage give away. This one
scores it against what retraining does (TRAK's / dattri's LDS on the logged RL stream): M subsets of the
trained window's rollouts are removed from the logged updates and replayed to the measurement checkpoint
(`bt_core.counterfactual.replay`); the measured change is Δ_m = NLL_m − NLL_full of the behavior token on held-out
trigger probes (positive: the subset had taught the behavior). An estimator's prediction for subset m is
the sum of its rollout scores over the removed rollouts (a step-level-only method: its step score broadcast
to the step's rollouts), so positive LDS means "high scores predict that removing those rollouts weakens
the behavior".   LDS = Spearman(prediction_m, Δ_m) over the M subsets (scipy's average ranks).

**Which subsets it judges: the local ones.** The item judges the `local_<i>` subsets (`n_local` = 50 at
default, 24 at smoke): each removes `local_fraction` = 5% of the window, drawn from the window *without its
first step*. The half-window subsets (`lds_<i>`, `lds_fraction` = 0.5, `n_lds` = 50 at default) are reported
beside it, not judged. The reasoning, written from the exact metagradient's figures (`metagrad`, the
derivative of this very measure through the replayed updates, checked against finite differences in
tests/test_metagrad.py) before any other estimator was scored on the local subsets:

* A rule must be passable by the exact influence, the one calibration it may use. At a half-window
  removal `metagrad`'s LDS on the smoke seeds was 0.62, 0.19 and 0.17: a 50% removal is far from first order
  under AdamW (its update m̂/√v̂ is scale-free, so halving a step's gradient changes the update much less
  than linearly, and the clip couples every rollout of a step). The half-window LDS measures those
  interactions, which no sum of per-rollout scores can price; TRAK/datamodels chose 0.5 for the variance
  of the indicators, a choice for retraining noise that bit-exact replays do not have.
* The first step of the window is AdamW's first update with a nonzero gradient: its second moment is that
  gradient's own square, so the update is ≈ lr·u/(|u| + ε) ≈ lr·sign(u) per coordinate. The exact
  derivative there is dominated by the coordinates with |u| within a few ε of 0 (slope up to 1/ε), and
  holds only over perturbations of that size; a whole rollout's removal acts through sign flips.
  Measured: the summed |metagrad| of the first step was 14.2 and 2.3 on smoke seeds 1 and 2 against
  0.01–0.33 for every other step (seed 0: 0.03 against 0.13); dropping only the first step's predictions
  took seeds 1 and 2 at the half window from 0.19/0.17 to 0.66/0.95.
* Local subsets from the window without its first step: `metagrad`'s LDS on smoke seeds 0/1/2 was
  0.96/0.97/0.98 at 5% (CI lower bounds 0.87/0.91/0.92, M = 24) and 0.91/0.94/0.96 at 10%; MAGIC reports
  LDS ≈ 1 at small drop fractions. 5% is the fraction judged (at smoke ~22 rollouts, at default ~5% of
  ~3,500); smaller removals move the measure less than float32 replay rounding can.

**What the default scale shows, and what is not solved.** At default (M = 50 local subsets of 240 rollouts, 5%
of the 4,800-rollout window) `metagrad`'s local LDS is 0.73 [0.54, 0.87], −0.14 [−0.42, 0.14], 0.83
[0.67, 0.93], 0.78 [0.61, 0.88], 0.64 [0.37, 0.85] on seeds 0–4 (half-window: 0.35, −0.14, 0.77, 0.47,
0.35): it passes seeds 2–4, fails seed 0 by the paired CIs against advantage (0.54) and signed_norm (0.61),
and fails seed 1, where dot/tracincp (0.52) and tracin_adam (0.53) predict the replays better than it.
Seed 1 is not a wrong derivative: there too it matches central finite differences (relative error 1.2e-4
and 1.5e-4 on rollouts of steps 31 and 56), and a float32 replay equals a float64 one (Δ 0.02523 against
0.02524). It is the response: scaling the rollouts of subset local_0 by w = 0.99 / 0.9 / 0.5 / 0 moved the
NLL by −0.00006 / −0.00074 / +0.0082 / +0.0252 where the derivative predicts −0.00006 / −0.00062 / −0.0031 /
−0.0062; over 10 subsets of 1% of the window its Spearman was 0.04, and with the local subsets only
down-weighted by 10% 0.25. On that seed the logged trajectory is not smooth in the rollout weights on the
scale of one rollout (MAGIC's "metasmoothness"): whole-rollout removals measure the curvature of the
80-step AdamW map, which no per-rollout score, the exact one included, prices; a derivative taken at each
rollout's own step (TracIn-like, blind to the downstream trajectory's sharp directions) is more robust to it.
The rule that the exact influence passes on every seed is still to be found (candidates: an LDS over
infinitesimal reweightings, which by construction calibrates against the metagradient itself; or a
smoother measure); this item keeps the local rule, which the causal ideal passes on 3 of 5 default seeds
and 2 of 3 smoke seeds (seed 1 there fails on power: 0.85 against advantage 0.70, signed_norm 0.59 and
surface 0.59 at M = 24).

Rule, on every seed, on the local subsets:

* the 95% bootstrap CI over subsets (N_BOOT = 2000 percentile resamples of the M subsets) of the
  estimator's LDS has its lower bound > 0, and
* paired against every target-free control (`controls.CONTROL_NAMES`: advantage, signed_norm, norm_only)
  and the surface baseline (behavior text × sign(A)), the 95% CI of the LDS *difference*, over the same
  resample indices, has its lower bound > 0.

A control compared with itself differs by exactly 0 in every resample (lower bound 0, not > 0): the rule
fails it without a special case. The **ceiling** beside every verdict is `metagrad`'s own LDS on the same
subsets, and each LDS is also shown as a share of it; the half-window figures are reported the same way.
The oracle (GT counts) is not a perfect LDS predictor: a subset's GT count ignores every other rollout's
effect, and a random subset removes about its share of GT (the meta-test asks only that it carries signal).
"""

from __future__ import annotations

import numpy as np

from bt_core.attribution.evidence import EstimatorFailure, Evidence
from bt_core.attribution.registry import EstimatorSpec
from bt_core.metrics import lds_bootstrap, percentile_ci, subset_sums
from bt_core.reporting.scorecard import Status, Verdict

from . import controls
from ._base import Item, fmt
from ._common import level_scores, seed_verdict
from ._memo import memo

NAME = "counterfactual"
TITLE = "scores predict what replaying the stream without a subset does (LDS), beyond every control"
N_BOOT = 2000  # bootstrap resamples of the subsets
ALPHA = 0.05  # two-sided: 95% percentile intervals
BOOT_SEED = 0xD5  # the resample indices (shared by every estimator and control: differences are paired)
BASELINES = (*controls.CONTROL_NAMES, controls.SURFACE)
MARGIN = "Δ LDS over the control (paired bootstrap 95% CI over subsets)"
JUDGED = "local"  # plan prefix of the judged subsets; "lds": the half-window subsets, reported
REPORTED = "lds"
CEILING = "metagrad"


def subsets(evidence: Evidence, seed: int, prefix: str = JUDGED) -> tuple[np.ndarray, np.ndarray] | None:
    """(indicators (M, N) bool, measured Δ NLL (M,)) of seed's `prefix` subsets; None without them."""
    r = getattr(evidence.artifacts[seed], "replays", None)
    if r is None or not r.names(prefix):
        return None
    return memo(evidence, ("lds-subsets", seed, prefix), lambda: (
        r.indicators(prefix), np.array([r.delta(n) for n in r.names(prefix)])))


def _ceiling_scores(evidence: Evidence, seed: int) -> np.ndarray | None:
    from bt_core.attribution.catalog import get

    try:
        return evidence.scores(get(CEILING), evidence.stream_problem(seed))
    except EstimatorFailure:
        return None


def baseline_figures(evidence: Evidence, seed: int, prefix: str = JUDGED) -> dict:
    """Every control's, the surface baseline's and the ceiling's (metagrad's) LDS with CI on `prefix` subsets."""
    def run() -> dict:
        x, y = subsets(evidence, seed, prefix)
        preds = [subset_sums(x, controls.stream_scores(evidence, seed, "rollout", b)) for b in BASELINES]
        ceil = _ceiling_scores(evidence, seed)
        lds, boot = lds_bootstrap(np.stack(preds + ([] if ceil is None else [subset_sums(x, ceil)])), y, N_BOOT,
                                  BOOT_SEED)
        top = (float(lds[-1]), percentile_ci(boot[-1], ALPHA)) if ceil is not None else (float("nan"), (None, None))
        return {"lds": {b: float(v) for b, v in zip(BASELINES, lds, strict=False)},
                "ci": {b: percentile_ci(bt, ALPHA) for b, bt in zip(BASELINES, boot, strict=False)},
                "boot": boot[: len(BASELINES)], "ceiling": top[0], "ceiling_ci": list(top[1])}
    return memo(evidence, ("lds-baselines", seed, prefix), run)


def _share(v: float, ceiling: float) -> float:
    return float(v / ceiling) if ceiling == ceiling and ceiling > 0 else float("nan")


def _lds(evidence: Evidence, seed: int, prefix: str, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    x, y = subsets(evidence, seed, prefix)
    return lds_bootstrap(subset_sums(x, scores)[None, :], y, N_BOOT, BOOT_SEED)


def reported(evidence: Evidence, seed: int, scores: np.ndarray) -> dict | None:
    """The half-window LDS (not judged): the estimator's, the baselines' and the ceiling's, with shares."""
    if subsets(evidence, seed, REPORTED) is None:
        return None
    lds, boot = _lds(evidence, seed, REPORTED, scores)
    base = baseline_figures(evidence, seed, REPORTED)
    return {"lds": float(lds[0]), "ci": list(percentile_ci(boot[0], ALPHA)), "ceiling": base["ceiling"],
            "share": _share(float(lds[0]), base["ceiling"]), "baselines_lds": base["lds"],
            "baselines_share": {b: _share(v, base["ceiling"]) for b, v in base["lds"].items()}}


def evaluate_seed(spec: EstimatorSpec, evidence: Evidence, seed: int, draw: int = 0) -> dict:
    data = subsets(evidence, seed)
    if data is None:
        return {"status": Status.INVALID_SETUP, "why": "no local counterfactual replays were built for this seed"}
    x, y = data
    if np.ptp(y) == 0:
        return {"status": Status.INVALID_SETUP, "why": "every subset's replay measured the same behavior"}
    scores, level = level_scores(spec, evidence, seed, "rollout")  # native, or step scores broadcast
    pred = subset_sums(x, scores)
    if np.ptp(pred) == 0:  # e.g. a method that scores only steps outside the trained window
        return {"lds": float("nan"), "level": level, "n_subsets": int(y.size), "margin": float("nan"),
                "chance_margin": float("nan"), "status": Status.FAIL,
                "why": f"its prediction is the same for all {y.size} subsets: it gives the trained window's "
                       "rollouts no ranking (LDS undefined)"}
    lds, boot = _lds(evidence, seed, JUDGED, scores)
    lo, hi = percentile_ci(boot[0], ALPHA)
    base = baseline_figures(evidence, seed)
    diffs = {b: percentile_ci(boot[0] - base["boot"][i], ALPHA) for i, b in enumerate(BASELINES)}
    beaten = {b: d[0] > 0 for b, d in diffs.items()}
    ok = lo > 0 and all(beaten.values())
    lost = [b for b, v in beaten.items() if not v]
    ceil = base["ceiling"]
    why = (f"local LDS {fmt(float(lds[0]))} [{fmt(lo)}, {fmt(hi)}] over {y.size} subsets ({level}), "
           f"{fmt(_share(float(lds[0]), ceil))} of the ceiling (metagrad {fmt(ceil)}); "
           + ", ".join(f"{b} {fmt(base['lds'][b])}" for b in BASELINES)
           + (f"; not beaten (paired CI): {', '.join(lost)}" if lost else ""))
    return {"lds": float(lds[0]), "ci": [lo, hi], "level": level, "n_subsets": int(y.size),
            "diff_ci": {b: list(d) for b, d in diffs.items()}, "baselines_lds": base["lds"],
            "baselines_ci": {b: list(c) for b, c in base["ci"].items()}, "ceiling": ceil,
            "ceiling_ci": base["ceiling_ci"], "ceiling_features": f"{CEILING}'s LDS on the same subsets",
            "share": _share(float(lds[0]), ceil),
            "baselines_share": {b: _share(v, ceil) for b, v in base["lds"].items()},
            "half_window": reported(evidence, seed, scores),
            "margin": lo, "chance_margin": float(lds[0]),
            "versus": {"LDS 0": {"value": float(lds[0]), "ci": [lo, hi]},
                       **{b: {"value": float(lds[0]) - base["lds"][b], "ci": list(diffs[b])} for b in BASELINES}},
            "status": Status.PASS if ok else Status.FAIL, "why": why}


def evaluate(spec: EstimatorSpec, evidence: Evidence) -> Verdict:
    return seed_verdict(NAME, evaluate_seed, spec, evidence, headline="lds", margin=MARGIN,
                        extra={"n_boot": N_BOOT, "alpha": ALPHA, "baselines": list(BASELINES),
                               "judged_subsets": JUDGED, "reported_subsets": REPORTED, "ceiling": CEILING})


ITEM = Item(NAME, TITLE, "estimator", evaluate, reference="causal ground truth (LDS, TRAK/dattri)", headline="lds")
