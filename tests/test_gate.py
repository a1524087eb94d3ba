"""The gate cannot say green by mistake (pytester, smoke scale): `--scorecard-compare` compares or
refuses, a regression has its own exit code, a skip is never green, estimators are keyed by origin
and name, and each estimator's scoring time per seed is on the scorecard and in the terminal."""

import json
from pathlib import Path

import matplotlib
import pytest

# pytester restores sys.modules after each in-process run, and numpy/scipy C extensions cannot be
# imported twice in one process: import what the suite imports lazily before any pytester fixture
# exists.
matplotlib.use("Agg")
import matplotlib.pyplot  # noqa: E402,F401
import scipy.stats  # noqa: E402,F401
from behaviortrace.checklist import ESTIMATOR_ITEMS, RULES  # noqa: E402
from behaviortrace.fixtures.options import EXIT_NOT_JUDGED, EXIT_REGRESSION  # noqa: E402

import bt_core.reporting.render  # noqa: E402,F401
from bt_core.attribution import catalog, registry  # noqa: E402

# the built-ins register once, before pytester's runs (which drop modules they import)
catalog.names()

pytest_plugins = ["pytester"]
N_ITEMS = len(ESTIMATOR_ITEMS)
# one cheap estimator item where the verdict itself does not matter
MAG = ("-k", "magnitude_control")
# the view in which the oracle (the planted labels) passes every item scored on them: where a test
# needs a passing estimator, the oracle is judged there (tests/test_suite_end_to_end.py)
REF = ("--gate-view=reference",)


def _card(pytester, name="scorecard.json") -> dict:
    return json.loads((pytester.path / name).read_text())


DROP = object()  # a key the baseline does not hold


def _baseline(pytester, **changes) -> Path:
    """A baseline that matches a smoke session (scale, config hash, seeds 0,1,2) with one oracle
    record, then `changes` applied: enough for the refusals, which are decided before anything
    trains."""
    from bt_core.config import get_scale, session_hash

    s = get_scale("smoke")
    rec = {
        "item": "magnitude_control",
        "estimator": "oracle",
        "status": "pass",
        "reason": "",
        "figures": {},
        "estimator_spec": {"name": "oracle", "origin": "builtin", "params": {}},
    }
    base = {
        "schema": "behaviortrace.scorecard/1",
        "scale": "smoke",
        "seeds": list(s.seeds),
        "config_hash": session_hash(s),
        "gate_view": "causal",
        "rules": RULES,
        "records": [rec],
        **changes,
    }
    base = {k: v for k, v in base.items() if v is not DROP}
    path = pytester.path / "base.json"
    path.write_text(json.dumps(base))
    return path


def _hash_before_issue_47() -> str:
    """The smoke session's hash as scorecards carried it before the counterfactual plan entered it
    (a baseline judged at δ = 0.01 carries it)."""
    from bt_core.config import config_hash, get_scale

    s = get_scale("smoke")
    return config_hash(s.run, s.sketch, s.draws)


