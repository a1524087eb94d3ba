"""Checklist item 2 — headroom (reference finding P2).

Inside the trained window (steps with a nonzero batch gradient before the contaminator's cutoff:
`bt_core.counterfactual.plan.trained_window`, the window the replays' LDS subsets are drawn from)
the fixture leaves ceiling − chance to be found: at rollout level the ceiling is 1 (a perfect method
finds every GT rollout); at step level it is the best precision reachable when all rollouts of a
step tie (the reference's P2 quantity, ≈ 0.11 above chance there).

Rule, on every seed and at both levels (scores per level as in `_common.level_scores`):

* the level must leave room: ceiling − chance > random's spread (the 95th percentile of a random
  ranking's precision − chance: exact, hypergeometric, at rollout level; 10,000 random step orders
  at step level). Otherwise the level is invalid-setup — a bar inside random's noise separates
  nothing.
  At step level this is the reference's P2 judged; at rollout level it happens when the window holds
  too few rollouts (tested on synthetic evidence).
* the estimator must then clear the bar: precision − chance > max(SHARE · (ceiling − chance),
  spread).

A seed fails if either level fails, and is invalid-setup if a level has no room (and none failed): a
pass certifies headroom at both levels.

SHARE = 0.5, fixed before any built-in was run under this rule. Why a half: the bar must be a share
of what the fixture leaves, so that it means the same on a fixture with a low ceiling (step level)
and one with ceiling 1 (rollout level). The reference's P2 saw every step-level method, random
included, within ~0.03 of chance while ceiling − chance ≈ 0.11 — at most ~27% of the headroom — and
concluded that step-level capture cannot separate rollouts; a bar those results would clear
certifies nothing.
Half is the smallest round share above that with a plain meaning: the method ranks closer to the
ceiling than to chance, i.e. it recovers most of what can be recovered.
"""

from __future__ import annotations

import numpy as np

from bt_core.attribution.evidence import Evidence
from bt_core.attribution.registry import EstimatorSpec
from bt_core.counterfactual import plan as cf_plan
from bt_core.metrics import ceiling_precision, chance, precision_at_k, random_spread
from bt_core.reporting.scorecard import FAIL_FIRST, Status, Verdict, worst_status

from ._base import REFERENCE, Item, fmt
from ._common import level_scores, seed_verdict
from ._memo import memo

NAME = "headroom"
TITLE = (
    "recovers at least half of the headroom (ceiling − chance) inside the trained window, at both "
    "levels"
)
HEADLINE = "precision"  # figure compared against a baseline scorecard (--scorecard-compare)
SPREAD_QUANTILE = 0.95  # random's spread: this quantile of random precision − chance
SHARE = 0.5  # share of (ceiling − chance) an estimator must recover (see the module docstring)
N_PERM = 10_000  # random step orders behind the step-level spread
MARGIN = "precision@|GT| − the bar (chance + max(½ headroom, random's spread)), trained window"


def trained_window(evidence: Evidence, seed: int) -> np.ndarray:
    """Boolean mask over the stream's rollouts: nonzero-gradient steps before the cutoff (the
    replays' definition, which says why it is read from the advantages)."""
    run = evidence.artifacts[seed].run
    return cf_plan.trained_window(run.rollouts, run.config)


def level_setup(labels: np.ndarray, blocks: np.ndarray | None, seed: int) -> dict:
    """What a level leaves to be found (estimator-independent): chance, ceiling, random's spread,
    the bar, and whether there is room (`valid`). `blocks` (n,) ties rollouts (steps) or None
    (rollout level)."""
    labels = np.asarray(labels, bool)
    ch = chance(labels)
    ceil = 1.0 if blocks is None else ceiling_precision(blocks, labels)
    spread = random_spread(labels, blocks, N_PERM, SPREAD_QUANTILE, seed)
    room = ceil - ch
    return {
        "chance": ch,
        "ceiling": ceil,
        "headroom": room,
        "spread": spread,
        "bar": ch + max(SHARE * room, spread),
        "valid": bool(room > spread),
    }


