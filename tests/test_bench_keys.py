"""`benchmarks/bench_keys.py`: the tool that counts setup gates over freshly keyed builds."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bt_core.secret_key import KEY_ENV

ROOT = Path(__file__).resolve().parents[1]


def _tool():
    spec = importlib.util.spec_from_file_location("bench_keys", ROOT / "benchmarks/bench_keys.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_bad_options_say_what_to_write():
    tool = _tool()
    for argv, msg in (
        (["--set", "grpo.lr"], "expected part.field=value"),
        (["--set", "nope.lr=1"], "unknown part 'nope'"),
        (["--set", "grpo.nope=1"], "has no field 'nope'"),
        # a full build is judged again on its own runs: a run's override needs --train-only
        (["--versus", "grpo.lr=1e-4"], "changes more than the fixtures.*add --train-only"),
        (["--versus", "scale.seeds=0"], "changes more than the fixtures"),  # its seeds too
        (["--train-only", "--versus", "grpo.nope=1"], "--versus 'grpo.nope=1': GRPOConfig has no"),
    ):
        with pytest.raises(SystemExit, match=msg):
            tool.main(argv)
    s = tool.override(tool.get_scale("smoke"), ["grpo.lr=3e-4", "scale.seeds=0,1"])
    assert s.run.grpo.lr == 3e-4 and s.seeds == (0, 1)


@pytest.mark.train
@pytest.mark.long
def test_train_only_appends_one_line_per_build_each_on_its_own_key(tmp_path):
    """Run as a user runs it (its own process, no pin in its environment): two short builds, each
    trained again with a paired override (`--versus`) under the build's own key."""
    pinned = os.environ.get(KEY_ENV)
    env = {k: v for k, v in os.environ.items() if k != KEY_ENV}
    out = tmp_path / "keys.jsonl"
    argv = ["--scale", "smoke", "--seeds", "0,2", "--builds", "2", "--train-only"]
    argv += ["--set", "grpo.steps=6", "--set", "grpo.checkpoint_every=3", "--set", "sft.steps=40"]
    argv += ["--versus", "task.off_trigger_penalty=0"]
    argv += ["--jsonl", str(out), "--json", str(tmp_path / "all.json")]
    argv += ["--keep", str(tmp_path / "caches")]
    res = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks/bench_keys.py"), *argv],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    whole = json.loads((tmp_path / "all.json").read_text())  # --json: the same builds, in one file
    assert whole["versus_set"] == ["task.off_trigger_penalty=0"] and len(whole["builds"]) == 2
    assert [x["build"] for x in lines] == [0, 1]
    for x in lines:
        assert set(x["per_seed"]) == {"0", "2"} and x["set"][0] == "grpo.steps=6"
        for r in x["per_seed"].values():
            assert list(r["s_b"]) == ["0", "3", "6"] and r["s_b_final"] == r["s_b"]["6"]
            assert list(r["sampled"]) == ["0", "3", "6"]
            assert r["sampled_peak"] == max(r["sampled"].values())
        assert x["held"] == all(r["emerged"] for r in x["per_seed"].values())
        # no item judged: the same record keys
        assert x["unjudged"] == x["unjudged_seeds"] == x["per_seed_items"] == {}
        # the paired arm: same seeds, its own emergence record
        assert x["versus_set"] == ["task.off_trigger_penalty=0"]
        assert set(x["versus"]["per_seed"]) == {"0", "2"}
        assert x["versus"]["held"] == all(r["emerged"] for r in x["versus"]["per_seed"].values())
    # one fresh key per build, shared by its seeds; never the session's pin
    keys = []
    for b in range(2):
        cache = tmp_path / "caches" / f"build0{b}"
        main = list(cache.glob("runs/*/contaminator_key"))
        assert len(main) == 2  # one run a seed: the first is read back, never trained twice
        found = {p.read_text() for p in main}
        assert len(found) == 1, found
        # the paired arm: its own runs (2 seeds, another config) under the build's key
        arm = list(cache.glob("versus/runs/*/contaminator_key"))
        assert len(arm) == 2 and {p.read_text() for p in arm} == found
        assert {p.parent.name for p in arm}.isdisjoint(
            p.parent.name for p in cache.glob("runs/*/contaminator_key")
        )
        keys.append(found.pop())
    assert keys[0] != keys[1] and pinned not in keys
    assert "emergence held on" in res.stdout and "with task.off_trigger_penalty=0" in res.stdout