# ------------------------------------------------------------------ 1. compares or refuses
@pytest.mark.parametrize(
    "changes, args, message",
    [
        (
            {"scale": "default"},
            (),
            "*--scorecard-compare=*base.json: the baseline was made with scale 'default' and "
            "this session runs 'smoke'*",
        ),
        (
            {"config_hash": "0123abcd"},
            (),
            "*baseline was made with config hash '0123abcd' and this session runs*",
        ),
        (
            {"config_hash": _hash_before_issue_47()},
            (),
            "*baseline was made with config hash*or replay plan differ*",
        ),
        (
            {},
            ("--seeds=0,2",),
            "*baseline was made on seeds [[]0, 2, 5] and this session runs seeds [[]0, 2]*"
            "--seeds 0,2,5*",
        ),
        (
            {},
            ("--estimator=random",),
            "*baseline holds no record of estimator 'random' (it holds: oracle)*nothing to "
            "compare 'random' with*--scorecard-compare-as random=BASELINE_NAME*",
        ),
        ({"records": []}, (), "*holds no record of estimator 'oracle' (it holds: none)*"),
        (
            {"gate_view": DROP},
            (),
            "*baseline was written before the items had views (issue 48)*not comparable*Write a "
            "new baseline with this version (--scorecard=PATH)*",
        ),
        (
            {"rules": DROP},
            (),
            "*baseline was judged under the checklist's rules 1 and this version judges under "
            "rules 2 (issue 61: each item now asks its own question*not comparable*Write a new "
            "baseline with this version (--scorecard=PATH)*",
        ),
        (
            {"gate_view": "reference"},
            (),
            "*baseline gated on the reference view and this session on the causal view*Rerun "
            "with --gate-view reference*",
        ),
        (
            {},
            ("--estimator=random", "--scorecard-compare-as=random=trak"),
            "*no record of estimator 'trak'*",
        ),
    ],
)
def test_compare_refuses_what_it_cannot_compare(pytester, changes, args, message):
    """Each refusal is a usage error before anything trains (no fixture cache needed), naming the
    difference."""
    path = _baseline(pytester, **changes)
    res = pytester.runpytest_inprocess(
        "--scale=smoke",
        "--estimator=oracle",
        *args,
        f"--scorecard-compare={path}",
        "-p",
        "no:cacheprovider",
        f"--bt-cache={pytester.path / 'cache'}",
    )
    assert res.ret == pytest.ExitCode.USAGE_ERROR, res.stdout.str()[-2000:]
    res.stderr.fnmatch_lines([message])
    assert not (pytester.path / "cache").exists()  # refused before anything was built


def test_compare_refuses_a_same_named_estimator_of_another_origin(pytester):
    pytester.makepyfile(
        myoracle="""
        from bt_core.attribution.estimators.random import Random

        class Oracle(Random):
            name = "oracle"
    """
    )
    pytester.syspathinsert()
    path = _baseline(pytester)
    res = pytester.runpytest_inprocess(
        "--scale=smoke",
        "--estimator=myoracle:Oracle",
        f"--scorecard-compare={path}",
        "-p",
        "no:cacheprovider",
    )
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines(
        [
            "*estimator 'oracle' is path:myoracle:Oracle here but builtin in the baseline*"
            "--scorecard-compare-as oracle=oracle*"
        ]
    )


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ("--scorecard-compare-as=random=oracle",),
            "*--scorecard-compare-as=random=oracle*give the baseline too*",
        ),
        (
            ("--scorecard-compare-as=random", "--scorecard-compare={base}"),
            "*expected NAME=BASELINE_NAME*",
        ),
        (
            ("--scorecard-compare-as=dot=oracle", "--scorecard-compare={base}"),
            "*'dot' is not a selected estimator (selected: random)*",
        ),
    ],
)
def test_bad_compare_as_is_a_usage_error(pytester, args, message):
    base = _baseline(pytester)
    res = pytester.runpytest_inprocess(
        "--scale=smoke",
        "--estimator=random",
        *(a.format(base=base) for a in args),
        "-p",
        "no:cacheprovider",
    )
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines([message])


def test_a_record_the_baseline_lacks_is_refused_not_passed(suite, pytester):
    """The baseline holds the estimator but not every item run now: refused (4) after the run, never
    "no regression"."""
    suite("--estimator=oracle", "--scorecard=base.json", *MAG, *REF)
    res = suite(
        "--estimator=oracle",
        "--scorecard-compare=base.json",
        "-k",
        "magnitude_control or headroom",
        *REF,
    )
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stdout.fnmatch_lines(
        [
            "*REFUSED (not compared with the baseline): headroom × oracle: the baseline has no "
            "record of headroom × oracle*"
        ]
    )
    assert "no regression" not in res.stdout.str()
    assert _card(pytester)["comparison"]["refused"]
    assert res.stdout.lines[-1].startswith(
        "BehaviorTrace: exit 4: the baseline could not be compared"
    )


def test_compare_passes_only_what_it_compared(suite, pytester):
    suite("--estimator=oracle", "--scorecard=base.json", *MAG, *REF)
    res = suite("--estimator=oracle", "--scorecard-compare=base.json", *MAG, *REF)
    assert res.ret == pytest.ExitCode.OK
    n = len(_card(pytester)["records"])  # the setup items and magnitude_control × oracle
    res.stdout.fnmatch_lines([f"*no regression vs baseline base.json on {n} compared record(s)*"])


