"""Estimator item — the linear datamodeling score (LDS) against counterfactual replays of the stream.

The other items score a method against labels that the reply's text and advantage give away. This one
scores it against what retraining actually does (TRAK's / dattri's LDS, on the logged RL stream): on every
seed, M random subsets of the trained window's rollouts (M = `CounterfactualConfig.n_lds`: 100 at the
default scale, 24 at smoke; each removes `lds_fraction` = 0.5 of the window, uniformly) are removed from
the logged updates and replayed to the measurement checkpoint (`bt_core.training.replay`); the measured
change is Δ_m = NLL_m − NLL_full of the behavior token on held-out trigger probes (positive: the subset
had taught the behavior). An estimator's prediction for subset m is the sum of its rollout scores over the
removed rollouts (an estimator with only a step level: its step score broadcast to each rollout of the
step, `AttributionProblem.to_rollouts`), so positive LDS means "high scores predict that removing those
rollouts weakens the behavior".

    LDS = Spearman(prediction_m, Δ_m) over the M subsets (scipy's average ranks)

Rule, fixed before any replay was scored, on every seed:

* the 95% bootstrap CI over subsets (N_BOOT = 2000 resamples of the M subsets, percentile interval) of
  the estimator's LDS has its lower bound > 0, and
* paired against every target-free control (`controls.CONTROL_NAMES`: advantage, signed_norm, norm_only)
  and the surface baseline (behavior text × sign(A)), the 95% CI of the LDS *difference*, over the same
  resample indices, has its lower bound > 0.

A control compared with itself differs by exactly 0 in every resample (lower bound 0, not > 0): the rule
fails it without a special case. Reported beside each verdict: every control's and the surface baseline's
LDS with CI, and the **ceiling**: a linear datamodel (ridge, λ by leave-one-out) fitted on half of the
subsets and Spearman-evaluated on the other half, both ways round. Its features are the number of
rollouts each subset removed from each step of the window, not one indicator per rollout: with thousands
of rollouts and M/2 fitted subsets a per-rollout datamodel is underdetermined and its held-out ρ is noise;
per-step counts (75 features at the default scale) are what M/2 subsets can fit. It is the ceiling of a
*step-level* linear datamodel — a rollout-level method may exceed it.

Why the oracle (GT labels) is not a perfect LDS predictor: its prediction is the number of GT rollouts a
subset removed. A random half of the window removes about half the GT, give or take a few rollouts
(hypergeometric), so that count hardly varies between subsets, while every non-GT rollout's effect (the
window's other rewarded rollouts reinforce what they did, the penalised ones suppress it) and the
nonlinearity of the measure vary a lot. The meta-test (tests/test_counterfactual.py) asserts what must
hold for it: its mean LDS over the seeds is above 0 and above random's.
"""

from __future__ import annotations

import numpy as np
from behaviortrace.checklist import controls
from behaviortrace.checklist._base import Item, fmt
from behaviortrace.checklist._common import level_scores, seed_verdict

from bt_core.attribution.evidence import Evidence
from bt_core.attribution.registry import EstimatorSpec
from bt_core.metrics import datamodel_ceiling, lds_bootstrap, percentile_ci, subset_sums
from bt_core.reporting.scorecard import Status, Verdict

NAME = "counterfactual"
TITLE = "scores predict what replaying the stream without a subset does (LDS), beyond every control"
N_BOOT = 2000  # bootstrap resamples of the subsets
ALPHA = 0.05  # two-sided: 95% percentile intervals
BOOT_SEED = 0xD5  # the resample indices (shared by every estimator and control: differences are paired)
BASELINES = (*controls.CONTROL_NAMES, controls.SURFACE)
MARGIN = "Δ LDS over the control (paired bootstrap 95% CI over subsets)"


