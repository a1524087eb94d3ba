"""Evidence: the attribution problems built from every seed's artifacts, their labels, and memoized,
validated scores.

Checklist items read only this object. A draw problem carries the targets of its own seeded draw
(the in-context target of draw d was sampled with draw d's seed); stream problems carry draw 0's.

The problems are label-free (`AttributionProblem`); the labels they are scored against stay here:
`labels(problem)` (n_rollouts,) and `truth(problem)` (n_units,); on draws also the causal label,
`effect(problem)` (each sibling's one-step effect on the behavior measure), which no estimator is
handed, not even one that declares the labels. Each estimator gets its own `handout` of a problem
(read-only arrays, a fresh object), and only one that declares ``needs = ("labels",)`` gets the
`LabelledProblem` variant.

An estimator that declares `needs` is handed only those fields
(`AttributionProblem.handout(needs)`); reading another fails its items with a reason naming the
field. Estimators are keyed by `EstimatorSpec.key`, (origin, name): a plug-in named like a built-in
shares nothing with it. Each `score` call is timed (`scoring_times`) with pytest-benchmark's timer.

Scores are computed once per (estimator, problem) and checked: a wrong shape, NaN/inf, an
all-constant vector or an exception inside `score` (a write into its read-only inputs among them)
becomes an `EstimatorFailure` that the item reports, naming the estimator and the problem, as not
judged (`error`, or `declined`), or as failed when it was refused (an undeclared read).
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path

import numpy as np
from pytest_benchmark.timers import default_timer

from bt_core.artifacts.pages import release, release_seed
from bt_core.artifacts.readonly import readonly
from bt_core.artifacts.rollouts import RolloutView
from bt_core.artifacts.seed import SeedArtifacts
from bt_core.attribution.loaders import (
    ModelLoader,
    OptimizerLoader,
    PreconditionerLoader,
    Projection,
    draw_measure,
    examples_of,
    measure_of,
)
from bt_core.attribution.outcome import Outcome
from bt_core.attribution.problem import (
    AttributionProblem,
    prime_row_norms,
    problem_fields,
    row_norms,
)
from bt_core.attribution.registry import LABEL_FIELDS, EstimatorSpec
from bt_core.attribution.sandbox import InProcess, Scoring, make_scorer


def cache_roots(artifacts: dict[int, SeedArtifacts]) -> list[Path]:
    """The artifact cache folders the seeds were loaded from (what no scoring worker may see)."""
    roots = set()
    for a in artifacts.values():
        for part in (a.run, a.sketches, a.targets, getattr(a, "replays", None), *a.draws):
            path = getattr(part, "path", None)
            if path is not None:
                roots.add(Path(path).resolve().parents[1])
    return sorted(roots)


def _loss_weight(a: SeedArtifacts) -> float:
    """c = 1/(G·B): a rollout's weight in one of the run's logged steps."""
    g = a.run.config.grpo
    return 1.0 / (g.group_size * g.prompts_per_step)


class EstimatorFailure(RuntimeError):
    """An estimator raised, or returned scores that cannot be ranked. `declined` is True when it
    raised `bt_core.attribution.registry.Declined`: a documented limitation (e.g. an adapter
    refusing the training stream). `missing_extra` holds the install message when it raised
    `bt_core.extras.MissingExtra`."""

    declined: bool = False
    missing_extra: str | None = None
    # it read a problem field it did not declare: refused (a broken contract is the method's
    # failure, judged like a label reader's refusal), where a crash is not judged
    refused: bool = False


class Evidence:
    def __init__(
        self,
        artifacts: dict[int, SeedArtifacts],
        scale: str,
        estimator_params: dict | None = None,
        scoring: str = "sandbox",
        store=None,
    ):
        """`scoring`: where `score()` runs (`bt_core.attribution.sandbox.MODES`): "sandbox" (a
        worker process under bubblewrap, or a plain subprocess marked "unsandboxed" where bubblewrap
        cannot run), "subprocess" or "in-process" (explicit; marked on every record). `store`: the
        session's `ArtifactStore`, where `kept_scores` keeps a reference estimator's scores (None:
        computed every session)."""
        self.artifacts = artifacts
        self.scale = scale
        self.estimator_params = estimator_params or {}
        self.scorer = make_scorer(scoring, cache_roots(artifacts))
        self._beside_labels = InProcess(
            "reads the labels: a built-in validation estimator, scored beside them"
        )
        self._problems: dict[tuple, AttributionProblem] = {}
        # problem name → (labels, truth)
        self._labels: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self._effects: dict[str, np.ndarray] = {}  # draw problem name → the causal label
        self._scores: dict[tuple, np.ndarray | EstimatorFailure] = {}
        self.store = store
        # str(what), "seed<i>" → "kept" (read from the cache) | "computed"
        self.kept: dict[tuple[str, str], str] = {}
        # estimator key → {problem name: {seed, seconds}}
        self._times: dict[tuple, dict[str, dict]] = {}
        # the seed whose memory-mapped sketches may be resident
        self._mapped_seed: int | None = None

    def _visit(self, seed: int) -> None:
        """Judging reads one seed at a time: on moving to another seed, the pages of the last one's
        memory-mapped sketches leave this process's memory (`bt_core.artifacts.pages`)."""
        if self._mapped_seed is not None and self._mapped_seed != seed:
            release_seed(self.artifacts[self._mapped_seed])
        self._mapped_seed = seed

    @cached_property
    def seeds(self) -> list[int]:
        return sorted(self.artifacts)

    # ------------------------------------------------------------------ problems
    def stream_problem(self, seed: int, level: str = "rollout") -> AttributionProblem:
        self._visit(seed)
        key = ("stream", seed, level)
        if key not in self._problems:
            p, labels, truth = self._stream(self.artifacts[seed], level)
            self._problems[key], self._labels[p.name] = p, (readonly(labels), readonly(truth))
            if level == "rollout" and self.store is not None:
                # the controls' ‖e‖ of the (n_rollouts, k) sketches: kept, so a warm session does
                # not read the whole sketch file for them (0.5 GB per default seed)
                prime_row_norms(
                    p.emb, self.kept_array(seed, ("row_norms", p.name), lambda: row_norms(p.emb))
                )
        return self._problems[key]

    def draw_problem(self, seed: int, draw: int = 0) -> AttributionProblem:
        self._visit(seed)
        key = ("draw", seed, draw)
        if key not in self._problems:
            p, labels, truth = self._draw(self.artifacts[seed], draw)
            self._problems[key], self._labels[p.name] = p, (readonly(labels), readonly(truth))
            self._effects[p.name] = readonly(self.artifacts[seed].draws[draw].effect)
        return self._problems[key]

    def labels(self, problem: AttributionProblem) -> np.ndarray:
        """(n_rollouts,) bool: what `problem` is scored against — the planted GT on the stream, the
        behavior label on draws (read-only)."""
        return self._labels[problem.name][0]

    def effect(self, problem: AttributionProblem) -> np.ndarray:
        """(n_rollouts,) float64, a draw problem's causal label: each sibling's one-step effect on
        the behavior measure (`bt_core.counterfactual.sibling_effect`; positive: reinforcing it
        teaches the behavior), read-only. Only draws have one."""
        if problem.name not in self._effects:
            raise KeyError(f"{problem.name} has no causal label: only draw problems carry one")
        return self._effects[problem.name]

    def truth(self, problem: AttributionProblem) -> np.ndarray:
        """(n_units,) float: each unit's GT share (a step's share of GT rollouts at step level)."""
        return self._labels[problem.name][1]

    @staticmethod
    def _stream(a: SeedArtifacts, level: str) -> tuple[AttributionProblem, np.ndarray, np.ndarray]:
        t, sk, tg = a.run.rollouts, a.sketches, a.targets
        step, gt = np.asarray(t.step), np.asarray(t.gt, bool)
        common = dict(
            kind="stream",
            level=level,
            seed=a.run.seed,
            targets=tg.vectors,
            checkpoint_steps=tg.steps,
            model_at=ModelLoader(a.run),
            codec=a.run.token_ids,
            target_examples=examples_of(tg, 0),
            draw=0,
            preconditioner=PreconditionerLoader(a.run),
            project=Projection(sk),
            optimizer_at=OptimizerLoader(a.run),
            grad_clip=float(a.run.config.grpo.grad_clip),
            measure=measure_of(a),
        )
        if level == "rollout":
            p = AttributionProblem(
                emb=sk.emb,
                weight=np.asarray(t.advantage, np.float64),
                grad_norm=np.asarray(sk.grad_norm),
                fluency=np.asarray(sk.fluency),
                step=step,
                group=np.asarray(t.group),
                lr=np.asarray(t.lr),
                ckpt_index=tg.index_of(step),
                unit_of_rollout=np.arange(len(t)),
                name=f"seed{a.run.seed}/stream/rollout",
                rollouts=RolloutView.of(t),
                **common,
            )
            return p, gt, gt.astype(float)
        steps = np.asarray(sk.steps)
        unit = np.searchsorted(steps, step)
        counts = np.bincount(unit, minlength=len(steps))
        mean = lambda x: (
            np.bincount(unit, weights=np.asarray(x, float), minlength=len(steps)) / counts
        )  # noqa: E731
        p = AttributionProblem(
            emb=np.asarray(sk.step_emb),
            weight=np.ones(len(steps)),
            grad_norm=np.asarray(sk.step_norm),
            fluency=mean(sk.fluency),
            step=steps,
            group=steps,
            lr=mean(t.lr),
            ckpt_index=tg.index_of(steps),
            unit_of_rollout=unit,
            name=f"seed{a.run.seed}/stream/step",
            **common,
        )
        return p, gt, mean(gt)

    @staticmethod
    def _draw(a: SeedArtifacts, draw: int) -> tuple[AttributionProblem, np.ndarray, np.ndarray]:
        d = a.draws[draw]
        t, sk, tg = d.rollouts, d.sketches, a.targets
        beh = np.asarray(t.behavior, bool)
        n = len(t)
        lr = np.full(n, a.run.config.grpo.lr)
        p = AttributionProblem(
            kind="draw",
            level="rollout",
            seed=a.run.seed,
            emb=sk.emb,
            weight=np.ones(n),
            grad_norm=np.asarray(sk.grad_norm),
            fluency=np.asarray(sk.fluency),
            step=np.asarray(t.step),
            group=np.asarray(t.group),
            lr=lr,
            ckpt_index=tg.index_of(np.asarray(t.step)),
            targets=tg.for_draw(draw),
            checkpoint_steps=tg.steps,
            unit_of_rollout=np.arange(n),
            model_at=ModelLoader(a.run),
            name=f"seed{a.run.seed}/draw{draw}",
            # a rollout's weight 1/(G·B) in one of the run's updates (the label's and metagrad's)
            extra={"analysis_step": d.analysis_step, "loss_weight": _loss_weight(a)},
            rollouts=RolloutView.of(t, advantage=np.ones(n), lr=lr),
            codec=a.run.token_ids,
            target_examples=examples_of(tg, draw),
            draw=draw,
            preconditioner=PreconditionerLoader(a.run),
            project=Projection(a.sketches),
            optimizer_at=OptimizerLoader(a.run),
            grad_clip=float(a.run.config.grpo.grad_clip),
            measure=draw_measure(a, d.analysis_step),
        )
        return p, beh, beh.astype(float)

    # ------------------------------------------------------------------ scores
    def settings(self, spec: EstimatorSpec) -> dict:
        """The settings `spec` is scored with (recorded in every scorecard row): its constructor's
        defaults, the session's `--estimator-param` values, and whatever the built estimator reports
        in its `params`."""
        given = self.estimator_params.get(spec.name, {})
        declared = spec.settings(**given)
        own = self._scorer(spec).params(spec, given)
        return {**declared, **spec.settings(**own)} if isinstance(own, dict) and own else declared

    def _scorer(self, spec: EstimatorSpec):
        """Where `spec` scores: the session's scorer; the built-in validation estimator (the oracle,
        handed the labels by declaration) beside the labels."""
        return self._beside_labels if spec.builtin_validation else self.scorer

    def scoring(self, spec: EstimatorSpec) -> Scoring:
        """How `spec` is scored (recorded in every record of it)."""
        return self._scorer(spec).scoring

    def retire(self, spec: EstimatorSpec) -> bool:
        """The session has nothing left for `spec` to score: stop its worker (its process and
        memory; a session of every built-in kept 12 alive to the end, 2.4 GB summed). Its settings
        as it reports them (`params`) are read first, since the scorecard shows them; its scores
        stay memoized here. True if a worker was stopped."""
        scorer = self._scorer(spec)
        scorer.params(spec, self.estimator_params.get(spec.name, {}))
        return bool(getattr(scorer, "retire", lambda s: False)(spec))

    def close(self) -> None:
        """Stop the scoring workers and remove their scratch directory."""
        self.scorer.close()

    def scoring_times(self, spec: EstimatorSpec) -> dict[str, dict]:
        """How long `spec` took on each problem scored so far in this session: problem name →
        {"seed", "seconds"} (its `score` call, and building the estimator on its first)."""
        return dict(self._times.get(spec.key, {}))

    def scores(self, spec: EstimatorSpec, problem: AttributionProblem) -> np.ndarray:
        """Validated unit scores, (problem.n_units,). Raises EstimatorFailure."""
        key = (spec.key, problem.name)
        if key not in self._scores:
            self._visit(problem.seed)
            self._scores[key] = self._compute(spec, problem)
            # one scoring pass read it whole; the next reader faults back what it needs
            release(problem.emb)
        res = self._scores[key]
        if isinstance(res, EstimatorFailure):
            raise res
        return res

    def kept_scores(self, spec: EstimatorSpec, problem: AttributionProblem) -> np.ndarray:
        """`scores(spec, problem)` for a figure shown beside a verdict (the counterfactual item's
        ceiling), kept like `kept_array` under the estimator's name and settings. Scores this
        session already computed are used (and kept); a plug-in's are never kept (its code is not
        ours to fingerprint). Raises EstimatorFailure."""
        memo = self._scores.get((spec.key, problem.name))
        if spec.origin != "builtin" or isinstance(memo, EstimatorFailure):
            return self.scores(spec, problem)
        params = dict(sorted(self.estimator_params.get(spec.name, {}).items()))
        return self.kept_array(
            problem.seed,
            ("scores", spec.name, params, problem.name),
            lambda: memo if memo is not None else self.scores(spec, problem),
        )

    def kept_array(self, seed: int, what: tuple, compute, sources: tuple = ()) -> np.ndarray:
        """`compute()` (an array that depends only on the seed's artifacts and the code), kept in
        the artifact cache under a key of the seed's artifacts, `what` (JSON-able parts naming the
        quantity and its settings) and the fingerprint of bt_core's source and of each directory
        in `sources` (`bt_core.attribution.kept`). Without a store: computed."""
        from bt_core.attribution import kept

        if self.store is None:
            return compute()
        fingerprint = kept.source_fingerprint(*(str(s) for s in sources))
        # no kept score depends on the control run: a rebuilt control keeps them
        keys = {k: v for k, v in self.artifacts[seed].keys.items() if k != "control"}
        key = kept.kept_key(keys, (seed, *what), fingerprint)
        out, computed = kept.load_or_compute(
            self.store, key, {"seed": seed, "what": list(what)}, compute
        )
        self.kept[(str(what), f"seed{seed}")] = "computed" if computed else "kept"
        return readonly(out)

    def _compute(
        self, spec: EstimatorSpec, problem: AttributionProblem
    ) -> np.ndarray | EstimatorFailure:
        where = f"estimator {spec.name!r} on {problem.name}"
        if problem.level not in spec.levels:
            return EstimatorFailure(
                f"{where}: it supports levels {list(spec.levels)}, not {problem.level!r}"
            )
        unknown = [f for f in spec.needs if f not in problem_fields()]
        if unknown:
            return EstimatorFailure(
                f"{where}: its needs {list(spec.needs)} name(s) {unknown}, which no problem "
                f"has; the fields: {', '.join(problem_fields())}"
            )
        lacking = [
            f for f in spec.needs if f not in LABEL_FIELDS and getattr(problem, f, None) is None
        ]
        if lacking:
            return EstimatorFailure(
                f"{where}: it needs problem field(s) {lacking}, which this problem does not have"
            )
        full = (
            problem.with_labels(self.truth(problem), self.labels(problem))
            if spec.reads_labels
            else problem
        )
        start = default_timer()
        try:
            out = self._scorer(spec).score(spec, self.estimator_params.get(spec.name, {}), full)
        finally:
            self._times.setdefault(spec.key, {})[problem.name] = {
                "seed": problem.seed,
                "seconds": default_timer() - start,
            }
        return _validated(where, spec, problem, out)