def test_a_regression_has_its_own_exit_code_even_beside_failing_items(suite, pytester):
    """random fails its items as always (exit 1 alone); a status that got worse than the baseline's
    exits EXIT_REGRESSION, so a CI job can tell the two apart."""
    res = suite("--estimator=random", "--scorecard=base.json", *MAG)
    assert res.ret == pytest.ExitCode.TESTS_FAILED
    base = _card(pytester, "base.json")
    for r in base["records"]:
        if r["estimator"] == "random":
            r["status"] = "pass"  # pretend the baseline passed
    (pytester.path / "base.json").write_text(json.dumps(base))
    res = suite("--estimator=random", "--scorecard-compare=base.json", *MAG)
    assert res.ret == EXIT_REGRESSION
    res.stdout.fnmatch_lines(
        ["*REGRESSION vs baseline: magnitude_control × random: status pass → fail*"]
    )
    assert (
        res.stdout.lines[-1]
        == f"BehaviorTrace: exit {EXIT_REGRESSION}: 1 regression(s) against the baseline "
        "(above)"
    )


def test_compare_as_compares_a_new_estimator_with_another_s_records(suite, pytester):
    pytester.makepyfile(
        mine="""
        from bt_core.attribution.estimators.random import Random

        class MyRandom(Random):
            name = "my_random"
    """
    )
    pytester.syspathinsert()
    suite("--estimator=random", "--scorecard=base.json", *MAG)
    res = suite("--estimator=mine:MyRandom", "--scorecard-compare=base.json", *MAG)
    assert res.ret == pytest.ExitCode.USAGE_ERROR  # nothing of its own in the baseline
    res = suite(
        "--estimator=mine:MyRandom",
        "--scorecard-compare=base.json",
        "--scorecard-compare-as",
        "my_random=random",
        *MAG,
    )
    # its own item fails, as random's did: no regression
    assert res.ret == pytest.ExitCode.TESTS_FAILED
    cmp = _card(pytester)["comparison"]
    assert (
        cmp["compare_as"] == {"my_random": "random"}
        and not cmp["refused"]
        and not cmp["regressions"]
    )
    res.stdout.fnmatch_lines(["*no regression vs baseline base.json on * compared record(s)*"])


# ------------------------------------------------------------------ 2. green means judged
MISSING_EXTRA = """
    import numpy as np
    from bt_core.attribution.registry import Estimator
    from bt_core.extras import require

    class Always(Estimator):
        name = "needs_lib"
        needs = ("emb", "weight")
        def score(self, problem):
            require("bt_no_such_module_xyz", extra="trak", purpose="my method")

    class OnDraws(Estimator):
        name = "needs_lib_on_draws"
        needs = ("emb", "weight")
        def score(self, problem):
            if problem.kind == "draw":
                require("bt_no_such_module_xyz", extra="trak", purpose="my method")
            return problem.sketch_norm()
"""


def test_a_plugin_missing_its_extra_is_an_error_on_every_item_with_the_reason(suite, pytester):
    pytester.makepyfile(plug=MISSING_EXTRA)
    pytester.syspathinsert()
    res = suite("--estimator=plug:Always")
    assert res.ret == EXIT_NOT_JUDGED  # not judged, never 1 (a judged failure)
    recs = [r for r in _card(pytester)["records"] if r["estimator"] == "needs_lib"]
    assert len(recs) == N_ITEMS and {r["status"] for r in recs} == {"error"}
    assert all('pip install "behaviortrace[trak]"' in r["reason"] for r in recs)


def test_a_plugin_missing_its_extra_only_on_draws_errs_on_the_draw_items(suite, pytester):
    pytester.makepyfile(plug=MISSING_EXTRA)
    pytester.syspathinsert()
    res = suite(
        "--estimator=plug:OnDraws",
        "-k",
        "fluency_control or seed_variance or draw_variance or magnitude",
    )
    # magnitude_control judged (a norm fails it: exit 1), the three draw items not judged
    assert res.ret == pytest.ExitCode.TESTS_FAILED and res.parseoutcomes().get("skipped", 0) == 3
    recs = {
        r["item"]: r for r in _card(pytester)["records"] if r["estimator"] == "needs_lib_on_draws"
    }
    assert recs["magnitude_control"]["status"] == "fail"
    for item in ("fluency_control", "seed_variance", "draw_variance"):
        assert (
            recs[item]["status"] == "error"
            and "my method needs the optional package" in recs[item]["reason"]
        )
    # judged on the stream as usual
    assert "optional package" not in recs["magnitude_control"]["reason"]


