"""Top-k removal (measured, not adopted as a gate: see the end): retrain without what the method
ranks first (dattri's / quanda's top-k removal on the logged RL stream).

The question a user asks first of an attribution: "if I take out the rollouts you rank highest, does
the behavior go away?" For each seed, the estimator's top-k rollouts of the local pool (the trained
window without its first step, `bt_core.counterfactual.plan.local_pool`) are removed from the logged
updates and the stream is replayed to the measurement checkpoint exactly like the plan's replays
(`bt_core.pipeline.build_removal_replay`); the behavior change is Δ_top = NLL(without the top-k) −
NLL(full), the mean NLL of the behavior token on the held-out trigger probes (positive: the removed
rollouts had taught the behavior), as `causal_gt` and `counterfactual` measure it.

**k: the local subsets' size, k = round(local_fraction × |window|)** (5% of the window: 240 of
~4,800 rollouts at default, about a fifth of |GT|). Why not k = |GT| (the first version of this
item, measured and not adopted; its branch is recorded in main's history): at k = |GT| ≈ 25% of the
window the measure saturates. The behavior is planted redundantly — a random half of the window,
holding about half of GT, moves the NLL by only 0.03–0.16 nats, while every set holding nearly all
of GT moves it by 12–17 — so at |GT| the test asks "did you collect nearly all of GT", and the
advantage's, signed_norm's and the surface baseline's top-|GT| (89–100% GT) removed as much as GT
itself (default seed 0: advantage 16.28, GT 16.29 nats). The oracle failed every seed, a gate nobody
could pass. Below |GT| no ranking can take out the planted cause whole; what the removal then
measures is whether the first k rollouts are the ones that carry the behavior, the question a
ranking answers. 5% is the size the LDS found closest to first order (checklist/counterfactual.py:
the exact influence's local LDS was 0.64–0.83 on four of five default seeds, the half window
0.35–0.77), and it makes the random reference free: the plan's `local_<i>` removals are uniform
draws of exactly k rollouts from the same pool, already replayed (16 at default, 24 at smoke). The
pool excludes the window's first step for the reason the local subsets do (AdamW's first update acts
through sign flips); a method's ranking there is not judged. Leave-GT-out (the planted cause removed
whole) is reported beside every verdict as the scale of the measure.

**Why its own item, not part of `counterfactual`.** It asks a different question with a different
unit: the LDS asks whether the scores *predict* the effect of small random reweightings (a rank
correlation over subsets, judged by paired bootstrap CIs); top-k removal asks whether the *top of
the ranking* is causal, as a whole removal (one ΔNLL in nats against the controls' and random
removals' ΔNLL). A method may rank the decisive rollouts first and mispredict small random changes,
or the reverse, and each verdict should say which. Its replays are also built at judging time (one
per estimator and seed, keyed by the removed set), not by the seed's plan, so its cost and cache
behavior are its own.

**Ranking and ties.** Scores at rollout level (`_common.level_scores`: native, or a step-level-only
method's step scores broadcast to the step's rollouts). Only pool rollouts are ranked. Non-finite
scores rank last. Ties are broken by a fixed random priority per rollout
(`numpy.random.default_rng([run seed, TIE_TAG])`, the same for every estimator), never by row index:
rows are in step order and the GT rollouts are the early ones, so an index tie-break would hand a
step-level or tied method part of GT for free. The oracle's scores are the GT flags: its top-k is k
GT rollouts chosen by the tie-break. A method whose scores are constant over the pool ranks nothing:
it fails without a replay.

Rule, on every seed (unchanged from the k = |GT| version; only k and the random reference changed):

1. Δ_top > 0, Δ_top > every random removal's Δ, and Δ_top > mean + Z·SD of the random removals (Z =
   3), the random removals being the plan's ``local_<i>``: k rollouts drawn uniformly from the pool,
   the size of the top-k. This mirrors `causal_gt`: a handful of draws gives a noisy SD, so both the
   rank rule (above every draw) and the 3-SD rule (one-sided p ≈ 0.001 were the random Δs normal)
   are required.
2. Δ_top > Δ of the top-k removal of every target-free control (`controls.CONTROL_NAMES`: advantage,
   signed_norm, norm_only) and of the surface baseline (behavior text × sign(A)), ranked the same
   way. A replay is bit-exact and deterministic — there is no retraining noise, so each Δ is an
   exact figure, not a sample, and a point comparison is the fair one. A control compared with
   itself removes the same set: equal Δ, not greater, and the rule fails it without a special case.

A seed without replays, or whose local removals differ in size from k, is invalid-setup.

**What it measured** (after k and the rule were fixed; docs/counterfactual.md has the tables). Smoke
(k = 22): `metagrad`, `cosine`, `cosine_centred` and `dot`/`tracincp` pass every seed (ΔNLL 1.8–5.3
nats) against the controls' 0.06–2.8, the oracle's 0.07–0.37 and the random removals' bars
0.07–0.15. Default (k = 240, seeds 0–2): `dot`/`tracincp` pass every seed (9.76, 9.72, 9.14 nats
against signed_norm's 9.35, 7.95, 6.93 and advantage's 7.16, 7.38, 4.39), `cosine`, `cosine_centred`
and `tracin_adam` pass seeds 1–2; the oracle (0.45, 0.71, 0.29: k GT rollouts picked by the
tie-break), random and fluency fail. `metagrad` fails default seeds 0–2 (3.41, 0.32, 3.99): the
rollouts with the largest first-order effect are not the set whose whole removal weakens the
behavior most, the nonlinearity that took the LDS off whole removals (checklist/counterfactual.py).
The item asks the set-level question on purpose and reports that the causal ideal of the per-rollout
question does not answer it.

**Not adopted (not in `ESTIMATOR_ITEMS`).** Default seed 3 (k = 240): `signed_norm`'s top-k removes
12.65 nats and `advantage`'s 9.32; `cosine` passes (13.36), `dot`/`tracincp` fail (8.15), `metagrad`
fails (5.79). Seed 4: `metagrad` (5.27), `dot` (9.77) and `cosine` (9.55) pass. So `dot`/`tracincp`
pass seeds 0–2 and 4, `cosine` seeds 1–4, `metagrad` seed 4 only, the oracle none: no estimator, the
causal ideal and the oracle included, passes every default seed measured, and the item would be a
gate nobody can pass. At this k the controls' top-k (A·‖e‖ and A rank the boosted rollouts with the
largest update first: 234–240 of 240 are GT) remove as much of the behavior as the best attribution
on some seed. The module stays as the measured record (its unit tests run it at smoke); a smaller k
would be measured the same way, with its reasoning written first.

**Not adopted as `headroom`'s causal form either** (issue 48 proposed it: the method's top-k moves
the behavior beyond random removals by a share of what the ideal's top-k moves). Measured on two
freshly keyed default builds (2026-12-06; docs/counterfactual.md): the ideal's top-k moves the
behavior less than signed_norm's on every seed (and the advantage's on 8 of 10), so a floor holding
the controls leaves no room, and a floor of random removals alone passes the adversaries that rank
the advantage.
`headroom`'s causal form is the share of the LDS room instead (checklist/headroom.py says why).
"""