@pytest.mark.train
def test_a_full_build_is_judged_again_with_other_fixtures_on_its_own_runs(
    smoke_artifacts, smoke_cache, tmp_path, monkeypatch
):
    """`--versus draws.repeats=3` on a full build: the same runs read back (nothing trains), the
    draws sampled again at the other size, every setup item and estimator item judged in both
    arms."""
    import shutil

    from bt_core.artifacts.keys import seed_keys

    tool = _tool()
    scale = tool.get_scale("smoke")
    versus = tool.override(scale, ["draws.repeats=3"], "--versus")
    assert scale.draws.repeats != 3  # a real change of the fixture
    root = tmp_path / "cache"
    shutil.copytree(smoke_cache, root)  # the session's cache, warm, under the session's pin
    log = root / "builds.jsonl"
    before = log.read_text().splitlines() if log.exists() else []
    judged_on = []  # each arm's artifacts, as its judging saw them
    judge = tool._judge
    monkeypatch.setattr(
        tool, "_judge", lambda arts, *a: judged_on.append(arts[0].keys) or judge(arts, *a)
    )
    # one seed (the suite's time budget)
    rec = tool.one_build(scale, [0], root, 1, ["random"], versus=versus)
    built = [json.loads(x)["kind"] for x in log.read_text().splitlines()[len(before) :]]
    assert built and set(built) == {"draws"}, built  # only the other draws were built
    names = {i.name for i in tool.ESTIMATOR_ITEMS}
    for arm in (rec, rec["versus"]):
        assert set(arm["gates"]) == {i.name for i in tool.SETUP_ITEMS}
        assert set(arm["items"]["random"]) == names
        assert arm["held"] == all(x == "pass" for x in arm["gates"].values())
    assert len(built) == scale.draws.n_draws  # the seed's draws, at the other size
    # the second arm was judged on the same runs and on the other draws, which the first never saw
    (ours, theirs) = judged_on
    assert theirs["run"] == ours["run"] and theirs["control"] == ours["control"]
    other = seed_keys(versus.run.with_seed(0), versus.sketch, versus.draws, versus.counterfactual)
    for i in range(scale.draws.n_draws):
        assert theirs[f"draw{i}"] == other[f"draw{i}"][1] != ours[f"draw{i}"]
    assert rec["versus"]["build_s"] >= 0 and rec["per_seed"][0]["analysis_step"] is not None


def test_the_versus_summary_counts_passes_on_builds_held_in_both_arms(capsys):
    from types import SimpleNamespace

    tool = _tool()
    six = [i.name for i in tool.ESTIMATOR_ITEMS]

    def arm(held, passes):
        return {"held": held, "items": {"m": {n: "pass" if n in passes else "fail" for n in six}}}

    records = [
        {**arm(True, six), "versus": arm(True, six[:5])},  # lost one item with the override
        {**arm(True, six), "versus": arm(False, six)},  # a gate failed in the other arm: left out
        {**arm(True, six[:4]), "versus": arm(True, six)},
    ]
    tool._versus_summary(records, SimpleNamespace(versus=["draws.repeats=3"], estimator=["m"]))
    out = capsys.readouterr().out
    assert "every setup gate held on 2 of 3 of the same builds" in out
    n = 2 * len(six)
    # and each arm of a build's line: its failed gates (else that all held), then its items
    failed = {"failed": {"emergence": "seed 2"}, "items": {"m": {"headroom": "fail"}}}
    assert tool._arm_line({**failed, "failed": {}}) == "all gates held; m: headroom fail"
    assert tool._arm_line(failed) == "emergence: seed 2; m: headroom fail"
    assert (
        f"m: {len(six) + 4} of {n} items passed as preset, {len(six) + 5} with draws.repeats=3; "
        "every item on 1 and 1 of the 2 builds whose gates held in both"
    ) in out