def test_an_estimator_that_skips_is_an_error_never_green(suite, pytester):
    """pytest.skip() inside score() would skip every item (green, judged nothing); it is the
    estimator's error: not judged, and the session is never green."""
    pytester.makepyfile(
        skipper="""
        import pytest
        from bt_core.attribution.registry import Estimator

        class Skipper(Estimator):
            name = "skipper"
            needs = ()
            def score(self, problem):
                pytest.skip("not today")
    """
    )
    pytester.syspathinsert()
    res = suite("--estimator=skipper:Skipper", *MAG)
    assert res.ret == EXIT_NOT_JUDGED
    rec = next(r for r in _card(pytester)["records"] if r["estimator"] == "skipper")
    assert rec["status"] == "error" and "raised Skipped: not today" in rec["reason"]


@pytest.fixture
def absent_adapter(monkeypatch):
    """A built-in adapter (origin adapter:…) whose library turns out absent when it scores."""
    from bt_core.extras import require

    class FakeAdapter(registry.Estimator):
        name = "fake_adapter"
        needs = ("emb",)

        def score(self, problem):
            require("bt_no_such_module_xyz", extra="trak", purpose="the fake adapter")

    FakeAdapter.__module__ = "bt_core.attribution.adapters.fake"  # where a built-in adapter lives
    catalog.names()  # built-ins registered first
    with registry.REGISTRY.scoped():
        yield registry.REGISTRY.add(
            FakeAdapter, name="fake_adapter", origin="adapter:bt_no_such_module_xyz"
        )


def test_a_plugin_claiming_to_be_an_adapter_is_not_let_off(
    suite, pytester, absent_adapter, monkeypatch
):
    """The adapter's skip is for this package's adapters only: a same-origin estimator defined
    elsewhere has an error of its own (not judged, not the allowed skip)."""
    monkeypatch.setattr(absent_adapter.factory, "__module__", "my_plugin")
    res = suite("--estimator=fake_adapter", *MAG, "--bt-scoring=in-process")
    assert res.ret == EXIT_NOT_JUDGED
    (u,) = _card(pytester)["not_judged"]
    assert u["status"] == "error" and not u["allowed"]


def test_only_skipped_items_are_never_green(suite, pytester, absent_adapter):
    # in-process: the fake adapter is a class local to the fixture, which no scoring worker can
    # import
    res = suite("--estimator=fake_adapter", "-rs", "--bt-scoring=in-process")
    assert res.ret == EXIT_NOT_JUDGED
    assert res.parseoutcomes()["skipped"] == N_ITEMS
    res.stdout.fnmatch_lines(
        [
            "*SKIPPED*not judged: the built-in adapter's optional extra is absent*"
            'pip install "behaviortrace[[]trak]"*'
        ]
    )
    last = res.stdout.lines[-1]
    assert last == (
        f"BehaviorTrace: exit {EXIT_NOT_JUDGED}: not green — {N_ITEMS} item(s) of "
        "fake_adapter skipped: "
        'a built-in adapter\'s optional extra is absent (pip install "behaviortrace[trak]")'
    ), last
    card = _card(pytester)
    assert card["exit"]["code"] == EXIT_NOT_JUDGED and len(card["not_judged"]) == N_ITEMS
    assert not [r for r in card["records"] if r["estimator"] == "fake_adapter"]


# the items the oracle passes: every one in the reference view but counterfactual, which is causal
# only (ORACLE_FAILS in tests/test_suite_end_to_end.py)
ORACLE_PASSES = (*REF, "-k", "not counterfactual")


def test_a_skipped_adapter_beside_a_passing_method_is_not_green(suite, pytester, absent_adapter):
    res = suite("--estimator=oracle,fake_adapter", *ORACLE_PASSES, "--bt-scoring=in-process")
    assert res.ret == EXIT_NOT_JUDGED
    assert "fake_adapter" in res.stdout.lines[-1] and "not green" in res.stdout.lines[-1]