def subsets(evidence: Evidence, seed: int) -> tuple[np.ndarray, np.ndarray] | None:
    """(indicators (M, N) bool, measured Δ NLL (M,)) of seed's LDS subsets; None without replays."""
    r = getattr(evidence.artifacts[seed], "replays", None)
    if r is None:
        return None
    return evidence.memo(("lds-subsets", seed), lambda: (
        r.indicators("lds"), np.array([r.delta(n) for n in r.names("lds")])))


def baseline_figures(evidence: Evidence, seed: int) -> dict:
    """Every control's and the surface baseline's LDS (with CI) and the datamodel ceiling on seed."""
    def run() -> dict:
        x, y = subsets(evidence, seed)
        preds = np.stack([subset_sums(x, controls.stream_scores(evidence, seed, "rollout", b)) for b in BASELINES])
        lds, boot = lds_bootstrap(preds, y, N_BOOT, BOOT_SEED)
        step = np.asarray(evidence.artifacts[seed].run.rollouts.step)
        used = np.unique(step[x.any(0) > 0])
        counts = x.astype(np.float64) @ (step[:, None] == used[None, :])  # (M, steps): removed per step (integers)
        return {"lds": {b: float(v) for b, v in zip(BASELINES, lds, strict=True)},
                "ci": {b: percentile_ci(bt, ALPHA) for b, bt in zip(BASELINES, boot, strict=True)},
                "boot": boot, "ceiling": datamodel_ceiling(counts, y, seed=BOOT_SEED), "n_ceiling_features": len(used)}
    return evidence.memo(("lds-baselines", seed), run)


def evaluate_seed(spec: EstimatorSpec, evidence: Evidence, seed: int, draw: int = 0) -> dict:
    data = subsets(evidence, seed)
    if data is None:
        return {"status": Status.INVALID_SETUP, "why": "no counterfactual replays were built for this seed"}
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
    lds, boot = lds_bootstrap(pred[None, :], y, N_BOOT, BOOT_SEED)
    lo, hi = percentile_ci(boot[0], ALPHA)
    base = baseline_figures(evidence, seed)
    diffs = {b: percentile_ci(boot[0] - base["boot"][i], ALPHA) for i, b in enumerate(BASELINES)}
    beaten = {b: d[0] > 0 for b, d in diffs.items()}
    ok = lo > 0 and all(beaten.values())
    lost = [b for b, v in beaten.items() if not v]
    why = (f"LDS {fmt(float(lds[0]))} [{fmt(lo)}, {fmt(hi)}] over {y.size} subsets ({level}); "
           + ", ".join(f"{b} {fmt(base['lds'][b])}" for b in BASELINES)
           + f"; ceiling {fmt(base['ceiling'])}" + (f"; not beaten (paired CI): {', '.join(lost)}" if lost else ""))
    return {"lds": float(lds[0]), "ci": [lo, hi], "level": level, "n_subsets": int(y.size),
            "diff_ci": {b: list(d) for b, d in diffs.items()}, "baselines_lds": base["lds"],
            "baselines_ci": {b: list(c) for b, c in base["ci"].items()}, "ceiling": base["ceiling"],
            "ceiling_features": f"removed rollouts per step ({base['n_ceiling_features']} steps)",
            "margin": lo, "chance_margin": float(lds[0]),
            "versus": {"LDS 0": {"value": float(lds[0]), "ci": [lo, hi]},
                       **{b: {"value": float(lds[0]) - base["lds"][b], "ci": list(diffs[b])} for b in BASELINES}},
            "status": Status.PASS if ok else Status.FAIL, "why": why}


def evaluate(spec: EstimatorSpec, evidence: Evidence) -> Verdict:
    return seed_verdict(NAME, evaluate_seed, spec, evidence, headline="lds", margin=MARGIN,
                        extra={"n_boot": N_BOOT, "alpha": ALPHA, "baselines": list(BASELINES)})


ITEM = Item(NAME, TITLE, "estimator", evaluate, reference="causal ground truth (LDS, TRAK/dattri)", headline="lds")
