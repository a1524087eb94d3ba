"""The pytest plugin end to end with pytester: oracle passes, random fails, unknown estimator is a usage
error before anything trains, and the scorecard is written."""

import json
from pathlib import Path

import matplotlib
import pytest

# pytester restores sys.modules after each in-process run, and numpy/scipy C extensions cannot be
# imported twice in one process: import what the suite imports lazily before any pytester fixture exists.
matplotlib.use("Agg")
import matplotlib.pyplot  # noqa: E402,F401
import scipy.stats  # noqa: E402,F401
from behaviortrace.checklist import ESTIMATOR_ITEMS, SETUP_ITEMS

import bt_core.reporting.render  # noqa: E402,F401

ROOT = Path(__file__).resolve().parents[1]
N_SETUP, N_ITEMS = len(SETUP_ITEMS), len(ESTIMATOR_ITEMS)
pytest_plugins = ["pytester"]


@pytest.fixture
def suite(pytester, smoke_artifacts, smoke_cache):


    def run(*args):
        return pytester.runpytest_inprocess("--scale=smoke", f"--bt-cache={smoke_cache}", "--bt-workers=1",
                                            "-p", "no:cacheprovider", *args)

    return run


def test_oracle_passes_every_item(suite, pytester, check_outcomes):
    res = suite("--estimator=oracle")
    check_outcomes(res, passed=N_ITEMS)
    assert res.ret == pytest.ExitCode.OK  # an advisory setup failure never gates the exit code
    card = json.loads((pytester.path / "scorecard.json").read_text())
    assert card["schema"] == "behaviortrace.scorecard/1"
    assert {r["status"] for r in card["records"] if r["estimator"] == "oracle"} == {"pass"}
    assert len([r for r in card["records"] if r["estimator"] == "setup"]) == N_SETUP
    assert card["config_hash"] and card["versions"]["torch"]
    assert (pytester.path / "scorecard.md").read_text().startswith("# BehaviorTrace scorecard")
    res.stdout.fnmatch_lines(["*BehaviorTrace scorecard*", "*emergence*PASS*", "*oracle*PASS*PASS*PASS*PASS*PASS*"])


def test_compare_fails_on_regression(suite, pytester, check_outcomes):
    check_outcomes(suite("--estimator=oracle", "--scorecard=base.json"), passed=N_ITEMS)
    base = json.loads((pytester.path / "base.json").read_text())
    for r in base["records"]:
        if r["item"] == "magnitude_control":
            r["figures"]["headline"]["value"] *= 2  # pretend the baseline was twice as good
    (pytester.path / "base.json").write_text(json.dumps(base))
    res = suite("--estimator=oracle", "--scorecard-compare=base.json")
    assert res.ret == pytest.ExitCode.TESTS_FAILED
    res.stdout.fnmatch_lines(["*REGRESSION vs baseline: magnitude_control × oracle*dropped*"])
    assert json.loads((pytester.path / "scorecard.json").read_text())["comparison"]["regressions"]


def test_random_fails_with_figures(suite, pytester, check_outcomes):
    res = suite("--estimator=random", "--scorecard=out/card.json")
    check_outcomes(res, failed=N_ITEMS)
    assert res.ret == 1
    res.stdout.fnmatch_lines(["*magnitude_control × random*lift*norm_only*", "*fluency_control × random*AUC*"])
    card = json.loads((pytester.path / "out" / "card.json").read_text())
    assert {r["status"] for r in card["records"] if r["estimator"] == "random"} == {"fail"}
    for suffix in (".md", ".html"):
        assert (pytester.path / "out" / f"card{suffix}").exists()
    assert (pytester.path / "out" / "card_figures" / "lift.png").stat().st_size > 1000


def test_unknown_estimator_is_a_usage_error(suite):
    res = suite("--estimator=cosin")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines(["*unknown estimator 'cosin'*Did you mean 'cosine'*Available:*"])


@pytest.mark.parametrize("args, message", [
    (("--scale=huge",), "*--scale*huge*smoke*default*"),
    (("--seeds=a,b",), "*--seeds*comma-separated*"),
    (("--scorecard=card.txt",), "*--scorecard*.json*"),
    (("--bt-workers=0",), "*--bt-workers*positive*"),
    (("--scorecard-compare=missing.json",), "*--scorecard-compare*no such file*"),
    (("--scorecard-tolerance=2",), "*--scorecard-tolerance*fraction*"),
])
def test_bad_options_are_usage_errors(suite, args, message):
    res = suite(*args)
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines([message])


def test_plugin_estimator_failure_is_a_failed_item(suite, pytester, check_outcomes):
    pytester.makepyfile(badest="""
        import numpy as np
        from bt_core.attribution.registry import Estimator

        class Bad(Estimator):
            name = "bad_nan"
            def score(self, problem):
                return np.full(problem.n_units, np.nan)
    """)
    pytester.syspathinsert()
    res = suite("--estimator=badest:Bad")
    check_outcomes(res, failed=N_ITEMS)
    res.stdout.fnmatch_lines(["*estimator failure*non-finite*"])