def test_green_is_said_in_the_last_line(suite, pytester):
    res = suite("--estimator=oracle", *ORACLE_PASSES)
    assert res.ret == pytest.ExitCode.OK
    assert res.stdout.lines[-1].startswith(
        "BehaviorTrace: exit 0: green — every selected estimator item judged"
    )


def test_a_session_that_selects_no_item_of_an_estimator_is_not_green(suite, pytester):
    res = suite("--estimator=oracle", "-k", "emergence")
    assert res.ret == EXIT_NOT_JUDGED
    assert (
        res.stdout.lines[-1]
        == f"BehaviorTrace: exit {EXIT_NOT_JUDGED}: not green — no item of oracle was "
        "selected (-k, -m or --deselect): nothing judged"
    )


def test_two_estimators_of_one_name_are_a_usage_error(pytester):
    pytester.makepyfile(
        myoracle="""
        from bt_core.attribution.estimators.random import Random

        class Oracle(Random):
            name = "oracle"
    """
    )
    pytester.syspathinsert()
    res = pytester.runpytest_inprocess(
        "--scale=smoke", "--estimator=oracle,myoracle:Oracle", "-p", "no:cacheprovider"
    )
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines(
        [
            "*--estimator: 2 selected estimators are named 'oracle' (builtin and "
            "path:myoracle:Oracle)*another `name`*"
        ]
    )


def test_a_plugin_named_like_a_builtin_inherits_nothing(smoke_evidence):
    """The evidence keys scores, instances and memoized figures by (origin, name): the same name
    from another origin is another estimator (here a random scorer named `oracle`)."""
    import numpy as np
    from behaviortrace.checklist import magnitude_control

    from bt_core.attribution.catalog import get
    from bt_core.attribution.estimators.random import Random

    builtin = get("oracle")
    impostor = registry.EstimatorSpec(
        "oracle", Random, registry.LEVELS, "path:impostor:Oracle", "", ()
    )
    assert builtin.key != impostor.key
    p = smoke_evidence.stream_problem(0)
    assert not np.array_equal(smoke_evidence.scores(builtin, p), smoke_evidence.scores(impostor, p))
    real, fake = (
        magnitude_control.evaluate(s, smoke_evidence, "reference") for s in (builtin, impostor)
    )
    assert real.status == "pass" and fake.status == "fail"
    assert (
        fake.estimator_spec["role"] == "method"
        and fake.estimator_spec["origin"] == "path:impostor:Oracle"
    )


# ------------------------------------------------------------------ 6. scoring time per seed
def test_scoring_time_per_seed_is_on_the_scorecard_and_in_the_terminal(suite, pytester):
    from bt_core.config import get_scale

    res = suite("--estimator=cosine,random", *MAG)
    times = _card(pytester)["scoring_time"]
    assert set(times) == {"cosine", "random"}
    for t in times.values():
        assert set(t["per_seed"]) == {str(x) for x in get_scale("smoke").seeds}
        assert all(s["seconds"] > 0 and s["problems"] >= 1 for s in t["per_seed"].values())
        assert t["total_s"] == pytest.approx(sum(s["seconds"] for s in t["per_seed"].values()))
        assert t["across_seeds"]["min"] <= t["across_seeds"]["mean"] <= t["across_seeds"]["max"]
        assert t["timer"] == "pytest_benchmark.timers.default_timer"
    res.stdout.fnmatch_lines(
        [
            "scoring time per seed*",
            "  cosine  total * seed 0: *  seed 2: *  seed 5: *",
            "  random  total * seed 0: *",
        ]
    )


# ------------------------------------------------------------------ 3. needs is enforced (unit
# level)
def _est(name, score, needs=None):
    attrs = {
        "name": name,
        "score": lambda self, p: score(p),
        **({} if needs is None else {"needs": needs}),
    }
    cls = type(name, (registry.Estimator,), attrs)
    return registry.EstimatorSpec(name, cls, registry.LEVELS, "path:test", "", tuple(needs or ()))


