"""Every error at the standard of the usage errors: it exits fast with its own code, names the file
and line or the value, and says what to do.

    a plug-in with a syntax error / raising at import   → usage error (exit 4) naming FILE:LINE
    a plug-in whose score() raises                      → its failed items' reason names the raising
                                                        frame
    an adapter whose optional extra is missing          → names the `pip install` that brings it
    progress written to a file or pipe                  → a few plain lines (stage, seed, elapsed),
                                                        no bars

(A damaged cache — reported once, exit 7 — is tests/test_reliability.py's
test_damaged_cache_is_one_clear_session_error.)
"""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bt_core.attribution import adapters, catalog
from bt_core.attribution.registry import UnknownEstimatorError
from bt_core.progress import PlainProgress, progress

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent

PLUGINS = {
    "syntax_mod": (
        "from bt_core.attribution import Estimator\n\n\nclass F(Estimator):\n    name = 'f'\n\n"
        "    def score(self, problem)\n        return 1\n",
        "syntax_mod.py:7: SyntaxError",
    ),
    "raising_mod": (
        "import json\n\nraise RuntimeError('MY_TOKEN is not set')\n",
        "raising_mod.py:3: RuntimeError: MY_TOKEN is not set",
    ),
    "dep_mod": (
        "import json\nimport no_such_dependency_xyz  # noqa\n",
        "dep_mod.py:2: ModuleNotFoundError: No module named 'no_such_dependency_xyz'",
    ),
}


