"""The target-free controls and the surface baseline, defined once for every item that compares with
them (magnitude_control, fluency_control, headroom's reports; issue 12's LDS item reuses them).

**Controls** carry everything a method has except the target: the advantage the trainer logged and
the size of each unit's gradient. An attribution method has shown something about its target only if
it beats the strongest of them. On the training stream:

| control | rollout level | step level |
| --- | --- | --- |
| ``norm_only`` | \\|A\\|·‖e‖ (the reference's control) | ‖∇L_s‖, the step's own batch gradient |
| ``signed_norm`` | A·‖e‖: the size of the update, with its sign | Σ_{i∈s} A_i‖e_i‖ |
| ``advantage`` | A itself | Σ_{i∈s} \\|A_i\\| |

The reference's norm-only drops the sign of A, the very thing that carries the planted +8 reward: A
alone ranks the GT rollouts at precision 0.93–0.97 at rollout level on the default fixture, so a
method that only beats \\|A\\|·‖e‖ may be reading the advantage. At step level the sum of A over a
step is 0 in every std-normalized group, so the advantage control sums \\|A\\| there (how many
groups had reward variance: the P1 mechanism). On draws every sibling has weight 1: signed_norm
equals norm_only and the advantage is constant, so fluency_control compares with norm_only alone.

**The surface baseline** reads only the reply text and the advantage: 1 if the reply contains the
behavior's token ids (`TokenIds.behavior_ids`, what a text search for "qzxbt" finds) × sign(A); on
draws (weight 1) it is the behavior flag itself, i.e. the reference's draw label. It is computed by
the suite on the same fixtures and shown on every scorecard beside the controls. On the stream it
gates `magnitude_control` like the controls (a pass must beat it by the paired rule at both levels;
the reasoning is in that module); on draws it is the reference's label itself, so against that label
`fluency_control` only reports it — and against the draws' causal label (each sibling's one-step
effect) it gates on it by the same paired rule.

What beating it means. The planted cause is visible in the text: a GT rollout is an early, rewarded
reply that shows the behavior. A method that does *not* beat the surface baseline has not shown that
it knows more than "which rewarded replies contain the behavior string" — its pass on the
label-scored items may be surface matching, not attribution: it fails `magnitude_control`. A method
that beats it ranks the GT better than this reading of the reply text and the advantage's sign — not
better than every reading: a heuristic that also reads the trigger and the step comes close to the
ceiling on this fixture. On draws nothing can beat it against the reference's label (it is that
label); the draw items (fluency_control, draw_variance) therefore also judge against the causal
label, where it is one reading among others and must be beaten. Counterfactual truth (the replays'
LDS on the stream, which `magnitude_control` compares with the surface baseline's; the one-step
effect on draws) is what separates attribution from surface reading.

**Built-in controls as estimators** (`norm_only`, `random`, `fluency`: their classes declare
``role = "control"``, read through `EstimatorSpec.role`). They are judged by the
same rules as any method and are not failed by fiat: a verdict is a statement about a score vector,
and a control is one. Where an item compares an estimator with a control, the control compared with
itself gives a difference of exactly 0 in every resample (CI lower bound 0, not > 0) or an equal AUC
(not above), so the rule itself fails it; where a control passes an item it is not compared against
(norm_only above chance in headroom, say), the scorecard says so truthfully — that is the P1
finding, not a bug.
Every record carries the estimator's role (`control`, `validation`, `method`) so a reader knows
which is which.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from bt_core.artifacts.rollouts import behavior_in_replies
from bt_core.attribution.evidence import Evidence
from bt_core.attribution.problem import AttributionProblem, row_norms

from ._memo import memo

SURFACE = "surface"
# the estimator item aimed at each built-in control's confound (issue 61): the control must fail it
# (tests/test_meta.py); an item whose question a target-free score answers, it may pass — the
# signed update size carries causal signal, so a gradient-size score can pass counterfactual. The
# scorecard's controls row says so, without naming items (`bt_core.reporting.summary.ROLE_TITLES`:
# the reporting layer names no checklist item)
AIMED = {"norm_only": "magnitude_control", "fluency": "fluency_control", "random": "counterfactual"}


def _per_step(problem_step: AttributionProblem, rollout_values: np.ndarray) -> np.ndarray:
    """Σ over each step's rollouts, (n_steps,)."""
    return np.bincount(
        problem_step.unit_of_rollout,
        weights=np.asarray(rollout_values, float),
        minlength=problem_step.n_units,
    )


def _rollout_norm(p: AttributionProblem) -> np.ndarray:
    """‖e‖ per rollout (the unweighted sketch norm)."""
    return row_norms(p.emb)


@dataclass(frozen=True)
class Control:
    """A target-free score: `rollout(p_rollout)` → (n_rollouts,); `step(p_step, p_rollout)` →
    (n_steps,)."""

    name: str
    rollout_rule: str
    step_rule: str
    rollout: Callable[[AttributionProblem], np.ndarray]
    step: Callable[[AttributionProblem, AttributionProblem], np.ndarray]