def test_a_declared_view_holds_only_what_was_declared():
    from bt_core.attribution.problem import (
        STRUCTURAL_FIELDS,
        AttributionProblem,
        UndeclaredFieldError,
    )

    p = AttributionProblem.synthetic()
    v = p.handout(("emb", "weight"))
    assert v.n_units == p.n_units and (v.sketch_norm() == p.sketch_norm()).all()
    assert all(getattr(v, f) is not None for f in STRUCTURAL_FIELDS)
    with pytest.raises(
        UndeclaredFieldError, match=r"read problem field 'targets'.*needs \['emb', 'weight'\]"
    ):
        v.dot("in_context")
    # no data behind the back door
    assert repr(v.__dict__["targets"]) == "<withheld 'targets': not in needs>"
    labelled = AttributionProblem.synthetic(labelled=True).handout(("labels",))
    assert labelled.truth is not None and labelled.labels is not None
    with pytest.raises(UndeclaredFieldError, match="'emb'"):
        _ = labelled.emb


@pytest.mark.parametrize(
    "score, needs, message",
    [
        (
            lambda p: p.dot("in_context"),
            ("emb", "weight"),
            r"read undeclared problem field\(s\) \['targets'\]",
        ),
        (
            lambda p: p.grad_norm * p.weight,
            ("emb", "weight"),
            r"read undeclared problem field\(s\) \['grad_norm'\]",
        ),
        (
            lambda p: getattr(p, "rollouts", None) or p.sketch_norm(),
            ("emb", "weight"),
            r"\['rollouts'\]",
        ),  # a getattr with a default does not hide the read
        (
            lambda p: p.sketch_norm(),
            ("emb", "wieght"),
            r"needs \['emb', 'wieght'\] name\(s\) \['wieght'\], which no "
            r"problem has; the fields: kind, level",
        ),
    ],
)
def test_an_undeclared_read_is_the_estimator_s_failure_even_when_caught(score, needs, message):
    from bt_core.attribution.evidence import EstimatorFailure, Evidence
    from bt_core.attribution.problem import AttributionProblem

    def caught(p):
        try:
            return score(p)
        except Exception:
            return p.sketch_norm()

    for fn in (score, caught):
        with pytest.raises(EstimatorFailure, match=message):
            Evidence({}, "smoke", scoring="in-process").scores(
                _est("sneaky", fn, needs), AttributionProblem.synthetic()
            )


def test_an_estimator_that_declares_nothing_sees_everything_and_reads_targets():
    from behaviortrace.checklist.setup import reads_targets

    from bt_core.attribution.evidence import Evidence
    from bt_core.attribution.problem import AttributionProblem

    spec = _est("plain", lambda p: p.dot("in_context") + p.grad_norm)
    assert not spec.declares_needs and reads_targets(spec)
    p = AttributionProblem.synthetic()
    assert Evidence({}, "smoke", scoring="in-process").scores(spec, p).shape == (p.n_units,)
    declared = _est("declared", lambda p: p.sketch_norm(), ("emb", "weight"))
    assert declared.declares_needs and not reads_targets(declared)


HELPERS = {
    "dot": {"emb", "weight", "targets"},
    "cosine": {"emb", "weight", "targets"},
    "sketch_norm": {"emb", "weight"},
    "target": {"targets"},
    "to_rollouts": set(),
    "n_units": set(),
    "handout": set(),
}


def _reads(source: str) -> set[str]:
    """The problem fields a module's source reads as `problem.<attr>` (helpers expanded to their
    fields)."""
    import re

    out = set()
    for attr in re.findall(r"\bproblem\.([a-z_]+)", source):
        out |= HELPERS.get(attr, {attr})
    return out