from __future__ import annotations

import hashlib

import numpy as np

from bt_core.attribution.evidence import Evidence
from bt_core.attribution.registry import EstimatorSpec
from bt_core.reporting.scorecard import Status, Verdict

from . import controls
from ._base import Item, fmt
from ._common import level_scores, seed_verdict
from ._memo import memo

NAME = "topk_removal"
TITLE = "removing its top-k rollouts weakens the behavior more than any control's or random removal"
Z = 3.0  # the top-k Δ must exceed the random removals' mean by Z SDs (and their maximum)
TIE_TAG = 0x70C  # key of the fixed random tie-break priority (with the run's seed)
BASELINES = (*controls.CONTROL_NAMES, controls.SURFACE)
MARGIN = "Δ NLL of its top-k removal over the compared removal's (nats)"
RANDOM = "local"  # plan prefix of the random removals: k rollouts drawn uniformly from the pool


def top_k(scores: np.ndarray, window: np.ndarray, k: int, seed: int) -> np.ndarray:
    """Sorted row indices of the k highest-scored rollouts of `window`; ties by a fixed random
    priority (seeded by `seed`, `TIE_TAG`), non-finite scores last. scores, window: (N,)."""
    idx = np.flatnonzero(np.asarray(window, bool))
    s = np.asarray(scores, float)[idx]
    s = np.where(np.isfinite(s), s, -np.inf)
    priority = np.random.default_rng([seed, TIE_TAG]).permutation(np.asarray(window).size)[idx]
    order = np.lexsort((priority, -s))  # last key first: score descending, then priority ascending
    return np.sort(idx[order[:k]]).astype(np.int64)