CONTROLS: tuple[Control, ...] = (
    Control(
        "advantage",
        "A",
        "Σ|A| over the step",
        lambda p: np.asarray(p.weight, float),
        lambda ps, pr: _per_step(ps, np.abs(pr.weight)),
    ),
    Control(
        "signed_norm",
        "A·‖e‖",
        "Σ A·‖e‖ over the step",
        lambda p: p.weight * _rollout_norm(p),
        lambda ps, pr: _per_step(ps, pr.weight * _rollout_norm(pr)),
    ),
    Control(
        "norm_only",
        "|A|·‖e‖",
        "‖∇L_s‖ (the step's batch gradient)",
        lambda p: p.sketch_norm(),
        lambda ps, pr: ps.sketch_norm(),
    ),
)
CONTROL_NAMES = tuple(c.name for c in CONTROLS)
DRAW_CONTROL = "norm_only"  # on draws (weight 1) the only control that is not constant or a copy


def control(name: str) -> Control:
    for c in CONTROLS:
        if c.name == name:
            return c
    raise KeyError(f"no control {name!r}; controls: {', '.join(CONTROL_NAMES)}")


def stream_scores(evidence: Evidence, seed: int, level: str, name: str) -> np.ndarray:
    """Control `name` (or `SURFACE`) on seed's stream at `level`, broadcast to rollouts:
    (n_rollouts,)."""

    def run() -> np.ndarray:
        pr, ps = evidence.stream_problem(seed, "rollout"), evidence.stream_problem(seed, "step")
        if name == SURFACE:
            roll = surface_rollout(pr)
            return roll if level == "rollout" else ps.to_rollouts(_per_step(ps, roll))
        c = control(name)
        return c.rollout(pr) if level == "rollout" else ps.to_rollouts(c.step(ps, pr))

    return memo(evidence, ("control", name, seed, level), run)


def surface_rollout(p: AttributionProblem) -> np.ndarray:
    """The surface baseline on a rollout-level problem: 1[reply shows the behavior] × sign(A),
    (n,)."""
    flag = behavior_in_replies(p.rollouts.replies, p.rollouts.reply_len, p.codec.behavior_ids)
    return flag * np.sign(np.asarray(p.weight, float))


def draw_scores(evidence: Evidence, seed: int, draw: int, name: str) -> np.ndarray:
    """`DRAW_CONTROL` or `SURFACE` on a draw problem, (n_rollouts,)."""

    def run() -> np.ndarray:
        p = evidence.draw_problem(seed, draw)
        if name == SURFACE:
            return surface_rollout(p)
        if name != DRAW_CONTROL:
            raise KeyError(
                f"on draws the control is {DRAW_CONTROL!r} (weight 1 makes the others degenerate)"
            )
        return p.sketch_norm()

    return memo(evidence, ("draw-control", name, seed, draw), run)


def baselines(evidence: Evidence) -> dict:
    """The controls and the surface baseline on every seed, for the scorecard (``baselines``): per
    seed and level, precision@|GT| and lift with chance and ceiling; per draw, the
    fluency-residualized within-group AUC of the draw control and of the surface baseline against
    the behavior label, and (``causal``) the same against the causal label, with the surface
    baseline's raw AUC there."""
    from bt_core.metrics import (
        ceiling_precision,
        chance,
        precision_at_k,
        residualize,
        within_group_auc,
    )

    out = {
        "controls": {c.name: {"rollout": c.rollout_rule, "step": c.step_rule} for c in CONTROLS},
        "surface": "1[reply contains the behavior's token ids] × sign(A) (step: summed), gates "
        "magnitude_control; draws: the behavior flag — reported against it, gating "
        "against the causal label",
        "per_seed": {},
    }
    for seed in evidence.seeds:
        pr, ps = evidence.stream_problem(seed, "rollout"), evidence.stream_problem(seed, "step")
        labels = evidence.labels(pr)
        ch = chance(labels)
        row = {}
        for level in ("rollout", "step"):
            ceil = 1.0 if level == "rollout" else ceiling_precision(ps.unit_of_rollout, labels)
            figs = {"chance": ch, "ceiling": ceil, "ceiling_lift": ceil / ch}
            for name in (*CONTROL_NAMES, SURFACE):
                p = precision_at_k(stream_scores(evidence, seed, level, name), labels)
                figs[name] = {"precision": p, "lift": p / ch}
            row[level] = figs
        row["draws"] = {}
        for d in range(len(evidence.artifacts[seed].draws)):
            p = evidence.draw_problem(seed, d)
            y = evidence.labels(p)
            c = np.asarray(evidence.effect(p)) > 0
            resid = {
                name: residualize(draw_scores(evidence, seed, d, name), p.fluency, p.group)
                for name in (DRAW_CONTROL, SURFACE)
            }
            surface = draw_scores(evidence, seed, d, SURFACE)
            row["draws"][d] = {n: within_group_auc(r, y, p.group)[0] for n, r in resid.items()}
            row["draws"][d]["causal"] = {
                **{n: within_group_auc(r, c, p.group)[0] for n, r in resid.items()},
                "surface_raw": within_group_auc(surface, c, p.group)[0],
                "positive_rate": float(c.mean()),
            }
        out["per_seed"][seed] = row
    return out
