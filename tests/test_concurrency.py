"""Concurrency: processes racing for one artifact, pytest-xdist on a cold cache (each artifact built
once, one scorecard with every worker's verdicts), and cache cleaning that never deletes what is
being built."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from behaviortrace.checklist import ESTIMATOR_ITEMS, SETUP_ITEMS  # noqa: E402

from bt_core.cli import main
from bt_core.config import get_scale

N_SETUP, N_ITEMS = len(SETUP_ITEMS), len(ESTIMATOR_ITEMS)
ROOT = Path(__file__).resolve().parents[1]
pytest_plugins = ["pytester"]

RACE = """
import sys, time
import numpy as np
from bt_core.artifacts.store import ArtifactStore, save_array

def build(d):
    time.sleep(0.3)  # widen the window in which a second builder could sneak in
    save_array(d / "a.npy", np.arange(100))

print(ArtifactStore(sys.argv[1]).get_or_build("x", "k", {"n": 100}, build))
"""

HOLD = """
import sys
from filelock import FileLock
with FileLock(sys.argv[1]):
    print("locked", flush=True)
    sys.stdin.read()  # hold until the test closes our stdin
"""


def _env() -> dict:
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }


def test_racing_processes_build_an_artifact_once(tmp_path):
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RACE, str(tmp_path)],
            env=_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    assert len({o.strip() for o, _ in outs}) == 1
    log = (tmp_path / "builds.jsonl").read_text().splitlines()
    assert len(log) == 1, log
    assert sorted(p.name for p in (tmp_path / "x").iterdir()) == ["k", "k.lock"]


SMALL_PLAN = {"n_local": 8, "n_reweight": 8, "n_linearity": 0}
SMALL_SMOKE = f"""
import dataclasses

from bt_core.config import SCALES

_smoke = SCALES["smoke"]


def _small():
    s = _smoke()
    return dataclasses.replace(
        s, counterfactual=dataclasses.replace(s.counterfactual, **{SMALL_PLAN!r})
    )


