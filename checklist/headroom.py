"""Checklist item 2 — headroom (reference finding P2).

The question: is the room between chance and the ideal wide enough, and does the method use enough
of it? It has two views (issue 48; `_base.VIEWS`).

**The causal view** (gating by default). The truth is the replayed counterfactual on the stream:
the LDS that `counterfactual` measures (the rank correlation between a method's summed scores and
the behavior's measured change over the judged reweighted subsets: `counterfactual.estimator_lds`,
the measurement shared, not counterfactual's verdict). Per seed:

* the floor: the strongest target-free control's LDS on the same subsets (advantage, signed_norm,
  norm_only, reply text × sign(A): what a ranking reaches without the target or the gradient's
  direction), or chance (LDS 0) where every control is below it;
* the ceiling: the ideal's LDS, `metagrad` (the exact first-order influence, counterfactual's
  ceiling);
* room: the ceiling must beat the floor beyond the subsets' resampling (the 2.5th percentile of the
  paired bootstrap of ceiling − floor > 0, counterfactual's resamples); otherwise the seed is
  invalid-setup, the reference's P2 situation: no method can be judged where even the ideal does
  not stand out;
* the rule: LDS > floor + SHARE · (ceiling − floor): the method takes more than half the room (SHARE
  as below, fixed before any built-in was scored under it). The margin that seed_variance spreads is
  that share − SHARE.

How it differs from `magnitude_control`'s causal form on the same LDS: magnitude asks whether the
method beats every control beyond resampling (a paired CI above 0, however small the lead);
headroom asks how much of what can be found it finds (an effect size, half the room). A method
that edges past the controls on every seed passes the first and fails the second, as the reference
separated P1 from P2.
Where it is a consistency check: `metagrad`'s own LDS is the ceiling, so it takes all the room on
every seed that has room, by construction; the item then asks whether the room exists.

**Why not top-k removal** (issue 48 proposed it: the method's top-k rollouts removed move the
behavior beyond random removals by a share of what the ideal's top-k moves;
`checklist/topk_removal.py` holds the measure). Measured on two freshly keyed default builds (k =
240): the ideal's top-k removal moved the behavior −0.36 to 7.09 nats over ten seeds, less than
signed_norm's (5.83–12.10) on every one and less than the advantage's on 8 of 10
(docs/counterfactual.md has the table). The
rollouts with the largest first-order effects are not the set whose whole removal moves the
behavior most. So a floor holding the controls leaves no room on any seed measured (judging
nothing), and a floor of random removals alone is cleared by ranking the advantage, which the
adversaries `advantage_only` and `advantage_both` do: the form cannot be both passable by the ideal
and closed to the controls at default.

**The reference view** (the planted labels, as the reference's P2; the rule kept unchanged).
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
from bt_core.metrics import (
    ceiling_precision,
    chance,
    percentile_ci,
    precision_at_k,
    random_spread,
)
from bt_core.reporting.scorecard import FAIL_FIRST, Status, Verdict, worst_status

from . import counterfactual
from ._base import CAUSAL, REFERENCE, Item, fmt
from ._common import level_scores, seed_verdict
from ._memo import memo

NAME = "headroom"
TITLE = (
    "recovers more than half of the room between chance and the ideal (causal: its LDS above the "
    "strongest control's; reference: precision inside the trained window, at both levels)"
)
# per-seed figure compared against a baseline scorecard (--scorecard-compare), per view
HEADLINES = {CAUSAL: "room_share", REFERENCE: "precision"}
SPREAD_QUANTILE = 0.95  # random's spread: this quantile of random precision − chance
SHARE = 0.5  # share of (ceiling − chance) an estimator must recover (see the module docstring)
N_PERM = 10_000  # random step orders behind the step-level spread
MARGIN = "precision@|GT| − the bar (chance + max(½ headroom, random's spread)), trained window"
CAUSAL_MARGIN = "share of the room (the ideal's LDS − the floor) its LDS takes, − ½"
IDEAL = counterfactual.CEILING  # its LDS is the ceiling (the exact first-order influence)


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
    """The seed's planted-label figures and its verdict in both views (``views``)."""
    r = reference_seed(spec, evidence, seed)
    verdict = {k: r[k] for k in ("status", "why", "margin", "chance_margin") if k in r}
    if "versus" in r:
        verdict["versus"] = r["versus"]
    return {**r, "views": {REFERENCE: verdict, CAUSAL: causal_seed(spec, evidence, seed)}}


def reference_seed(spec: EstimatorSpec, evidence: Evidence, seed: int) -> dict:
    """The planted-label figures and the reference view's verdict (no replay is read)."""
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


def strongest_control(controls_lds: dict[str, float]) -> str | None:
    """The control with the highest LDS, NaNs (a constant prediction) skipped; None if none has
    one. Its LDS, or chance (0) where it is below 0, is the causal view's floor."""
    finite = {n: float(v) for n, v in controls_lds.items() if v == v}
    return max(finite, key=finite.get) if finite else None