def test_every_builtin_and_adapter_declares_what_it_reads():
    """Enforced `needs` must not break the built-ins: each module's `problem.<field>` reads are
    declared by every estimator it defines. Read from the source, so the adapters are checked even
    where their library is absent (trak_traker reads emb for its default projection size)."""
    import importlib
    import inspect

    from bt_core.attribution.adapters import ADAPTERS
    from bt_core.attribution.estimators import oracle
    from bt_core.attribution.problem import STRUCTURAL_FIELDS

    common = inspect.getsource(importlib.import_module("bt_core.attribution.adapters._common"))
    pkg = importlib.import_module("bt_core.attribution.estimators")
    modules = [
        m
        for m in pkg.__dict__.values()
        # its submodules only: pytest's assertion rewriting (which pytest 9 applies to an editable
        # install's packages) adds the `builtins` module to a rewritten module's namespace
        if inspect.ismodule(m) and m.__name__.startswith(pkg.__name__ + ".") and m is not oracle
    ]
    modules += [
        importlib.import_module(f"bt_core.attribution.adapters.{m}") for m in ADAPTERS.values()
    ]
    checked = 0
    for mod in modules:
        own = inspect.getsource(mod)
        # an adapter built on _common's shared inputs (its NEEDS) reads through _common's helpers
        src = own + (common if ".adapters." in mod.__name__ and "NEEDS" in own else "")
        for cls in [
            c
            for c in vars(mod).values()
            if inspect.isclass(c)
            and issubclass(c, registry.Estimator)
            and c.__module__ == mod.__name__
        ]:
            missing = _reads(src) - set(cls.needs) - set(STRUCTURAL_FIELDS)
            assert not missing, (
                f"{cls.__name__} ({mod.__name__}) reads {sorted(missing)} without declaring them"
            )
            checked += 1
    assert checked >= 12


def test_a_failed_setup_gate_is_not_judged_never_exit_1(suite, pytester, monkeypatch):
    """A gating setup item that fails breaks the fixtures, not the method: the items it holds back
    are skipped as not judged, the session exits EXIT_NOT_JUDGED (never 1, a judged failure), and
    the last line leads with the gate and the clause that failed."""
    from behaviortrace.checklist import SETUP_ITEMS

    from bt_core.reporting.scorecard import Verdict

    item = next(i for i in SETUP_ITEMS if i.name == "emergence")
    failed = Verdict(
        "emergence",
        "setup",
        "fail",
        "fails on seed(s) [0] — seed 0: final s_b 0.050 (needs > 0.1)",
        {},
        short="fails on seed 0: final s_b 0.050 (needs > 0.1)",
    )
    # a frozen dataclass: its fields are replaced in its __dict__ (restored after the test)
    monkeypatch.setitem(item.__dict__, "evaluate", lambda evidence: failed)
    monkeypatch.setitem(item.__dict__, "present", None)
    res = suite("--estimator=cosine", "-k", "magnitude_control or emergence")
    assert res.ret == EXIT_NOT_JUDGED
    outcomes = res.parseoutcomes()
    assert outcomes.get("failed", 0) == 0 and outcomes["skipped"] == 1, outcomes
    assert outcomes["xfailed"] == 1, outcomes  # the gate: SETUP FAILED, never a failed test
    res.stdout.fnmatch_lines(
        ["*NOT JUDGED [[]invalid-setup[]] magnitude_control (causal) × cosine*"]
    )
    last = res.stdout.lines[-1]
    assert last.startswith(
        f"BehaviorTrace: exit {EXIT_NOT_JUDGED}: not judged — setup gate emergence failed: fails "
        "on seed 0: final s_b 0.050 (needs > 0.1); it held back 1 estimator item(s)"
    ), last
    card = _card(pytester)
    assert [u["status"] for u in card["not_judged"]] == ["setup-failed", "invalid-setup"]
    assert card["exit"]["code"] == EXIT_NOT_JUDGED


def test_the_last_line_counts_only_what_a_failed_gate_held_back():
    """A failed gate's line counts the items it held back (invalid-setup), not an estimator left
    unselected or an adapter's skip; an exit-1 line counts the items not judged, not the gate."""
    from behaviortrace.fixtures.gate import last_line

    gate = {"item": "emergence", "estimator": "setup", "status": "setup-failed", "allowed": False}
    gate["why"] = "setup gate emergence failed: fails on seed 0"
    held = {"item": "headroom", "estimator": "cosine", "status": "invalid-setup", "allowed": False}
    held["why"] = "invalid-setup: not judged: setup emergence failed"
    unselected = {"item": None, "estimator": "random", "status": "not-selected", "allowed": False}
    unselected["why"] = "none of its items was selected"
    line, good = last_line(EXIT_NOT_JUDGED, 3, None, [gate, held, unselected])
    assert not good and "it held back 1 estimator item(s)" in line, line
    line, _ = last_line(pytest.ExitCode.TESTS_FAILED, 3, None, [gate, held])
    assert line.endswith("; 1 more not judged [1 invalid-setup]"), line