SCALES["smoke"] = _small
"""


@pytest.mark.train
@pytest.mark.long
def test_xdist_cold_cache_builds_once_and_writes_one_scorecard(pytester, monkeypatch, tmp_path):
    """`pytest -n 2` on an empty cache: both workers need seed 0's artifacts at once; the file locks
    let one build each artifact while the other waits and loads it; both pass their share of the
    tests, and the controller writes one scorecard holding every worker's verdicts, equal to a
    serial run's.
    With --bt-rebuild as well: the workers share the session's rebuild token, so the second worker
    does not rebuild what the first just built (without the token each worker would rebuild
    once)."""
    pytest.importorskip("xdist")
    monkeypatch.setenv("PYTHONPATH", _env()["PYTHONPATH"])
    # The smoke preset with the plan's fewest local, reweighted and linearity subsets (as
    # test_fresh_key builds it): 28 replays instead of 68, the same kinds of artifact built
    # under the same locks, in about half the cold build (the linearity replays are left out:
    # they are built like the other replays). The rootdir's conftest is loaded by the controller
    # and each worker before the suite reads its scale.
    pytester.makeconftest(SMALL_SMOKE)
    cache = tmp_path / "cold"
    args = (
        "--scale=smoke",
        "--seeds=0",
        f"--bt-cache={cache}",
        "--estimator=oracle,random",
        "-p",
        "no:cacheprovider",
    )
    res = pytester.runpytest_subprocess("-n", "2", "--bt-rebuild", *args, timeout=600)
    outcomes = res.parseoutcomes()
    n_tests = N_SETUP + 2 * N_ITEMS  # setup items once, estimator items for oracle and random
    ran = sum(outcomes.get(k, 0) for k in ("passed", "failed", "xfailed", "skipped"))
    assert ran == n_tests, res.stdout.str()
    card = json.loads((pytester.path / "scorecard.json").read_text())
    assert card["xdist_workers"] == 2  # both workers ran tests and handed their verdicts over
    recs = {(r["item"], r["estimator"]): r["status"] for r in card["records"]}
    assert len(recs) == len(card["records"]) == n_tests
    assert sum(s == "pass" for s in recs.values()) == outcomes.get("passed", 0)
    res.stdout.fnmatch_lines(
        ["*BehaviorTrace scorecard*", "*oracle*", "*scorecard: *scorecard.json*"]
    )
    builds = [json.loads(line) for line in (cache / "builds.jsonl").read_text().splitlines()]
    keys = [(b["kind"], b["key"]) for b in builds]
    smoke = get_scale("smoke")
    cf, n_draws = dataclasses.replace(smoke.counterfactual, **SMALL_PLAN), smoke.draws.n_draws
    # run, its control run, sketches, targets, draws; the replays (full, gt_out, random, no_bonus,
    # lds, local; the float64 full_f64, the reweighted subsets and their ladder), their index
    n_ladder = cf.n_linearity * len(cf.linearity_deltas)
    n_replays = 2 + cf.n_random + 1 + cf.n_lds + cf.n_local + 1 + cf.n_reweight + n_ladder
    n_builds = 4 + n_draws + n_replays + 1
    assert len(keys) == len(set(keys))  # each built exactly once
    kinds = ("runs", "sketches", "targets", "draws", "replays", "replaysets")
    assert sum(k in kinds for k, _ in keys) == n_builds
    # and the kept target-free quantities (the ceiling's scores, the controls' bootstrap), once each
    assert {k for k, _ in keys} - set(kinds) == {"scores"}
    # no tmp/partial debris
    assert not [p for k in kinds for p in (cache / k).iterdir() if p.name.startswith(".")]
    serial = pytester.runpytest_subprocess(
        *args, "--bt-workers=1", "--scorecard=serial.json", timeout=600
    )
    assert json.loads((pytester.path / "serial.json").read_text())["records"] == card["records"]
    # the serial run loaded, built nothing
    assert (cache / "builds.jsonl").read_text().count("\n") == len(keys)
    serial.assert_outcomes(
        passed=outcomes.get("passed", 0),
        failed=outcomes.get("failed", 0),
        xfailed=outcomes.get("xfailed", 0),
        skipped=outcomes.get("skipped", 0),
    )


# --------------------------------------------------------------------------- cache info / clean
@pytest.fixture
def cache(smoke_artifacts, smoke_cache, tmp_path) -> Path:
    """A copy of the smoke cache with the debris of a killed sketch build and a killed training."""
    root = tmp_path / "cache"
    shutil.copytree(smoke_cache, root)
    sk = next(p for p in (root / "sketches").iterdir() if p.is_dir())
    debris = root / "sketches" / f".{sk.name}.tmp-999999-dead"
    shutil.copytree(sk, debris)
    (root / "runs" / ".0123456789abcdef.partial" / "journal").mkdir(parents=True)
    # the store locked that key before it began training
    (root / "runs" / "0123456789abcdef.lock").touch()
    return root


def test_cache_info_reports_sizes_and_leftovers(cache, capsys):
    assert main(["cache", "info", "--bt-cache", str(cache), "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    built = {"runs", "sketches", "targets", "draws", "replays", "replaysets"}
    # "scores" (the kept target-free scores) once a session has judged on the shared smoke cache:
    # whether one ran before this test depends on the order tests run in
    assert built <= set(rep["kinds"]) <= built | {"scores"}, rep["kinds"]
    assert rep["kinds"]["replaysets"]["artifacts"] == 3
    n_draws = 3 * get_scale("smoke").draws.n_draws  # 3 seeds
    # 3 runs and their 3 control runs (causal_gt's "no bonus, no behavior")
    assert rep["kinds"]["runs"]["artifacts"] == 6 and rep["kinds"]["draws"]["artifacts"] == n_draws
    assert rep["kinds"]["runs"]["bytes"] > 0 and rep["total_bytes"] >= sum(
        k["bytes"] for k in rep["kinds"].values()
    )
    assert sorted((e["kind"], e["state"], e["busy"]) for e in rep["leftovers"]) == [
        ("runs", "partial", False),
        ("sketches", "tmp", False),
    ]
    assert main(["cache", "info", "--bt-cache", str(cache)]) == 0
    out = capsys.readouterr().out
    assert (
        "sketches" in out
        and "stale: no live owner" in out
        and f"cache clean --bt-cache {cache} --stale-only --yes" in out  # runs as printed
    )


def test_cache_clean_stale_only_then_a_kind(cache, capsys):
    assert main(["cache", "clean", "--bt-cache", str(cache), "--stale-only"]) == 0  # dry run
    assert "would remove 2 directories" in capsys.readouterr().out
    assert len(list(cache.glob("*/.*.tmp-*"))) == 1
    assert main(["cache", "clean", "--bt-cache", str(cache), "--stale-only", "--yes"]) == 0
    assert "removed 2 directories" in capsys.readouterr().out
    assert not list(cache.glob("*/.*.tmp-*")) and not list(cache.glob("*/.*.partial"))
    # finished artifacts kept
    assert len([p for p in (cache / "runs").iterdir() if p.is_dir()]) == 6  # with the controls
    assert (
        main(["cache", "clean", "--bt-cache", str(cache), "--kind", "draws", "--yes", "--json"])
        == 0
    )
    # 3 seeds
    assert (
        len(json.loads(capsys.readouterr().out)["removed"]) == 3 * get_scale("smoke").draws.n_draws
    )
    assert not [p for p in (cache / "draws").iterdir() if p.is_dir()]
    assert len([p for p in (cache / "sketches").iterdir() if p.is_dir()]) == 3


def test_cache_clean_skips_what_another_process_is_building(cache, capsys):
    run = next(p for p in (cache / "runs").iterdir() if p.is_dir() and not p.name.startswith("."))
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, f"{run}.lock"],
        env=_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        assert main(["cache", "clean", "--bt-cache", str(cache), "--kind", "runs", "--yes"]) == 0
        captured = capsys.readouterr()
        assert f"skipped {run}: its key is locked by a running build" in captured.err
        assert run.is_dir() and len([p for p in (cache / "runs").iterdir() if p.is_dir()]) == 1
    finally:
        holder.communicate("", timeout=30)


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["cache", "clean", "--kind", "model"],
            (
                "--kind 'model' is unknown; choose one of draws, replays, replaysets, runs, "
                "scores, sketches, targets"
            ),
        ),
        (["cache", "info", "--bt-cache", "{file}"], "is a file, not a cache directory"),
    ],
)
def test_cache_command_bad_values(argv, message, tmp_path, capsys):
    (tmp_path / "f").write_text("x")
    argv = [a.format(file=tmp_path / "f") for a in argv]
    if "--bt-cache" not in argv:
        argv += ["--bt-cache", str(tmp_path / "cache")]
    assert main(argv) == 2
    assert message in capsys.readouterr().err