def test_each_judged_seed_keeps_its_status_and_headline_figure():
    from types import SimpleNamespace

    from bt_core.reporting.scorecard import Status

    per = {
        0: {"status": Status.PASS, "lds": 0.98, "ci": (0.9, 1.0)},
        2: {"status": Status.INVALID_SETUP, "why": "no replays", "lds": float("nan")},
    }
    # draw_variance: a status per draw, the seed's own under "judged", its reasons in "problems"
    draws = {
        0: {
            "status": {0: Status.PASS, 1: Status.INVALID_SETUP},
            "judged": "invalid-setup",
            "problems": ["unusable on [1]"],
        },
    }
    tool = _tool()
    got = tool._per_seed_items(
        {
            "counterfactual": SimpleNamespace(figures={"per_seed": per}, view="causal"),
            "draw_variance": SimpleNamespace(figures={"per_seed": draws}, view="causal"),
        }
    )
    assert got == {
        "counterfactual": {
            "0": {"status": "pass", "value": 0.98, "ci": [0.9, 1.0]},
            # NaN is no JSON; a seed that did not pass keeps why (the fresh key's cache is gone)
            "2": {"status": "invalid-setup", "value": None, "ci": None, "why": "no replays"},
        },
        "draw_variance": {
            "0": {"status": "invalid-setup", "value": None, "ci": None, "why": "unusable on [1]"}
        },
    }
    assert tool._seed_why(draws[0]) == "unusable on [1]"


def test_the_recorded_analysis_checkpoint_is_the_draws_own():
    """The campaign records where the draws were sampled and the rate there (a rate near 1 leaves
    no mixed sibling group): by the draws' own rule, on a run that saturates and one that does
    not."""
    from types import SimpleNamespace

    from bt_core.config import DrawConfig
    from bt_core.draws.build import analysis_step

    cfg = DrawConfig()
    for rates in ((0.1, 0.5, 0.99, 0.9), (0.1, 0.3, 0.2)):
        probes = [{"step": 6 * i, "sampled_rate": r} for i, r in enumerate(rates)]
        got = _tool()._analysis(probes, cfg.saturation)
        step = analysis_step(SimpleNamespace(probes=probes), cfg)
        assert got == {"analysis_step": step, "analysis_rate": rates[step // 6]}
    assert _tool()._analysis([], cfg.saturation)["analysis_step"] is None


def test_a_redrawn_key_is_named_on_the_build_line_and_counted():
    tool = _tool()
    why = "never saturated (peak sampled rate 0.74 < 0.8)"
    rec = {"per_seed": {0: {"redrawn": []}, 2: {"redrawn": [why]}, 5: {}}}
    assert tool._draws_note(rec) == "seed 2 on key draw 2; "
    assert tool._draws_note({"per_seed": {0: {"redrawn": []}}}) == ""
    line = tool._redrawn_line([rec, {"per_seed": {0: {"redrawn": []}}}])
    assert (
        line
        == f"3 of 4 seed runs planted the behavior on their first key; 1 key(s) set aside: {why}"
    )


def test_verdict_patterns_are_counted_per_estimator_on_builds_whose_gates_held(capsys):
    """Issue 61's figure: each estimator's six statuses as one string, counted over the builds whose
    gates held, and the number of distinct patterns."""
    tool = _tool()
    six = [i.name for i in tool.ESTIMATOR_ITEMS]

    def build(held, m_passes, c_status="fail"):
        items = {
            "m": {n: "pass" if n in m_passes else "fail" for n in six},
            "c": {n: c_status for n in six},
        }
        return {"held": held, "items": items}

    records = [build(True, six), build(True, six[:1]), build(False, ()), build(True, six, "error")]
    pats = tool.patterns(records, ["m", "c"])
    assert pats["m"] == {"PPPPPP": 2, "PFFFFF": 1}  # the build whose gates failed is left out
    assert pats["c"] == {"FFFFFF": 2, "EEEEEE": 1}
    tool._patterns_summary(records, ["m", "c"])
    out = capsys.readouterr().out
    assert "4 distinct verdict patterns over 2 estimators" in out
    assert "m: PPPPPP ×2, PFFFFF ×1" in out
