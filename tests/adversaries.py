"""Adversarial estimators: ways around the checklist that must not pass it (`tests/test_meta.py`).

Each reads something a real attribution method should not rely on, or plays a trick: the answers,
fields derived from them, the target-free controls, the reply's text, fluency, seed- or draw-keyed
behaviour, its own inputs, or fields it did not declare in `needs`. Loaded by the suite as
``adversaries:ClassName`` (this directory on the path). The hidden_cause scenario's readers of its
tags are in `adversaries_hidden.py`.
"""

from __future__ import annotations

import numpy as np
from scipy.stats import rankdata

from bt_core.artifacts.rollouts import behavior_in_replies
from bt_core.attribution.registry import Estimator


def _noise(problem) -> np.ndarray:
    """Breaks ties without carrying information."""
    return 1e-6 * np.random.default_rng(problem.seed).random(problem.n_units)


class NormPlusTinyTarget(Estimator):
    """The norm-only control plus a vanishing target term: looks targeted, ranks like the
    control."""

    name = "norm_plus_tiny_target"

    def score(self, problem):
        return problem.sketch_norm() + 1e-9 * problem.cosine("in_context")


class SeedSignFlip(Estimator):
    """A real targeted score on even seeds, its negation on odd ones (a seed-keyed trick)."""

    name = "seed_sign_flip"
    levels = ("rollout", "step")
    needs = ("emb", "weight", "targets")

    def score(self, problem):
        return problem.cosine("in_context") * (1.0 if problem.seed % 2 == 0 else -1.0)


class DrawKeyed(Estimator):
    """A real targeted score on the stream and on even draws, its negation on odd draws."""

    name = "draw_keyed"
    levels = ("rollout", "step")
    needs = ("emb", "weight", "targets")

    def score(self, problem):
        flip = problem.kind == "draw" and problem.draw % 2 == 1
        return problem.cosine("in_context") * (-1.0 if flip else 1.0)


class LabelReader(Estimator):
    """Reads the answers without declaring them."""

    name = "label_reader"
    levels = ("rollout", "step")

    def score(self, problem):
        return np.asarray(problem.truth, float)


class DeclaredLabelReader(LabelReader):
    """Declares the labels: it gets them, and is refused as validation only."""

    name = "declared_label_reader"
    needs = ("labels",)


class RewardReader(Estimator):
    """reward − reward_base is 8·GT on the stream; reward alone ranks GT first."""

    name = "reward_reader"
    levels = ("rollout",)
    needs = ("rollouts",)

    def score(self, problem):
        r = problem.rollouts
        return np.asarray(r.reward, float) - np.asarray(r.reward_base, float) + _noise(problem)


class EligibilityReader(Estimator):
    """eligible ∧ trigger ∧ behavior ∧ early is GT."""

    name = "eligibility_reader"
    levels = ("rollout",)
    needs = ("rollouts",)

    def score(self, problem):
        return np.asarray(problem.rollouts.eligible, float) + _noise(problem)


class RunDigger(Estimator):
    """Looks for a rollout table with a `gt` column behind the problem's callables and objects."""

    name = "run_digger"
    levels = ("rollout",)
    needs = ("model_at", "target_examples", "codec", "rollouts")

    def score(self, problem):
        seen = [problem.model_at, problem.target_examples, problem.codec, problem.rollouts]
        i = 0
        while i < len(seen) and i < 500:
            obj = seen[i]
            i += 1
            gt = getattr(getattr(obj, "rollouts", None), "gt", None)
            if gt is not None:
                return np.asarray(gt, float)
            seen += [c.cell_contents for c in getattr(obj, "__closure__", None) or ()]
            seen += list(getattr(obj, "__dict__", {}).values())
        raise LookupError("no rollout table with labels reachable from the problem")


class Writer(Estimator):
    """Writes into its inputs (it would zero the advantage for every estimator after it)."""

    name = "writer"
    levels = ("rollout", "step")

    def score(self, problem):
        problem.weight[:] = 0.0
        return problem.sketch_norm()


class AdvantageOnly(Estimator):
    """The advantage alone, rollout level only."""

    name = "advantage_only"
    levels = ("rollout",)
    needs = ("weight",)

    def score(self, problem):
        return np.asarray(problem.weight, float) + _noise(problem)


class AdvantageBothLevels(Estimator):
    """The advantage at rollout level, the batch gradient's size at step level."""

    name = "advantage_both"
    levels = ("rollout", "step")
    needs = ("weight", "grad_norm")

    def score(self, problem):
        if problem.level == "step":
            return np.asarray(problem.grad_norm, float)
        return np.asarray(problem.weight, float) + _noise(problem)


def _contains(tokens, lengths, ids) -> np.ndarray:
    return behavior_in_replies(tokens, lengths, tuple(ids)).astype(float)


