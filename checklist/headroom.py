"""Checklist item 2 — headroom (reference finding P2).

Rule, on every seed, inside the trained window (steps with a nonzero batch gradient, ‖∇L_s‖ > 1e-6 ×
the median nonzero norm, before the contaminator's cutoff): the setup must leave room to be right —
ceiling − chance must exceed how far a random ranking reaches above chance (random's spread: the 95th
percentile of random rankings' precision − chance); otherwise the seed is invalid-setup, not a pass. The
estimator must then beat chance by more than random's spread: precision − chance > spread (the bar).
Judged at rollout level (ceiling 1: a perfect method finds every GT rollout); the step-level headroom
(ceiling with all rollouts of a step tied, random's spread over step rankings) is reported beside it —
the reference found every method, random included, within ~0.03 of chance there, with
ceiling − chance ≈ 0.11: step-level capture cannot separate rollouts.
"""

from __future__ import annotations

import numpy as np
from behaviortrace.checklist._base import Item, fmt
from behaviortrace.checklist._common import seed_verdict

from bt_core.attribution.evidence import Evidence
from bt_core.attribution.registry import EstimatorSpec
from bt_core.metrics import ceiling_precision, chance, precision_at_k, random_spread
from bt_core.reporting.scorecard import Verdict

NAME = "headroom"
TITLE = "beats chance by more than random's spread inside the trained window"
HEADLINE = "precision"  # figure compared against a baseline scorecard (--scorecard-compare)
NONZERO_REL = 1e-6  # a step is "trained" if its gradient norm exceeds this × the median nonzero norm
SPREAD_QUANTILE = 0.95  # random's spread: this quantile of random precision − chance
N_PERM = 200


def trained_window(evidence: Evidence, seed: int) -> np.ndarray:
    """Boolean mask over the stream's rollouts: nonzero-gradient steps before the cutoff."""
    a = evidence.artifacts[seed]
    norms = np.asarray(a.sketches.step_norm, float)
    nz = norms[norms > 0]
    trained_steps = np.asarray(a.sketches.steps)[norms > NONZERO_REL * (np.median(nz) if nz.size else 0.0)]
    step = np.asarray(a.run.rollouts.step)
    return np.isin(step, trained_steps) & (step < a.run.config.task.cutoff_step)


def window_figures(evidence: Evidence, seed: int) -> dict:
    """Setup-side figures of the window (estimator-independent, memoized)."""
    def run() -> dict:
        w = trained_window(evidence, seed)
        labels = np.asarray(evidence.artifacts[seed].run.rollouts.gt)[w]
        steps = np.asarray(evidence.artifacts[seed].run.rollouts.step)[w]
        if not labels.any():
            return {"n": int(w.sum()), "gt": 0}
        ch = chance(labels)
        return {"n": int(w.sum()), "gt": int(labels.sum()), "chance": ch,
                "rollout_spread": random_spread(labels, None, N_PERM, SPREAD_QUANTILE, seed),
                "step_ceiling": ceiling_precision(steps, labels),
                "step_spread": random_spread(labels, steps, N_PERM, SPREAD_QUANTILE, seed)}
    return evidence.memo(("headroom-window", seed), run)


def evaluate_seed(spec: EstimatorSpec, evidence: Evidence, seed: int, draw: int = 0) -> dict:
    w = trained_window(evidence, seed)
    f = dict(window_figures(evidence, seed))
    if f["gt"] == 0:
        return {**f, "status": "invalid-setup", "why": "no GT rollout inside the trained window"}
    f["step_headroom"] = f["step_ceiling"] - f["chance"]
    if "step" in spec.levels:
        ps = evidence.stream_problem(seed, "step")
        f["step_precision"] = precision_at_k(ps.to_rollouts(evidence.scores(spec, ps))[w], ps.labels[w])
    p = evidence.stream_problem(seed, "rollout")
    f["precision"] = precision_at_k(evidence.scores(spec, p)[w], p.labels[w])
    f["bar"] = f["chance"] + f["rollout_spread"]
    head = (f"window precision {fmt(f['precision'])} vs bar {fmt(f['bar'])} (chance {fmt(f['chance'])} + random "
            f"spread {fmt(f['rollout_spread'])}); step-level headroom {fmt(f['step_headroom'])} vs spread "
            f"{fmt(f['step_spread'])}")
    if 1.0 - f["chance"] <= f["rollout_spread"]:
        return {**f, "status": "invalid-setup", "why": head + " — no rollout-level headroom"}
    ok = f["precision"] - f["chance"] > f["rollout_spread"]
    return {**f, "status": "pass" if ok else "fail", "why": head + ("" if ok else " — not above the bar")}


def evaluate(spec: EstimatorSpec, evidence: Evidence) -> Verdict:
    return seed_verdict(NAME, evaluate_seed, spec, evidence, headline=HEADLINE,
                        extra={"spread_quantile": SPREAD_QUANTILE, "nonzero_rel": NONZERO_REL})


ITEM = Item(NAME, TITLE, "estimator", evaluate, reference="P2", headline=HEADLINE)