def room_figures(controls_lds: dict[str, float], ceiling: float, room_ci_lo: float) -> dict:
    """The causal view's setup on one seed's figures: the floor (the strongest target-free
    control's LDS, or chance, LDS 0, where every control is below it), the ceiling (the ideal's
    LDS on the same subsets), the room between them, and ``valid`` iff there is room beyond the
    subsets' resampling: room > 0 and `room_ci_lo` (the 2.5th percentile of the paired bootstrap of
    ceiling − floor) > 0. A NaN ceiling (no ideal) leaves no room."""
    strongest = strongest_control(controls_lds)
    if strongest is None:  # no control was measured: no floor, no room
        return {"controls_lds": dict(controls_lds), "valid": False, "room": float("nan")}
    best = float(controls_lds[strongest])
    floor = max(0.0, best)
    room = float(ceiling) - floor
    return {
        "controls_lds": dict(controls_lds),
        "strongest_control": strongest,
        "floor": floor,
        "floor_is": strongest if best >= 0 else "chance (LDS 0)",
        "ceiling": float(ceiling),
        "room": room,
        "room_ci_lo": float(room_ci_lo),
        "valid": bool(room > 0 and room_ci_lo > 0),
    }


def room_share(lds: float, room: dict) -> tuple[float, bool]:
    """(the share of the room above the floor that an LDS takes, whether it is more than SHARE)."""
    share = (lds - room["floor"]) / room["room"]
    return share, bool(share > SHARE)


def causal_room(evidence: Evidence, seed: int) -> dict:
    """What the replayed truth leaves to be found on one seed (estimator-independent, memoized):
    the floor, the ideal's LDS and the room between; ``valid`` False, with ``why``, where the seed
    has no judged subsets, no ideal or no room."""

    def run() -> dict:
        if counterfactual.subsets(evidence, seed) is None:
            return {
                "valid": False,
                "why": f"no {counterfactual.JUDGED}_<i> counterfactual replays for this seed",
            }
        base = counterfactual.baseline_figures(evidence, seed)
        ceiling_boot = base.get("ceiling_boot")
        if ceiling_boot is None:
            return {"valid": False, "why": f"no ideal ({IDEAL}) scores for this seed"}
        strongest = strongest_control(base["lds"])
        if strongest is None:
            return {"valid": False, "why": "no control's LDS could be measured on this seed"}
        floor_boot = (  # paired with the ceiling's: the same resamples (chance: 0 on every one)
            base["boot"][list(counterfactual.BASELINES).index(strongest)]
            if base["lds"][strongest] >= 0
            else np.zeros_like(ceiling_boot)
        )
        lo = percentile_ci(ceiling_boot - floor_boot, counterfactual.ALPHA)[0]
        out = room_figures(base["lds"], base["ceiling"], lo)
        if not out["valid"]:
            out["why"] = (
                f"no room: the ideal's ({IDEAL}) LDS {fmt(out['ceiling'])} does not beat the floor "
                f"{fmt(out['floor'])} ({out['floor_is']}) beyond resampling (paired CI low "
                f"{fmt(lo)})"
            )
        return out

    return memo(evidence, ("headroom-causal-room", seed), run)


def causal_seed(spec: EstimatorSpec, evidence: Evidence, seed: int) -> dict:
    """The seed's verdict in the causal view (module docstring): the share of the room between the
    floor and the ideal that the method's LDS takes (counterfactual's measurement, shared, not
    recomputed)."""
    nan = float("nan")
    # every return names its own comparisons (none here): the reference's stay in its view
    bad = counterfactual.unjudged(evidence, seed)
    if bad is not None:
        return {**bad, "margin": nan, "chance_margin": nan, "versus": {}}
    c = counterfactual.estimator_lds(spec, evidence, seed)  # the LDS, measured once
    room = causal_room(evidence, seed)
    if not room["valid"]:
        return {
            "versus": {},
            "room": room,
            "status": Status.INVALID_SETUP,
            "why": room["why"] + " (invalid-setup)",
            "margin": nan,
            "chance_margin": nan,
        }
    if c["lds"] != c["lds"]:  # a constant prediction: no LDS (counterfactual's own reason)
        return {
            "versus": {},
            "room": room,
            "status": Status.FAIL,
            "why": counterfactual.constant(c),
            "margin": nan,
            "chance_margin": nan,
        }
    share, ok = room_share(c["lds"], room)
    why = (
        f"LDS {fmt(c['lds'])} takes {fmt(share)} of the room above the floor "
        f"{fmt(room['floor'])} ({room['floor_is']}) to the ideal's {fmt(room['ceiling'])}; bar "
        f"more than {SHARE:g}" + ("" if ok else " ✗")
    )
    return {
        "room": room,
        "causal_lds": c["lds"],
        "room_share": share,
        "status": Status.PASS if ok else Status.FAIL,
        "margin": share - SHARE,
        "chance_margin": c["lds"],
        "versus": {"½ the room above the floor": {"value": share - SHARE, "ci": None}},
        "why": why,
        "short": "" if ok else f"takes {fmt(share)} of the room to the ideal (bar {SHARE:g})",
    }


def evaluate(spec: EstimatorSpec, evidence: Evidence, view: str = CAUSAL) -> Verdict:
    return seed_verdict(
        NAME,
        evaluate_seed,
        spec,
        evidence,
        headline=HEADLINES,
        margin={CAUSAL: CAUSAL_MARGIN, REFERENCE: MARGIN}[view],
        view=view,
        extra={"share": SHARE, "spread_quantile": SPREAD_QUANTILE, "ideal": IDEAL},
    )


ITEM = Item(
    NAME,
    TITLE,
    "estimator",
    evaluate,
    reference="P2",
    headline=HEADLINES,
    views=(CAUSAL, REFERENCE),
)
