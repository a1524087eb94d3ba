"""Evidence: the attribution problems built from every seed's artifacts, and memoized, validated scores.

Checklist items read only this object. A draw problem carries the targets of its own seeded draw (the
in-context target of draw d was sampled with draw d's seed); stream problems carry draw 0's.
Scores are computed once per (estimator, problem) and checked:
a wrong shape, NaN/inf, an all-constant vector or an exception inside `score` becomes an
`EstimatorFailure` that the item reports as a failed verdict naming the estimator and the problem.
"""

from __future__ import annotations

import traceback
from functools import cached_property

import numpy as np

from bt_core.artifacts.run import Run
from bt_core.artifacts.seed import SeedArtifacts
from bt_core.attribution.problem import AttributionProblem
from bt_core.attribution.registry import Declined, EstimatorSpec
from bt_core.extras import MissingExtra


def _model_at(run: Run):
    """checkpoint step → a fresh model of `run` there; the training stage (torch, transformers) is imported
    only when an estimator that computes its own gradients calls it."""

    def load(step: int):
        from bt_core.training.checkpoints import model_at

        return model_at(run, step)

    return load


def _examples_of(tg, draw: int):
    """(kind, checkpoint step) → the target's teacher-forced examples of seeded draw `draw`."""
    return lambda kind, step: tg.examples(kind, step, draw)


class EstimatorFailure(RuntimeError):
    """An estimator raised, or returned scores that cannot be ranked. `declined` is True when it raised
    `bt_core.attribution.registry.Declined`: a documented limitation (e.g. an adapter refusing the training
    stream). `missing_extra` holds the install message when it raised `bt_core.extras.MissingExtra`."""

    declined: bool = False
    missing_extra: str | None = None