@pytest.mark.parametrize("module", sorted(PLUGINS))
def test_a_plugin_that_fails_to_import_is_a_usage_error_naming_file_and_line(module, tmp_path):
    source, expected = PLUGINS[module]
    (tmp_path / f"{module}.py").write_text(source)
    t0 = time.perf_counter()
    res = subprocess.run(
        [
            str(BIN / "behaviortrace"),
            "check",
            f"--estimator={module}:F",
            "--scale=smoke",
            f"--bt-cache={tmp_path / 'cache'}",
            "-p",
            "no:cacheprovider",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"},
    )
    wall = time.perf_counter() - t0
    out = res.stdout + res.stderr
    assert res.returncode == 4, out[-2000:]
    assert f"importing {module!r} failed at {expected}" in out
    assert (
        "INTERNALERROR" not in out and "Traceback" not in out and len(out.strip().splitlines()) <= 3
    )
    assert not (tmp_path / "cache").exists()  # refused before anything was built
    assert wall < 60  # seconds of imports, no build (measured ~1.5 s on an idle core)


def test_a_broken_entry_point_plugin_names_its_file_and_line(tmp_path, monkeypatch):
    """An installed plug-in that raises on load (as catalog._load meets it, through
    EntryPoint.load)."""
    import importlib.metadata as md

    from bt_core.attribution.frames import raised_at

    (tmp_path / "ep_mod.py").write_text("x = 1\nraise ValueError('broken on purpose')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    try:
        md.EntryPoint(name="ep", value="ep_mod:F", group="behaviortrace.estimators").load()
    except ValueError as e:
        assert raised_at(e, skip=(__file__,)) == "ep_mod.py:2: ValueError: broken on purpose"


def test_a_missing_extra_names_its_install_command(monkeypatch, scoped_registry):
    monkeypatch.setattr(adapters, "MISSING", {"trak": adapters.INSTALL["trak"]})
    scoped_registry.remove("trak_traker")
    with pytest.raises(UnknownEstimatorError) as e:
        catalog.get("trak_traker")
    msg = str(e.value)
    assert "is an adapter whose library is not installed here" in msg
    assert 'install it with: pip install "behaviortrace[trak]"' in msg and "Did you mean" not in msg


def test_the_adapter_table_names_the_estimators_the_adapters_register():
    """adapters.ESTIMATORS (used for the install hint) lists exactly the names each adapter module
    registers."""
    for lib, module in adapters.ADAPTERS.items():
        src = (ROOT / "bt_core" / "attribution" / "adapters" / f"{module}.py").read_text()
        registered = set(re.findall(r'^    name = "(\w+)"', src, flags=re.M))
        assert registered == {e for e, lb in adapters.ESTIMATORS.items() if lb == lib}, lib


def test_a_raising_estimator_is_reported_with_the_frame_that_raised(
    tmp_path, monkeypatch, smoke_evidence
):
    (tmp_path / "raiser_mod.py").write_text(
        "from bt_core.attribution import Estimator\n\n\ndef helper(problem):\n"
        "    raise ValueError('boom in helper')\n\n\nclass R(Estimator):\n    name = 'raiser'\n"
        "    needs = ('emb',)\n\n    def score(self, problem):\n        return helper(problem)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    spec = catalog.get("raiser_mod:R")
    from bt_core.attribution.evidence import EstimatorFailure

    with pytest.raises(EstimatorFailure) as e:
        smoke_evidence.scores(spec, smoke_evidence.stream_problem(smoke_evidence.seeds[0]))
    assert "raised ValueError: boom in helper (at raiser_mod.py:5 in helper)" in str(e.value)


# --------------------------------------------------------------------------- progress
class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_is_a_bar_on_a_terminal_and_plain_lines_elsewhere():
    from tqdm.auto import tqdm

    assert isinstance(progress(range(3), desc="x", stream=_Tty()), tqdm)
    log = io.StringIO()
    for _ in progress(range(500), desc="GRPO seed 3", unit="step", stream=log):
        pass
    lines = log.getvalue().splitlines()
    assert lines[0] == "GRPO seed 3: started (500 steps)"
    assert (
        re.fullmatch(r"GRPO seed 3: done 500/500 steps in \d+\.\d s", lines[1]) and len(lines) == 2
    )
    assert "\r" not in log.getvalue()


def test_plain_progress_reports_at_most_every_interval_with_its_stage():
    log = io.StringIO()
    with progress(total=4, desc="building 2 seeds", unit="stage", stream=log, every=0) as bar:
        for seed, stage in ((0, "run"), (1, "run"), (0, "sketches"), (1, "sketches")):
            bar.set_postfix_str(f"seed {seed}: {stage} ready")
            bar.update(1)
    lines = log.getvalue().splitlines()
    # start, 3 stages, done (with the last)
    assert isinstance(bar, PlainProgress) and len(lines) == 5
    assert re.fullmatch(r"building 2 seeds: 1/4 stages, seed 0: run ready, \d+ s elapsed", lines[1])
    assert (
        lines[-1].startswith("building 2 seeds: done 4/4 stages in")
        and "seed 1: sketches ready" in lines[-1]
    )
    quiet = io.StringIO()
    bar = progress(total=1000, desc="s", stream=quiet)  # the default interval: 30 s
    for _ in range(1000):
        bar.update(1)
    bar.close()
    assert len(quiet.getvalue().splitlines()) == 2


def test_a_stage_left_early_stops_its_heartbeat():
    """An iteration cut short by an error writes no "done" line, and its heartbeat stops: a stage
    that failed must not keep reporting itself for the rest of the session."""
    import time

    log = io.StringIO()
    with pytest.raises(RuntimeError):
        for i in progress(range(5), desc="replays", stream=log, every=0.05):
            if i == 1:
                raise RuntimeError("a replay failed")
    lines = log.getvalue().splitlines()
    time.sleep(0.3)
    assert log.getvalue().splitlines() == lines and not any("done" in x for x in lines)


def test_the_preamble_runs_once_before_the_first_progress_output_only():
    from bt_core.progress import before_first_line

    calls = []
    before_first_line(lambda: calls.append(1))
    progress(total=1, desc="off", enabled=False).close()  # nothing shown: not yet
    assert calls == []
    log = io.StringIO()
    progress(total=1, desc="a", stream=log, every=0).close()
    progress(total=1, desc="b", stream=log, every=0).close()
    assert calls == [1]  # once, before the first
    before_first_line(lambda: calls.append(2))
    before_first_line(None)  # forgotten (a warm session)
    progress(total=1, desc="c", stream=log, every=0).close()
    assert calls == [1]


def test_plain_progress_writes_a_line_every_interval_even_inside_one_long_unit():
    """Issue 39: a log gets a line at least every interval per stage, also while one unit (one
    seed's SFT, one replay) runs longer than that, and nothing after the stage ends."""
    import time

    log = io.StringIO()
    bar = progress(total=2, desc="SFT seed 0", unit="seed", stream=log, every=0.1)
    time.sleep(0.55)  # one unit, 5 intervals long
    bar.update(1)
    bar.update(1)
    bar.close()
    lines = log.getvalue().splitlines()
    beats = [x for x in lines if re.fullmatch(r"SFT seed 0: 0/2 seeds, \d+ s elapsed", x)]
    assert len(beats) >= 3, lines
    assert lines[0] == "SFT seed 0: started (2 seeds)" and lines[-1].startswith("SFT seed 0: done")
    time.sleep(0.3)
    assert log.getvalue().splitlines() == lines  # closed: the heartbeat stopped


@pytest.mark.train
def test_train_into_a_log_file_writes_a_few_plain_progress_lines(tmp_path):
    log = tmp_path / "log"
    with open(log, "w") as f:
        res = subprocess.run(
            [
                str(BIN / "behaviortrace"),
                "train",
                "--scale",
                "smoke",
                "--steps",
                "2",
                "--out",
                str(tmp_path / "run"),
            ],
            stdout=f,
            stderr=subprocess.STDOUT,
            timeout=600,
        )
    text = log.read_text()
    assert res.returncode == 0, text[-2000:]
    progress_lines = [
        ln for ln in text.splitlines() if ln.startswith(("SFT seed 0:", "GRPO seed 0:"))
    ]
    assert progress_lines[0] == "SFT seed 0: started (300 steps)" and len(progress_lines) <= 8
    assert progress_lines[-1].startswith("GRPO seed 0: done 2/2 steps in")
    assert "\r" not in text and "it/s" not in text and "%|" not in text  # no bar redraws


def test_a_parallel_build_names_what_each_seed_builds_at_least_every_heartbeat(smoke_scale):
    """Issue 64: a parallel build's workers print nothing to the session's log, and the parent used
    to print only finished stages (silences of 59–111 s at default). Its bar now beats at least
    every `heartbeat` seconds (30 in a build, `BUILD_HEARTBEAT_S`), each line naming the stage each
    seed is building; a finished seed is left out. Driven here by the parent's own loop
    (`pipeline._drive`) over stand-in seed tasks: seed 0's sketches take 40 heartbeats."""
    import queue as queues
    from concurrent.futures import ThreadPoolExecutor

    from bt_core import pipeline

    beat, log, events = 0.05, io.StringIO(), queues.Queue()

    def seed_task(seed: int, slow: float) -> None:
        for stage in pipeline.STAGES[:-1]:  # the replays stage has nothing to build here
            time.sleep(slow if stage == "sketches" else 0.0)
            events.put((seed, stage))

    n = 2 * len(pipeline.STAGES)
    with (
        ThreadPoolExecutor(2) as ex,
        progress(
            total=n, desc="building 2 seeds", unit="stage", stream=log, every=0, heartbeat=beat
        ) as bar,
    ):
        base = {ex.submit(seed_task, 0, 40 * beat): 0, ex.submit(seed_task, 1, 0.0): 1}
        pipeline._drive(None, smoke_scale.run, None, ex, bar, events, base, set(base))
    lines = log.getvalue().splitlines()
    assert lines[-1].startswith(f"building 2 seeds: done {n}/{n} stages")
    # while seed 0 builds its sketches and seed 1 is done, the heartbeat says so, more than once
    # (no count moves then: these lines are the heartbeat's)
    waiting = [ln for ln in lines if ln.endswith("elapsed") and "building: seed 0 sketches" in ln]
    assert len(waiting) >= 2, lines
    assert all("seed 1" not in ln.split("building:")[1] for ln in waiting[1:]), waiting
    assert pipeline.BUILD_HEARTBEAT_S <= 30  # issue 39's bar: a line at least every 30 s


def test_an_argument_the_system_cannot_look_up_is_not_found_not_an_internal_error(tmp_path):
    """A stray word on the command line (a mistyped option's value, a list pasted without its
    `--estimator=`) can be a name longer than the file system allows: pytest says it was not
    found (exit 4), not an INTERNALERROR from the plugin's look for a suite under it."""
    long = ",".join(f"adversaries:Estimator{i}" for i in range(20))  # 400+ characters
    res = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", long],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = res.stdout + res.stderr
    assert res.returncode == 4 and "INTERNALERROR" not in out, out[-2000:]
    assert "not found" in out, out[-2000:]