def _validated(
    where: str, spec: EstimatorSpec, problem: AttributionProblem, out: Outcome
) -> np.ndarray | EstimatorFailure:
    """The scores of one `score` call, read-only, or the failure its `out` and its scores amount
    to."""
    if out.undeclared:  # whatever it did after reading a field it did not declare (even caught)
        return _undeclared(where, spec, out.undeclared)
    if out.error is not None:
        failure = EstimatorFailure(where + out.error)
        failure.declined, failure.missing_extra = out.declined, out.missing_extra
        failure.refused = out.refused
        return failure
    s = out.scores
    if s.shape != (problem.n_units,):
        return EstimatorFailure(
            f"{where} returned shape {s.shape}; expected ({problem.n_units},): one score per unit"
        )
    bad = int((~np.isfinite(s)).sum())
    if bad:
        return EstimatorFailure(f"{where} returned {bad} non-finite score(s) (NaN/inf) of {s.size}")
    if s.size > 1 and np.all(s == s[0]):
        return EstimatorFailure(
            f"{where} returned the same score ({s[0]:.4g}) for every unit: it ranks nothing"
        )
    return readonly(s)


def _undeclared(where: str, spec: EstimatorSpec, reads: list[str]) -> EstimatorFailure:
    fields_read = list(dict.fromkeys(reads))
    failure = EstimatorFailure(
        f"{where} read undeclared problem field(s) {fields_read}: its needs {list(spec.needs)} "
        "do not declare them, and an estimator is handed only what it declares (add them to "
        "its `needs`)"
    )
    failure.refused = True
    return failure