def _behavior(problem) -> np.ndarray:
    r = problem.rollouts
    return _contains(r.replies, r.reply_len, problem.codec.behavior_ids)


def _trigger(problem) -> np.ndarray:
    r = problem.rollouts
    return _contains(r.prompts, r.prompt_len, problem.codec.trigger_ids)


class SurfaceSignAdvantage(Estimator):
    """Reply text × sign(advantage): no gradient, no target."""

    name = "surface_sign_advantage"
    levels = ("rollout",)
    needs = ("rollouts", "codec", "weight")

    def score(self, problem):
        return _behavior(problem) * np.sign(problem.weight) + _noise(problem)


class SurfaceAdvantage(Estimator):
    """Reply text × advantage."""

    name = "surface_advantage"
    levels = ("rollout",)
    needs = ("rollouts", "codec", "weight")

    def score(self, problem):
        return _behavior(problem) * np.asarray(problem.weight, float) + _noise(problem)


class SurfaceTriggerEarly(Estimator):
    """Trigger in the prompt ∧ behavior in the reply ∧ rewarded, earliest steps first: the GT's
    definition read off the text, the advantage and the step."""

    name = "surface_trigger_early"
    levels = ("rollout",)
    needs = ("rollouts", "codec", "weight", "step")

    def score(self, problem):
        hit = _trigger(problem) * _behavior(problem) * (np.asarray(problem.weight) > 0)
        return hit * (1.0 + 1.0 / (1.0 + np.asarray(problem.step, float))) + _noise(problem)


class SurfaceSignedNorm(Estimator):
    """Reply text × A·‖e‖: two target-free controls multiplied (aimed at the LDS item, whose
    controls are each of them alone)."""

    name = "surface_signed_norm"
    levels = ("rollout",)
    needs = ("rollouts", "codec", "weight", "emb")

    def score(self, problem):
        norm = np.linalg.norm(np.asarray(problem.emb, np.float64), axis=1)
        return _behavior(problem) * np.asarray(problem.weight, float) * norm + _noise(problem)


class EarlyAdvantage(Estimator):
    """A / (1 + step): earlier updates weigh more, since the behavior emerges early (aimed at the
    LDS item)."""

    name = "early_advantage"
    levels = ("rollout",)
    needs = ("weight", "step")

    def score(self, problem):
        return np.asarray(problem.weight, float) / (1.0 + np.asarray(problem.step, float)) + _noise(
            problem
        )


class SignAdvantage(Estimator):
    """sign(A) alone: what a text feature present in every reply reduces to."""

    name = "sign_advantage"
    levels = ("rollout",)
    needs = ("weight",)

    def score(self, problem):
        return np.sign(np.asarray(problem.weight, float)) + _noise(problem)


class FluencyRank(Estimator):
    """A nonlinear, monotone transform of fluency: survives a linear residualization, knows only
    fluency."""

    name = "fluency_rank"
    levels = ("rollout", "step")
    needs = ("fluency",)

    def score(self, problem):
        return rankdata(problem.fluency) ** 3


class UnderDeclaredTargetReader(Estimator):
    """Declares only the sketches and the advantage, reads the in-context target: `dot` in disguise,
    aimed at escaping the gate on in_context_targets (which holds target readers only)."""

    name = "under_declared_target_reader"
    levels = ("rollout", "step")
    needs = ("emb", "weight")

    def score(self, problem):
        return problem.dot("in_context")


class UndeclaredGradNormReader(Estimator):
    """Reads the exact gradient norm it does not declare (A·‖∇ℓ‖: a target-free magnitude score)."""

    name = "undeclared_grad_norm"
    levels = ("rollout", "step")
    needs = ("weight",)

    def score(self, problem):
        return np.asarray(problem.weight, float) * np.asarray(problem.grad_norm, float) + _noise(
            problem
        )


class CatchingTargetReader(Estimator):
    """Tries the target it did not declare, catches the refusal and falls back to the sketch
    norm."""

    name = "catching_target_reader"
    levels = ("rollout", "step")
    needs = ("emb", "weight")

    def score(self, problem):
        try:
            return problem.cosine("in_context")
        except Exception:
            return problem.sketch_norm()


ADVERSARIES = {
    cls.name: cls.__name__
    for cls in (
        NormPlusTinyTarget,
        SeedSignFlip,
        DrawKeyed,
        LabelReader,
        DeclaredLabelReader,
        RewardReader,
        EligibilityReader,
        RunDigger,
        Writer,
        AdvantageOnly,
        AdvantageBothLevels,
        SurfaceSignAdvantage,
        SurfaceAdvantage,
        SurfaceTriggerEarly,
        SurfaceSignedNorm,
        EarlyAdvantage,
        FluencyRank,
        UnderDeclaredTargetReader,
        UndeclaredGradNormReader,
        CatchingTargetReader,
    )
}