class Evidence:
    def __init__(self, artifacts: dict[int, SeedArtifacts], scale: str, estimator_params: dict | None = None):
        self.artifacts = artifacts
        self.scale = scale
        self.estimator_params = estimator_params or {}
        self._problems: dict[tuple, AttributionProblem] = {}
        self._scores: dict[tuple, np.ndarray | EstimatorFailure] = {}
        self._estimators: dict[str, object] = {}
        self._memo: dict[tuple, object] = {}

    def memo(self, key: tuple, fn):
        """Compute `fn()` once per key for this session (checklist items share expensive figures)."""
        if key not in self._memo:
            self._memo[key] = fn()
        return self._memo[key]

    @cached_property
    def seeds(self) -> list[int]:
        return sorted(self.artifacts)

    # ------------------------------------------------------------------ problems
    def stream_problem(self, seed: int, level: str = "rollout") -> AttributionProblem:
        key = ("stream", seed, level)
        if key not in self._problems:
            self._problems[key] = self._stream(self.artifacts[seed], level)
        return self._problems[key]

    def draw_problem(self, seed: int, draw: int = 0) -> AttributionProblem:
        key = ("draw", seed, draw)
        if key not in self._problems:
            self._problems[key] = self._draw(self.artifacts[seed], draw)
        return self._problems[key]

    @staticmethod
    def _stream(a: SeedArtifacts, level: str) -> AttributionProblem:
        t, sk, tg = a.run.rollouts, a.sketches, a.targets
        step, gt = np.asarray(t.step), np.asarray(t.gt)
        common = dict(kind="stream", level=level, seed=a.run.seed, targets=tg.vectors,
                      checkpoint_steps=tg.steps, labels=gt, model_at=_model_at(a.run), codec=a.run.token_ids,
                      target_examples=_examples_of(tg, 0), draw=0)
        if level == "rollout":
            return AttributionProblem(
                emb=sk.emb, weight=np.asarray(t.advantage, np.float64), grad_norm=np.asarray(sk.grad_norm),
                fluency=np.asarray(sk.fluency), step=step, group=np.asarray(t.group), lr=np.asarray(t.lr),
                ckpt_index=tg.index_of(step), truth=gt.astype(float), unit_of_rollout=np.arange(len(t)),
                name=f"seed{a.run.seed}/stream/rollout", rollouts=t, **common)
        steps = np.asarray(sk.steps)
        unit = np.searchsorted(steps, step)
        counts = np.bincount(unit, minlength=len(steps))
        mean = lambda x: np.bincount(unit, weights=np.asarray(x, float), minlength=len(steps)) / counts  # noqa: E731
        return AttributionProblem(
            emb=np.asarray(sk.step_emb), weight=np.ones(len(steps)), grad_norm=np.asarray(sk.step_norm),
            fluency=mean(sk.fluency), step=steps, group=steps, lr=mean(t.lr), ckpt_index=tg.index_of(steps),
            truth=mean(gt), unit_of_rollout=unit, name=f"seed{a.run.seed}/stream/step", **common)

    @staticmethod
    def _draw(a: SeedArtifacts, draw: int) -> AttributionProblem:
        d = a.draws[draw]
        t, sk, tg = d.rollouts, d.sketches, a.targets
        beh = np.asarray(t.behavior)
        n = len(t)
        return AttributionProblem(
            kind="draw", level="rollout", seed=a.run.seed, emb=sk.emb, weight=np.ones(n),
            grad_norm=np.asarray(sk.grad_norm), fluency=np.asarray(sk.fluency), step=np.asarray(t.step),
            group=np.asarray(t.group), lr=np.full(n, a.run.config.grpo.lr),
            ckpt_index=tg.index_of(np.asarray(t.step)), targets=tg.for_draw(draw), checkpoint_steps=tg.steps,
            truth=beh.astype(float), unit_of_rollout=np.arange(n), labels=beh, model_at=_model_at(a.run),
            name=f"seed{a.run.seed}/draw{draw}", extra={"analysis_step": d.analysis_step}, rollouts=t,
            codec=a.run.token_ids, target_examples=_examples_of(tg, draw), draw=draw)

    # ------------------------------------------------------------------ scores
    def settings(self, spec: EstimatorSpec) -> dict:
        """The settings `spec` is scored with (recorded in every scorecard row): its constructor's
        defaults, the session's `--estimator-param` values, and whatever the built estimator reports in
        its `params`."""
        given = self.estimator_params.get(spec.name, {})
        declared = spec.settings(**given)
        try:
            est = self.estimator(spec)
        except Exception:  # a constructor that raises fails the items; the record shows what was asked
            return declared
        own = getattr(est, "params", None)
        return {**declared, **spec.settings(**own)} if isinstance(own, dict) and own else declared

    def estimator(self, spec: EstimatorSpec):
        if spec.name not in self._estimators:
            self._estimators[spec.name] = spec.create(**self.estimator_params.get(spec.name, {}))
        return self._estimators[spec.name]

    def scores(self, spec: EstimatorSpec, problem: AttributionProblem) -> np.ndarray:
        """Validated unit scores, (problem.n_units,). Raises EstimatorFailure."""
        key = (spec.name, problem.name)
        if key not in self._scores:
            self._scores[key] = self._compute(spec, problem)
        res = self._scores[key]
        if isinstance(res, EstimatorFailure):
            raise res
        return res

    def _compute(self, spec: EstimatorSpec, problem: AttributionProblem) -> np.ndarray | EstimatorFailure:
        where = f"estimator {spec.name!r} on {problem.name}"
        if problem.level not in spec.levels:
            return EstimatorFailure(f"{where}: it supports levels {list(spec.levels)}, not {problem.level!r}")
        lacking = [f for f in spec.needs if getattr(problem, f, None) is None]
        if lacking:
            return EstimatorFailure(f"{where}: it needs problem field(s) {lacking}, which this problem does not have")
        try:
            raw = self.estimator(spec).score(problem)
        except Exception as e:  # a plug-in's bug becomes a failed item, not a crashed session
            tb = traceback.format_exception_only(type(e), e)[-1].strip()
            if isinstance(e, Declined):
                failure = EstimatorFailure(f"{where} declined: {e}")
                failure.declined = True
                return failure
            if isinstance(e, MissingExtra):
                failure = EstimatorFailure(f"{where}: {e}")
                failure.missing_extra = str(e)
                return failure
            return EstimatorFailure(f"{where} raised {tb}")
        try:
            s = np.asarray(raw, dtype=np.float64)
        except (TypeError, ValueError) as e:
            return EstimatorFailure(f"{where} returned {type(raw).__name__} that is not numeric: {e}")
        if s.shape != (problem.n_units,):
            return EstimatorFailure(f"{where} returned shape {s.shape}; expected ({problem.n_units},): "
                                    "one score per unit")
        bad = int((~np.isfinite(s)).sum())
        if bad:
            return EstimatorFailure(f"{where} returned {bad} non-finite score(s) (NaN/inf) of {s.size}")
        if s.size > 1 and np.all(s == s[0]):
            return EstimatorFailure(f"{where} returned the same score ({s[0]:.4g}) for every unit: it ranks nothing")
        return s