def judge(d_top: float, d_random: np.ndarray, d_baselines: dict[str, float]) -> dict:
    """The rule on one seed's figures (module docstring): pass/fail and each comparison's margin."""
    rnd = np.asarray(d_random, float)
    sd = float(rnd.std(ddof=1)) if rnd.size > 1 else float("nan")
    bar = float(rnd.mean() + Z * sd)
    beats_random = bool(d_top > 0 and rnd.size > 1 and d_top > rnd.max() and d_top > bar)
    beaten = {b: bool(d_top > v) for b, v in d_baselines.items()}
    versus = {
        "random mean+3SD": {"value": d_top - bar, "ci": None},
        "random max": {"value": d_top - float(rnd.max()), "ci": None},
        **{b: {"value": d_top - v, "ci": None} for b, v in d_baselines.items()},
    }
    ok = beats_random and all(beaten.values())
    return {
        "bar": bar,
        "random_mean": float(rnd.mean()),
        "random_sd": sd,
        "random_max": float(rnd.max()),
        "beats_random": beats_random,
        "beaten": beaten,
        "versus": versus,
        "margin": min(c["value"] for c in versus.values()),
        "chance_margin": d_top - float(rnd.mean()),
        "status": Status.PASS if ok else Status.FAIL,
    }


def removal_delta(evidence: Evidence, seed: int, removed: np.ndarray) -> float:
    """NLL(without `removed`) − NLL(full) at the measurement step; the replay is built (once, cached
    by the removed set) if no earlier session or plan built it."""
    from bt_core.pipeline import build_removal_replay

    a = evidence.artifacts[seed]
    sha = hashlib.sha256(np.ascontiguousarray(removed, dtype="<i8").tobytes()).hexdigest()
    return memo(
        evidence,
        ("topk-replay", seed, sha),
        lambda: build_removal_replay(a.replays, a.run, removed, "topk").nll - a.replays["full"].nll,
    )


def _pool_k(evidence: Evidence, seed: int) -> tuple[np.ndarray, int]:
    """(the pool (N,) bool, k) of one seed: the local subsets' pool and size (0 without them)."""
    from bt_core.counterfactual.plan import local_pool

    a = evidence.artifacts[seed]
    r = a.replays
    names = r.names(RANDOM)
    return local_pool(a.run.rollouts, r.window), int(r[names[0]].removed.size) if names else 0


