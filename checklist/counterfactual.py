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
without its first step, and keeps those rollouts at weight 1 − δ (δ = `reweight_delta` = 1e-4)
instead of 1; each is replayed in float64 from step 0 beside a float64 replay of the logged stream
(`full_f64`). Reported beside it, not judged: the linearity ladder (below), the same subsets removed
whole (`local_<i>`, δ = 1) and, opt-in (`n_lds`), half-window removals (`lds_<i>`).

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

*Why float64.* The bit-exact replay has no retraining noise to average out, so small changes give
clean signal, but float32 rounding moved a δ = 0.01 response by 7% (local_0 of default seed 1:
−6.70e-5 in float32, −6.26e-5 in float64; at δ = 0.001 float32 was 70% off, float64 linear to 1%),
so the judged replays run in float64 (1.7× a float32 replay). At δ = 1e-4 the responses are 1e-8 to
1e-4 nats, and float64 rounding stays far below them: the linearity probe's central differences
agree to 3–4 digits from δ = 1e-4 down to 1e-6.

*Why δ = 1e-4* (issue 47; chosen from `metagrad`'s figures and the linearity probe alone, before
any other estimator was scored at it). At the first judged δ, 0.01, the exact ideal failed seeds on
some keys (fresh default keys: metagrad LDS 0.486 and 0.051 on seeds 0 and 1 of one, −0.465 on seed
0 of another) because the response was not first order there. `benchmarks/bench_linearity.py`
measures it: per seed, for 4 judged subsets, float64 replays at 1 ± δ; the second-order part over
the central difference, largest of the 4, at δ = 1e-2 / 1e-3 / 1e-4, on one fresh default key
(150-step preset): seed 0 0.019 / 0.0012 / 0.0001; seed 1 0.022 / 0.0022 / 0.0002; seed 2 4.0 /
0.40 / 0.040 (a subset whose first-order effect is ~1e-6 nats); seed 3 1.97 / 0.40 / 0.026; seed 4
1.26 / 0.57 / 0.061. metagrad's prediction over the central difference at 0.01 ranged over −0.19 to
0.48 on seed 3 and 0.88 to 2.6 on seed 4; at 1e-4, 0.95 to 1.05 and 1.11. Two mechanisms (measured
on another key): AdamW's sign-like updates where √v̂ is a few ε (a 1% reweighting flips a
coordinate's step-1 gradient sign), and gradient spikes where the clip switches on. The rule, fixed
in advance: the judged δ is the ladder's smallest rung, on every seed and key. Not a δ per seed (the
largest rung where the seed is first order): that needs the ladder's replays before the judged ones,
and where a larger δ is first order it gives the same truth to within its ratio.

*What the truth then is.* As δ → 0, Δ_m/δ → −Σ_{i∈m} ∂f/∂w_i: the exact first-order influence of the
subset through the logged updates, measured by replay. So `metagrad` passing is a consistency check
of the ideal against the replay engine, not evidence of skill; another method's LDS is its
agreement with that influence, the quantity any additive score is a model of. It is not the effect
of removing the subsets (reported: `local_removal`). Where first order stops is reported per seed:
the **linearity ladder** (`linear_<k>_<i>`: the first `n_linearity` = 4 judged subsets again at
δ = 1e-3 and 1e-2) gives each rung's largest departure of the slope Δ(δ)/δ from the slope at the
judged δ, and the **radius**, the largest rung up to which every departure is ≤ `FIRST_ORDER` (a
tenth; none where the first rung already departs). Every verdict's line shows it ("δ = 0.0001,
first order to δ = 0.001; at δ = 0.01 its slope is 130% off") and the LDS table has a row for it.

