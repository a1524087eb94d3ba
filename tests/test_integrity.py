"""Estimators see no answers and cannot write their inputs (unit tier: synthetic problems, no
model).

What a real method has stays in the view (token ids, advantage, step, group, lr, checkpoints,
targets); what reveals the ground truth or the draw label is absent, and every array is read-only
for good."""

from dataclasses import fields

import numpy as np
import pytest

# the meta-tests' adversaries, tests/ on the path
from adversaries import DeclaredLabelReader, LabelReader, Writer
from behaviortrace.checklist._common import refuse_label_reader

from bt_core.artifacts.readonly import is_readonly, readonly
from bt_core.artifacts.rollouts import VIEW_FIELDS, RolloutTable, RolloutView
from bt_core.attribution.catalog import get
from bt_core.attribution.evidence import EstimatorFailure, Evidence
from bt_core.attribution.loaders import ModelLoader
from bt_core.attribution.problem import ARRAY_FIELDS, AttributionProblem, LabelledProblem
from bt_core.attribution.registry import Estimator, EstimatorSpec
from bt_core.reporting.scorecard import Status, Verdict

ANSWERS = {
    "gt",
    "eligible",
    "reward",
    "reward_base",
    "behavior",
    "behavior_mask",
    "trigger",
    "explicit",
}


def _evidence(scoring: str = "sandbox"):
    """An Evidence holding one synthetic stream problem and its labels, as the suite builds them."""
    lp = AttributionProblem.synthetic(seed=3, labelled=True)
    p = AttributionProblem(**{f.name: getattr(lp, f.name) for f in fields(AttributionProblem)})
    ev = Evidence({}, "synthetic", scoring=scoring)
    ev._labels[p.name] = (lp.labels, lp.truth)
    return ev, p, lp


def _spec(cls, name=None, origin="path:test_integrity"):
    return EstimatorSpec(
        name or cls.name, cls, tuple(cls.levels), origin, "", tuple(getattr(cls, "needs", ()))
    )


def test_problem_has_no_answers_and_says_how_to_get_them():
    p = AttributionProblem.synthetic()
    for name in ("truth", "labels"):
        with pytest.raises(AttributeError, match=r"needs = \('labels',\)"):
            getattr(p, name)
    assert not hasattr(p, "truth") and not isinstance(p, LabelledProblem)
    with pytest.raises(AttributeError, match="has no attribute 'gt'"):
        p.gt  # noqa: B018


def test_rollout_view_holds_only_what_the_trainer_logged():
    n, L = 6, 4
    rng = np.random.default_rng(0)
    cols = {f.name: np.zeros(n, bool) for f in fields(RolloutTable)}
    cols.update(
        step=np.arange(n),
        group=np.arange(n) // 2,
        prompt_id=np.arange(n),
        prompt_len=np.full(n, L),
        reply_len=np.full(n, L),
        prompts=rng.integers(0, 9, (n, L)),
        replies=rng.integers(0, 9, (n, L)),
        behavior_mask=np.zeros((n, L), bool),
        reward=rng.random(n),
        reward_base=rng.random(n),
        advantage=rng.standard_normal(n),
        lr=np.full(n, 1e-3),
    )
    view = RolloutView.of(RolloutTable(**cols))
    names = {f.name for f in fields(view)}
    assert names == set(VIEW_FIELDS) and not names & ANSWERS
    for f in fields(view):
        assert is_readonly(getattr(view, f.name)), f.name
    assert len(view.select(np.array([0, 2]))) == 2


def test_every_array_is_read_only_for_good():
    p = AttributionProblem.synthetic(labelled=True)
    for name in (*ARRAY_FIELDS, "truth", "labels"):
        a = getattr(p, name)
        with pytest.raises(ValueError, match="read-only"):
            a[...] = 0
        with pytest.raises(ValueError):
            a.setflags(write=True)  # cannot be made writable again
    kind = next(iter(p.targets))
    with pytest.raises(TypeError):
        p.targets[kind] = np.zeros(3)
    with pytest.raises(ValueError, match="read-only"):
        p.targets[kind][0, 0] = 1.0
    with pytest.raises(TypeError):
        p.extra["analysis_step"] = 1


def test_readonly_keeps_a_read_only_memory_map_without_copying(tmp_path):
    np.save(tmp_path / "a.npy", np.arange(12.0).reshape(3, 4))
    m = np.load(tmp_path / "a.npy", mmap_mode="r")
    r = readonly(m)
    assert is_readonly(r) and np.shares_memory(r, m)
    w = np.arange(5.0)
    rw = readonly(w)
    # an owned buffer is copied into immutable bytes
    assert is_readonly(rw) and not np.shares_memory(rw, w)
    w[0] = 9.0
    assert rw[0] == 0.0


class Rebinder(Estimator):
    """Cannot write the arrays, so it rebinds the problem's attribute instead."""

    name = "rebinder_integrity"
    levels = ("rollout",)

    def score(self, problem):
        object.__setattr__(problem, "weight", np.zeros(problem.n_units))
        return np.arange(problem.n_units, dtype=float)


def test_a_writer_fails_with_the_reason_and_changes_nobody_elses_scores():
    ev, p, _ = _evidence()
    norm = get("norm_only")
    before = ev.scores(norm, p).copy()
    with pytest.raises(EstimatorFailure, match="read-only"):
        ev.scores(_spec(Writer), p)
    ev.scores(_spec(Rebinder), p)
    ev._scores.clear()  # recompute the control after both tried to change its inputs
    assert np.array_equal(ev.scores(norm, p), before)
    assert np.array_equal(p.weight, AttributionProblem.synthetic(seed=3).weight)


@pytest.mark.parametrize("scoring", ["sandbox", "in-process"])
def test_labels_only_by_declaring_them(scoring):
    ev, p, lp = _evidence(scoring)
    with pytest.raises(EstimatorFailure, match="AttributeError.*labels"):
        ev.scores(_spec(LabelReader), p)
    spec = _spec(DeclaredLabelReader)
    assert spec.reads_labels and not spec.builtin_validation
    if scoring == "in-process":  # declared: in the judge's process it gets them …
        assert np.array_equal(ev.scores(spec, p), lp.truth)
    # … the sandbox holds no labels: only the built-in validation estimator is scored beside them
    else:
        with pytest.raises(EstimatorFailure, match="has no 'truth'"):
            ev.scores(spec, p)
    v = Verdict("magnitude_control", spec.name, Status.PASS, "beats every control", {"x": 1}, {})
    refused = refuse_label_reader(v, spec)  # … and cannot pass a gate
    assert refused.status == Status.FAIL and "reads the labels" in refused.reason
    assert refused.figures["rule_status"] == "pass"
    oracle = get("oracle")
    assert oracle.reads_labels and oracle.builtin_validation
    assert refuse_label_reader(v, oracle) is v
    spoof = EstimatorSpec(
        "oracle", DeclaredLabelReader, ("rollout",), "path:x:Oracle", "", ("labels",)
    )
    assert not spoof.builtin_validation  # the name alone admits nothing: it must be the built-in


def test_model_loader_holds_no_run():
    class FakeRun:
        class config:
            model = object()

        class token_ids:
            vocab_size = 7

        seed, checkpoint_steps = 0, [0, 5]

        def params_file(self, step):
            return f"/nowhere/step{step}.safetensors"

    loader = ModelLoader(FakeRun())
    assert not any(isinstance(v, FakeRun) for v in vars(loader).values())
    with pytest.raises(KeyError, match="no checkpoint at step 3"):
        loader(3)