def judge_level(scores: np.ndarray, labels: np.ndarray, setup: dict) -> dict:
    """One level's figures and status: invalid-setup without room, else pass iff precision > bar."""
    prec = precision_at_k(scores, labels)
    out = {
        **setup,
        "precision": prec,
        "share": (prec - setup["chance"]) / setup["headroom"]
        if setup["headroom"] > 0
        else float("nan"),
        "margin": prec - setup["bar"],
    }
    out["status"] = (
        Status.INVALID_SETUP
        if not setup["valid"]
        else Status.PASS
        if prec > setup["bar"]
        else Status.FAIL
    )
    return out


def window_setup(evidence: Evidence, seed: int) -> dict:
    """Setup-side figures of the window at both levels (memoized per seed)."""

    def run() -> dict:
        w = trained_window(evidence, seed)
        labels = np.asarray(evidence.artifacts[seed].run.rollouts.gt, bool)[w]
        steps = np.asarray(evidence.artifacts[seed].run.rollouts.step)[w]
        if not labels.any():
            return {"n": int(w.sum()), "gt": 0}
        return {
            "n": int(w.sum()),
            "gt": int(labels.sum()),
            "rollout": level_setup(labels, None, seed),
            "step": level_setup(labels, steps, seed),
        }

    return memo(evidence, ("headroom-window", seed), run)


def _why(level: str, f: dict) -> str:
    if f["status"] == Status.INVALID_SETUP:
        return (
            f"{level}: no room — ceiling − chance {fmt(f['headroom'])} ≤ random's spread "
            f"{fmt(f['spread'])} (invalid-setup)"
        )
    return (
        f"{level}: precision {fmt(f['precision'])} vs bar {fmt(f['bar'])} (chance "
        f"{fmt(f['chance'])}, ceiling {fmt(f['ceiling'])}, share {fmt(f['share'])} of the "
        "headroom)"
    ) + ("" if f["status"] == Status.PASS else " ✗")


def evaluate_seed(spec: EstimatorSpec, evidence: Evidence, seed: int, draw: int = 0) -> dict:
    w = trained_window(evidence, seed)
    ws = window_setup(evidence, seed)
    if ws["gt"] == 0:
        return {
            **ws,
            "status": Status.INVALID_SETUP,
            "why": "no GT rollout inside the trained window",
            "margin": float("nan"),
            "chance_margin": float("nan"),
        }
    labels = np.asarray(evidence.artifacts[seed].run.rollouts.gt, bool)[w]
    out = {"n": ws["n"], "gt": ws["gt"]}
    for level in ("rollout", "step"):
        scores, how = level_scores(spec, evidence, seed, level)
        out[level] = {**judge_level(scores[w], labels, ws[level]), "scores": how}
    # a failing level fails
    status = worst_status((out[lv]["status"] for lv in ("rollout", "step")), FAIL_FIRST)
    r = out["rollout"]
    return {
        **out,
        "precision": r["precision"],
        "chance": r["chance"],
        "bar": r["bar"],
        "status": status,
        "margin": min(out[lv]["margin"] for lv in ("rollout", "step")),
        "versus": {
            f"the bar ({lv})": {"value": out[lv]["margin"], "ci": None}
            for lv in ("rollout", "step")
            if out[lv]["status"] != Status.INVALID_SETUP
        },
        "chance_margin": r["precision"] - r["chance"],
        "why": f"{_why('rollout', r)}; {_why('step', out['step'])}",
    }


def evaluate(spec: EstimatorSpec, evidence: Evidence) -> Verdict:
    """The planted labels' form only, so far (`ITEM.views`)."""
    return seed_verdict(
        NAME,
        evaluate_seed,
        spec,
        evidence,
        headline=HEADLINE,
        margin=MARGIN,
        extra={"share": SHARE, "spread_quantile": SPREAD_QUANTILE},
    )


ITEM = Item(
    NAME, TITLE, "estimator", evaluate, reference="P2", headline=HEADLINE, views=(REFERENCE,)
)
