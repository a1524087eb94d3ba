"""The plug-in surface: entry-point discovery from an installed distribution (a fake *.dist-info on
sys.path), `module:factory` paths, the CLI listing, and bad plug-ins becoming clear failures."""

import json
import textwrap

import numpy as np
import pytest

from bt_core.attribution import catalog, registry
from bt_core.attribution.catalog import get
from bt_core.attribution.evidence import EstimatorFailure, Evidence
from bt_core.attribution.problem import AttributionProblem
from bt_core.attribution.registry import EstimatorSpec, UnknownEstimatorError
from bt_core.cli import main

PLUGIN = '''
import numpy as np
from bt_core.attribution.registry import Estimator


class SignedDot(Estimator):
    """Advantage-weighted dot product with the in-context target (a third-party method)."""

    name = "signed_dot"
    levels = ("rollout",)
    needs = ("emb", "weight", "targets")

    def score(self, problem):
        return problem.dot("in_context")


def make():
    return SignedDot()
'''


@pytest.fixture
def installed_plugin(tmp_path, monkeypatch):
    """A distribution 'fake-bt-plugin' installed the way pip leaves it: a package plus a *.dist-info
    whose entry_points.txt declares two estimators (one of them broken) in the group
    behaviortrace.estimators."""
    (tmp_path / "fake_bt_plugin").mkdir()
    (tmp_path / "fake_bt_plugin" / "__init__.py").write_text(PLUGIN)
    info = tmp_path / "fake_bt_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-bt-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        textwrap.dedent(f"""\
        [{registry.ENTRY_POINT_GROUP}]
        fake_signed_dot = fake_bt_plugin:SignedDot
        fake_broken = fake_bt_plugin_not_there:Nope
        """)
    )
    catalog.available()  # built-ins loaded into the real registry first
    monkeypatch.setattr(catalog, "_BROKEN", {})
    monkeypatch.setattr(catalog, "_LOADED", False)
    monkeypatch.syspath_prepend(str(tmp_path))
    with registry.REGISTRY.scoped():  # the plug-in's estimators are forgotten after the test
        yield tmp_path


def test_entry_point_plugin_is_discovered_with_its_origin(installed_plugin):
    spec = get("fake_signed_dot")
    assert spec.origin == "plugin:fake-bt-plugin"
    assert spec.levels == ("rollout",) and spec.needs == ("emb", "weight", "targets")
    assert "cosine" in catalog.names()  # the built-ins are still there
    p = AttributionProblem.synthetic()
    assert np.allclose(spec.create().score(p), p.dot("in_context"))


def test_broken_plugin_is_reported_and_does_not_hide_the_others(installed_plugin):
    assert "fake_signed_dot" in catalog.names()
    with pytest.raises(
        UnknownEstimatorError,
        match="fake_broken.*fake-bt-plugin failed to load.*ModuleNotFoundError",
    ):
        get("fake_broken")


def test_cli_lists_plugins_with_levels_and_origin(installed_plugin, capsys):
    assert main(["estimators", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["fake_signed_dot"]["origin"] == "plugin:fake-bt-plugin"
    assert rows["fake_signed_dot"]["levels"] == ["rollout"]
    assert rows["trak"]["origin"] == "builtin" and rows["trak"]["levels"] == ["rollout", "step"]
    assert all({"name", "levels", "origin"} <= r.keys() for r in rows.values())
    assert main(["estimators"]) == 0
    table = capsys.readouterr().out
    assert "fake_signed_dot" in table and "plugin:fake-bt-plugin" in table


def test_module_factory_path_runs_unregistered_code(installed_plugin):
    spec = get("fake_bt_plugin:make")  # a zero-argument factory function, not a class
    assert spec.origin == "path:fake_bt_plugin:make"
    assert spec.create().score(AttributionProblem.synthetic()).shape == (24,)
    assert "fake_bt_plugin:make" not in catalog.names()  # paths run without registering


# ---------------------------------------------------------------------------- bad plug-ins on
# Evidence
def _spec(name, score, levels=("rollout", "step"), needs=()):
    cls = type(
        name,
        (registry.Estimator,),
        {"name": name, "levels": levels, "needs": needs, "score": lambda self, p: score(p)},
    )
    return EstimatorSpec(name, cls, levels, "path:test", "", needs)


def _raise(p):
    raise RuntimeError("boom inside score")


@pytest.mark.parametrize(
    "score, message",
    [
        (
            lambda p: np.zeros(p.n_units + 1) + np.arange(p.n_units + 1),
            r"returned shape \(25,\); expected \(24,\)",
        ),
        (lambda p: np.ones((p.n_units, 2)), r"returned shape \(24, 2\)"),
        (
            lambda p: np.where(np.arange(p.n_units) == 3, np.nan, np.arange(p.n_units)),
            r"1 non-finite score\(s\)",
        ),
        (
            lambda p: np.where(np.arange(p.n_units) < 2, np.inf, np.arange(p.n_units)),
            r"2 non-finite score\(s\)",
        ),
        (lambda p: np.full(p.n_units, 0.25), r"the same score \(0.25\) for every unit"),
        (_raise, r"raised RuntimeError: boom inside score"),
        (lambda p: ["a"] * p.n_units, r"is not numeric"),
    ],
)
def test_bad_scores_become_failures_naming_estimator_and_problem(score, message):
    ev = Evidence({}, "smoke", scoring="in-process")
    p = AttributionProblem.synthetic()
    spec = _spec("bad_plugin", score)
    for _ in range(2):  # memoized: the second call reports the same failure
        with pytest.raises(EstimatorFailure, match=message) as e:
            ev.scores(spec, p)
        assert "'bad_plugin'" in str(e.value) and p.name in str(e.value)


def test_unsupported_level_and_missing_inputs_are_failures():
    ev = Evidence({}, "smoke", scoring="in-process")
    p = AttributionProblem.synthetic(level="step")
    with pytest.raises(EstimatorFailure, match="supports levels \\['rollout'\\], not 'step'"):
        ev.scores(_spec("rollout_only", lambda q: np.arange(q.n_units), levels=("rollout",)), p)
    with pytest.raises(EstimatorFailure, match="needs problem field\\(s\\) \\['rollouts'\\]"):
        ev.scores(_spec("own_grads", lambda q: np.arange(q.n_units), needs=("rollouts",)), p)


def test_a_declined_problem_is_marked_declined_and_not_judged():
    def decline(p):
        raise registry.Declined("too many units for this method (documented)")

    ev = Evidence({}, "smoke", scoring="in-process")
    with pytest.raises(
        EstimatorFailure, match="'polite' on synthetic0/stream/rollout declined: too many"
    ) as e:
        ev.scores(_spec("polite", decline), AttributionProblem.synthetic())
    assert e.value.declined
    with pytest.raises(EstimatorFailure) as e2:
        ev.scores(_spec("rude", _raise), AttributionProblem.synthetic())
    assert not e2.value.declined
    # neither is a judged failure: each has a not-judged status of its own (never exit 1)
    from behaviortrace.checklist._base import failure_verdict

    polite, rude = (
        failure_verdict("magnitude_control", _spec(n, _raise), ev, x.value)
        for n, x in (("polite", e), ("rude", e2))
    )
    assert (polite.status, rude.status) == ("declined", "error")
    assert polite.figures["declined"] and "declined" not in rude.figures


def test_constructor_errors_are_failures_too():
    ev = Evidence({}, "smoke", {"cosine": {"target": "nonsense"}}, scoring="in-process")
    with pytest.raises(
        EstimatorFailure, match="estimator 'cosine'.*UnknownTargetError: target='nonsense'"
    ):
        ev.scores(get("cosine"), AttributionProblem.synthetic())


def test_a_failing_plugin_s_checklist_item_is_an_error_with_the_reason(smoke_evidence):
    from behaviortrace.checklist import magnitude_control

    v = magnitude_control.evaluate(
        _spec("nan_plugin", lambda p: np.full(p.n_units, np.nan)), smoke_evidence
    )
    assert v.status == "error" and "estimator failure" in v.reason and "nan_plugin" in v.reason