*The ceiling's own trajectory.* The replays run in float64 from step 0. `metagrad` used to recompute
its states from each stored float32 checkpoint (cast to float64), one interval at a time: the
derivative of a trajectory that the checkpoints' rounding moves. On a sensitive seed the slopes of
the two trajectories differ: on seed 4 above, metagrad over the central difference converged to 1.11
on all 4 subsets as δ went to 1e-6, and to 1.002 with the states recomputed from step 0 alone
(`bench_linearity.py`, whose `--states stored` gives the old restart); on seed 3 to 0.94–1.06 — a
spread that reorders subsets of close effect (a second fresh key's seed 3 had LDS 0.699 [0.277,
1.0], the only seed of 10 below 0.9; its cache was not kept, so whether this was its cause is not
shown). So the ceiling now differentiates the replays' own trajectory: one float64 sweep from step 0
keeps the states at every checkpoint and each segment restarts from them (`metagrad(states="auto")`:
"replayed" where those states fit in 1 GiB, every scale but real and paper;
`bt_core.counterfactual.metagrad`, "Whose trajectory"). A method may do the same: it reads only the
step-0 checkpoint and the logged stream.

*What the exact influence gave at δ = 0.01* (the judged δ before issue 47; measured after the rule
and that δ were fixed). Smoke, M = 24: LDS 0.99 [0.94, 1.00], 1.00 [0.98, 1.00], 1.00 [0.99,
1.00] on seeds 0–2 (local removals of the same subsets 0.91, 0.85, 0.94; half window 0.62, 0.19,
0.17). Not every subset is first order at δ = 0.01: on smoke seed 0 the subsets holding rollouts of
the window's second step (AdamW's second update, still near the sign regime of the first) depart by
up to 38% of the largest Δ (reweight_13: −1.11e-4 measured, −2.04e-4 predicted) and reach the
derivative only at δ = 1e-4 (−1.98e-2 per unit δ against −2.04e-2); without that step's rollouts δ =
0.01 is first order (9.31e-3 against 9.28e-3). The median subset is within 1%, and the Spearman
absorbs the rest. Default, M = 32: 1.00 [1.00, 1.00], 0.93 [0.83, 0.97], 1.00, 1.00, 1.00 on seeds
0–4 (the same subsets removed whole: 0.76, −0.16, 0.83, 0.83, 0.59; half window 0.09, 0.03, 0.69,
0.60, 0.32). Every other estimator measured stayed far below it (at most 0.72, `cosine` on seed 4; ≤
0.50 on seeds 0–3; docs/counterfactual.md has the table): the rule then (with its paired clause
against the controls, magnitude_control's since issue 61) separated the exact influence from its
approximations, where the removal rule had let the controls tie it.

**The question** (issue 61: one question per item): *does the method carry causal signal at all?*
Rule, on every seed, on the judged subsets: the 95% bootstrap CI over subsets (N_BOOT = 2000
percentile resamples of the M subsets) of the estimator's LDS has its lower bound > 0. Reported
beside it, not judged here: the LDS of every target-free control and of the surface baseline, the
ceiling (`metagrad`'s LDS on the same subsets) and each LDS as a share of it.

*Why this item no longer compares with the controls* (issue 61). Until then the rule also required
the paired CI of the LDS difference against every control and the surface baseline above 0, and
`magnitude_control`'s causal form was that same paired comparison without the first clause: the two
columns gave the same reason in every row ("loses to norm_only by 0.34") and passed or failed
together on every estimator measured (19 degraded copies of the ideal at default). The paired
comparison is now `magnitude_control`'s alone, the share of the room `headroom`'s, and this item
asks the first rung of the ladder: is there any causal signal in the ranking? The three form a
ladder on the stream, not strictly nested (beating the controls does not need an LDS above 0 where
every control's is below it; headroom's effect size on point estimates can be met by a method not
clear of one control by paired CI), and each reason names its own comparison, so a method learns
how far up it got. A target-free score may pass this item:
the signed update size A·‖e‖ does carry causal signal (a rollout with a larger, positively
weighted update moves the measure more). That is expected, and the item aimed at it,
`magnitude_control`, fails it. The gate, all six items together, is as strict as before: its
clauses are the old ones redistributed.

The oracle (GT counts) is not a perfect LDS predictor: a subset's GT count ignores every other
rollout's effect, and a random subset holds about its share of GT.
"""

from __future__ import annotations

import numpy as np

from bt_core.attribution.evidence import EstimatorFailure, Evidence
from bt_core.attribution.registry import EstimatorSpec
from bt_core.metrics import lds_bootstrap, percentile_ci, subset_sums
from bt_core.reporting import present as pr
from bt_core.reporting.scorecard import Status, Verdict

from . import controls
from ._base import CAUSAL, Item, fmt
from ._common import level_scores, seed_verdict
from ._memo import memo

NAME = "counterfactual"
TITLE = (
    "carries causal signal: its scores predict what replaying the stream with a subset "
    "down-weighted does (LDS CI above 0)"
)
N_BOOT = 2000  # bootstrap resamples of the subsets
ALPHA = 0.05  # two-sided: 95% percentile intervals
# the resample indices (shared by every estimator and control: differences are paired)
BOOT_SEED = 0xD5
BASELINES = (*controls.CONTROL_NAMES, controls.SURFACE)
MARGIN = "LDS above chance, 0 (bootstrap 95% CI over subsets)"
CHANCE = "chance (LDS 0)"  # the one comparison of its rule (issue 61)
JUDGED = "reweight"  # plan prefix of the judged subsets (local subsets at weight 1 − δ, float64)
REPORTED = {"local": "local_removal", "lds": "half_window"}  # reported prefix → its figures' key
CEILING = "metagrad"
LINEAR = "linear"  # plan prefix of the linearity ladder: judged subsets at larger δ (reported)
# a rung is first order while every probed subset's slope Δ(δ)/δ stays within a tenth of its slope
# at the judged δ: to leading order the probe's bar (second-order part at most a tenth of the
# first-order one, benchmarks/bench_linearity.py), though this one-sided slope also counts the
# odd orders the probe's central difference cancels
FIRST_ORDER = 0.1


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


def first_order_radius(rungs: list[tuple[float, float]], bar: float = FIRST_ORDER) -> float | None:
    """The largest δ of `rungs` ((δ, worst departure) pairs) up to which every rung, from the
    smallest up, departs by at most `bar`; None where the smallest already departs (a NaN departs).
    The one rule for the item's radius and `benchmarks/bench_linearity.py`'s."""
    out = None
    for d, worst in sorted(rungs):
        if not worst <= bar:
            break
        out = d
    return out


def linearity(evidence: Evidence, seed: int) -> dict | None:
    """Where the seed's response stops being first order (reported, never judged): for each rung δ
    of the ladder, the largest departure over the probed subsets of the slope Δ(δ)/δ from the same
    subset's slope at the judged δ, the subsets that moved nothing at the judged δ (no slope to
    depart from; left out), and the **radius**: the largest δ up to which every rung's departure is
    ≤ `FIRST_ORDER`, or None where the first rung already departs (then the ladder shows no δ above
    the judged one that is first order; the judged δ itself is the probe's to vouch for). None
    where the seed has no ladder."""
    r = getattr(evidence.artifacts[seed], "replays", None)
    if r is None or not r.names(LINEAR):
        return None

    def delta_of(name: str) -> float:
        return 1.0 - float(r[name].info["weight"])

    def run() -> dict:
        judged = delta_of(f"{JUDGED}_0")
        by_rung: dict[float, list[float]] = {}
        flat = set()
        for name in r.names(LINEAR):
            i = name.rsplit("_", 1)[1]  # linear_<k>_<i>: the judged subset reweight_<i>
            ref = r.delta(f"{JUDGED}_{i}") / judged
            d = delta_of(name)
            if ref:
                by_rung.setdefault(d, []).append(abs(r.delta(name) / d / ref - 1.0))
            else:
                flat.add(i)
                by_rung.setdefault(d, [])
        rungs = [
            {"delta": d, "departure": max(v) if v else float("nan")}
            for d, v in sorted(by_rung.items())
        ]
        return {
            "judged_delta": judged,
            "rungs": rungs,
            "radius": first_order_radius([(r["delta"], r["departure"]) for r in rungs]),
            "bar": FIRST_ORDER,
            "n_subsets": len(next(iter(by_rung.values()))),
            "n_flat": len(flat),
        }

    return memo(evidence, ("lds-linearity", seed), run)


def radius_text(lin: dict) -> str:
    """The radius as a table cell: "0.001", or "< 0.001" where the ladder's first rung departs."""
    if lin["radius"] is not None:
        return f"{lin['radius']:g}"
    return f"< {lin['rungs'][0]['delta']:g}" if lin["rungs"] else "—"


def linearity_phrase(lin: dict | None) -> str:
    """ "first order to δ = 0.001; at δ = 0.01 its slope is 62% off": the radius and the rung beyond
    it ("not first order at δ = 0.001 (its slope 40% off)" where the first rung departs)."""
    if not lin or not lin["rungs"]:
        return ""
    radius = lin["radius"] if lin["radius"] is not None else lin["judged_delta"]
    beyond = [r for r in lin["rungs"] if r["delta"] > radius]

    def off(rung: dict) -> str:
        x = rung["departure"]
        return f"{100 * x:.0f}% off" if x == x else "no slope to compare"

    if lin["radius"] is None:
        return f"not first order at δ = {beyond[0]['delta']:g} (its slope {off(beyond[0])})"
    past = f"; at δ = {beyond[0]['delta']:g} its slope is {off(beyond[0])}" if beyond else ""
    return f"first order to δ = {lin['radius']:g}{past}"


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
            # paired with the baselines' (the same resamples): headroom's room between them
            "ceiling_boot": boot[-1] if ceil is not None else None,
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


def estimator_lds(spec: EstimatorSpec, evidence: Evidence, seed: int) -> dict:
    """The estimator's LDS on the seed's judged subsets, measured once and shared (memoized) by the
    items that ask their own question of it: ``lds``, ``boot`` (its resamples, paired with
    `baseline_figures`' by BOOT_SEED), ``level`` and ``n_subsets``; ``lds`` NaN (and no ``boot``)
    where its prediction is the same for every subset. None where the seed has no judged subsets;
    raises EstimatorFailure."""

    def run() -> dict | None:
        data = subsets(evidence, seed)
        if data is None:
            return None
        x, y = data
        scores, level = level_scores(spec, evidence, seed, "rollout")
        out = {"level": level, "n_subsets": int(y.size), "scores": scores}
        if np.ptp(subset_sums(x, scores)) == 0:
            return {**out, "lds": float("nan")}
        lds, boot = _lds(evidence, seed, JUDGED, scores)
        return {**out, "lds": float(lds[0]), "boot": boot[0]}

    return memo(evidence, ("lds-estimator", spec.key, seed), run)


def unjudged(evidence: Evidence, seed: int) -> dict | None:
    """Why no estimator can be judged on the seed's replays (invalid-setup), or None."""
    data = subsets(evidence, seed)
    if data is None:
        return {
            "status": Status.INVALID_SETUP,
            "why": f"no {JUDGED}_<i> counterfactual replays were built for this seed "
            "(a cache built by an older plan?)",
        }
    if np.ptp(data[1]) == 0:
        return {
            "status": Status.INVALID_SETUP,
            "why": "every subset's replay measured the same behavior",
        }
    return None


def constant(e: dict) -> str:
    """The reason of a prediction that is the same for every subset (no LDS)."""
    return (
        f"its prediction is the same for all {e['n_subsets']} subsets: it gives the trained "
        "window's rollouts no ranking (LDS undefined)"
    )


def evaluate_seed(spec: EstimatorSpec, evidence: Evidence, seed: int, draw: int = 0) -> dict:
    bad = unjudged(evidence, seed)
    if bad is not None:
        return bad
    e = estimator_lds(spec, evidence, seed)
    level = e["level"]
    if e["lds"] != e["lds"]:  # e.g. a method that scores only steps outside the trained window
        return {
            "lds": float("nan"),
            "level": level,
            "n_subsets": e["n_subsets"],
            "margin": float("nan"),
            "chance_margin": float("nan"),
            "status": Status.FAIL,
            "why": constant(e),
        }
    scores, lds = e["scores"], e["lds"]
    lo, hi = percentile_ci(e["boot"], ALPHA)
    base = baseline_figures(evidence, seed)
    lin = linearity(evidence, seed)
    ok = lo > 0
    ceil = base["ceiling"]
    why = (
        f"LDS {fmt(lds)} [{fmt(lo)}, {fmt(hi)}] over {e['n_subsets']} reweighted subsets "
        f"({level}"
        + (f"; δ = {lin['judged_delta']:g}, {linearity_phrase(lin)}" if lin else "")
        + "): "
        + ("CI above 0" if ok else "CI lower ≤ 0, no causal signal shown")
        + f"; {fmt(_share(lds, ceil))} of the ideal (metagrad {fmt(ceil)}); reported: "
        + ", ".join(f"{b} {fmt(base['lds'][b])}" for b in BASELINES)
    )
    return {
        "lds": lds,
        "ci": [lo, hi],
        "level": level,
        "n_subsets": e["n_subsets"],
        "linearity": lin,
        "baselines_lds": base["lds"],
        "baselines_ci": {b: list(c) for b, c in base["ci"].items()},
        "ceiling": ceil,
        "ceiling_ci": base["ceiling_ci"],
        "ceiling_features": f"{CEILING}'s LDS on the same subsets",
        "share": _share(lds, ceil),
        "baselines_share": {b: _share(v, ceil) for b, v in base["lds"].items()},
        **{key: reported(evidence, seed, scores, prefix) for prefix, key in REPORTED.items()},
        "margin": lo,
        "chance_margin": lds,
        "versus": {CHANCE: {"value": lds, "ci": [lo, hi]}},
        "status": Status.PASS if ok else Status.FAIL,
        "why": why,
        "short": "" if ok else f"LDS CI [{fmt(lo)}, {fmt(hi)}] does not lie above 0",
    }


def evaluate(spec: EstimatorSpec, evidence: Evidence) -> Verdict:
    """Causal only (`ITEM.views`): the replays are the truth."""
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
    "bootstrap CI over the reweighted subsets: how well an estimator's summed scores predict what "
    "replaying the stream with those rollouts' weight lowered by a small δ (the table's judged δ) "
    "does to the behavior: the subsets' first-order influence. Right of the dashed 0 line is "
    "better than no information. "
    "The grey band holds the controls, the surface baseline and the ceiling (metagrad, the exact "
    "derivative); a pass needs the CI above 0 (beating the controls is magnitude_control's "
    "question, taking half the room to the ideal headroom's)."
)
TABLE = "Counterfactual LDS (Spearman of summed scores vs replayed ΔNLL over reweighted subsets)"
AXIS = "LDS: Spearman(summed scores of a reweighted subset, replayed Δ behavior NLL)"


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
    if all(per[s].get("linearity") for s in seeds):
        lin = {s: per[s]["linearity"] for s in seeds}
        rows.append(
            [
                "judged δ; first order to δ (linearity radius)",
                *(f"{lin[s]['judged_delta']:g}; {radius_text(lin[s])}" for s in seeds),
            ]
        )
    ceiling = {s: pr.point(per[s].get("ceiling")) for s in seeds}
    return rows, [*dots, pr.dot_row("ceiling (metagrad)", [ceiling], band=True)]


LADDER_CAPTION = (
    "Each judged rung of the ladder (docs/ladder.md: R0 the gradient dot product at the "
    "checkpoints … R5 the exact ideal, metagrad) by colour, every other estimator in grey: its "
    "causal LDS as a share of the ideal's (one marker per seed) against what scoring the seed's "
    "rollout-level stream problem cost in this session (wall seconds of the checklist's own "
    "timer, log axis; the first problem of a scoring process also pays its first calls, so "
    "compare within a seed). Higher at the same cost is better; the benchmark bench_ladder.py "
    "measures the costs in CPU seconds on one core."
)


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
    )
    shares = pr.ladder(
        "ladder",
        "lds",
        "From cheap to exact: the ladder",
        LADDER_CAPTION,
        rec,
        {s: f.get("share") for s, f in per.items()},
    )
    return pr.presentation(table, figure, shares, sections={"lds": {"title": "Counterfactual LDS"}})


ITEM = Item(
    NAME,
    TITLE,
    "estimator",
    evaluate,
    reference="causal ground truth (LDS, TRAK/dattri)",
    headline="lds",
    present=present,
    views=(CAUSAL,),
)