def baseline_figures(evidence: Evidence, seed: int) -> dict:
    """Each baseline's top-k Δ and GT count, and the plan's random removals' Δ, of one seed."""

    def run() -> dict:
        r = evidence.artifacts[seed].replays
        pool, k = _pool_k(evidence, seed)
        sets = {
            b: top_k(controls.stream_scores(evidence, seed, "rollout", b), pool, k, seed)
            for b in BASELINES
        }
        return {
            "delta": {b: removal_delta(evidence, seed, s) for b, s in sets.items()},
            "gt_overlap": {b: int(np.isin(s, r["gt_out"].removed).sum()) for b, s in sets.items()},
            "random": [r.delta(n) for n in r.names(RANDOM)],
            "random_sizes": sorted({int(r[n].removed.size) for n in r.names(RANDOM)}),
            "delta_gt": r.delta("gt_out"),
        }

    return memo(evidence, ("topk-baselines", seed), run)


def _why(k: int, level: str, d: float, overlap: int, res: dict, base: dict) -> str:
    lost = [b for b, ok in res["beaten"].items() if not ok]
    return (
        f"ΔNLL without its top-{k} ({level}) {fmt(d)} ({overlap}/{k} GT; leave-GT-out "
        f"{fmt(base['delta_gt'])}) vs random {fmt(res['random_mean'])}±{fmt(res['random_sd'])} "
        f"(bar {fmt(res['bar'])}); "
        + ", ".join(f"{b} {fmt(base['delta'][b])}" for b in BASELINES)
        + (f"; not beaten: {', '.join(lost)}" if lost else "")
        + ("" if res["beats_random"] else "; not beyond the random removals")
    )


def evaluate_seed(spec: EstimatorSpec, evidence: Evidence, seed: int, draw: int = 0) -> dict:
    r = getattr(evidence.artifacts[seed], "replays", None)
    if r is None or len(r.names(RANDOM)) < 2:
        return {
            "status": Status.INVALID_SETUP,
            "why": f"no counterfactual replays ({RANDOM}_<i> random removals) for this seed",
        }
    pool, k = _pool_k(evidence, seed)
    base = baseline_figures(evidence, seed)
    if base["random_sizes"] != [k]:
        return {
            "status": Status.INVALID_SETUP,
            "why": f"the random removals remove {base['random_sizes']} rollouts, not k = {k}",
        }
    scores, level = level_scores(spec, evidence, seed, "rollout")
    if np.ptp(np.asarray(scores, float)[pool]) == 0:
        return {
            "delta": float("nan"),
            "level": level,
            "k": k,
            "margin": float("nan"),
            "chance_margin": float("nan"),
            "status": Status.FAIL,
            "why": "its scores are constant over the pool (the window without its first step): "
            "it ranks no rollout first",
        }
    top = top_k(scores, pool, k, seed)
    d = removal_delta(evidence, seed, top)
    res = judge(d, np.array(base["random"]), base["delta"])
    overlap = int(np.isin(top, r["gt_out"].removed).sum())
    return {
        "delta": d,
        "level": level,
        "k": k,
        "gt_in_top": overlap,
        "delta_gt": base["delta_gt"],
        "share_of_gt": d / base["delta_gt"] if base["delta_gt"] > 0 else float("nan"),
        "delta_random": base["random"],
        "baselines_delta": base["delta"],
        "baselines_gt_in_top": base["gt_overlap"],
        **{k2: v for k2, v in res.items() if k2 != "beaten"},
        "beaten": res["beaten"],
        "why": _why(k, level, d, overlap, res, base),
    }


def evaluate(spec: EstimatorSpec, evidence: Evidence) -> Verdict:
    tie = f"fixed random priority per rollout (rng [seed, {TIE_TAG:#x}])"
    return seed_verdict(
        NAME,
        evaluate_seed,
        spec,
        evidence,
        headline="delta",
        margin=MARGIN,
        extra={
            "z": Z,
            "baselines": list(BASELINES),
            "k": "local_fraction × |window|",
            "random_removals": RANDOM,
            "tie_rule": tie,
        },
    )


ITEM = Item(
    NAME,
    TITLE,
    "estimator",
    evaluate,
    reference="top-k removal (dattri/quanda), causal ground truth",
    headline="delta",
)
