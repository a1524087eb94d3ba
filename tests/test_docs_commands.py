"""Every command the README and docs/*.md show is run by a test, or by `.ci/run`: the table of how
each is exercised is `tests/docs_commands.py` (`COMMANDS`; its docstring explains `Run` and
`Elsewhere`)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from docs_commands import COMMANDS, DRY, FULL, INSTALL, TEST_COMMAND, Elsewhere, Run
from markdown_docs import ROOT, commands, split_fences


def _runs(tier: str) -> list[tuple[str, Run, tuple[str, ...]]]:
    """The tier's runs, each distinct command once (two docs may show one command two ways), with
    every string its entries expect in its output (each entry's own `expect` is checked)."""
    out, seen = [], {}
    for doc, how in COMMANDS.items():
        for r in how:
            if not isinstance(r, Run) or r.tier != tier:
                continue
            key = (r.cmd.replace("{doc}", doc), r.cwd)
            if key not in seen:
                seen[key] = (doc, r, [])
                out.append(seen[key])
            if r.expect and r.expect not in seen[key][2]:
                seen[key][2].append(r.expect)
    return [(doc, r, tuple(expects)) for doc, r, expects in out]


def _ids(runs) -> list[str]:
    return [doc[:60] for doc, *_ in runs]


def test_every_documented_command_is_covered():
    found = commands()
    missing = {c: f for c, f in found.items() if c not in COMMANDS}
    stale = sorted(set(COMMANDS) - set(found))
    assert not missing, (
        "commands in the docs that no test runs: add each to COMMANDS in "
        f"tests/test_docs_commands.py (a Run or an Elsewhere): {missing}"
    )
    assert not stale, f"COMMANDS entries no doc shows any more (remove them): {stale}"
    assert all(COMMANDS[c] for c in found)


ELSEWHERE = [(doc, e) for doc, how in COMMANDS.items() for e in how if isinstance(e, Elsewhere)]


@pytest.mark.parametrize(("doc", "ref"), ELSEWHERE, ids=_ids(ELSEWHERE))
def test_the_command_is_exercised_where_the_entry_says(doc: str, ref: Elsewhere):
    path, _, test = ref.where.partition("::")
    text = (ROOT / path).read_text()
    needle = ref.text or (f"def {test}(" if test else doc)
    assert needle in text, f"{doc!r}: {ref.where} no longer holds {needle!r} ({ref.why})"
    if test and ref.text:
        assert f"def {test}(" in text, f"{doc!r}: {ref.where}: no such test or fixture"


def _readme_method(tmp: Path) -> None:
    """`my_method.py` as the README shows it (its ```python block), where the gate commands run."""
    blocks = [
        b for lang, b in split_fences((ROOT / "README.md").read_text())[1] if lang == "python"
    ]
    assert len(blocks) == 1 and blocks[0][0] == "# my_method.py", (
        "the README's one example is my_method.py"
    )
    (tmp / "my_method.py").write_text("\n".join(blocks[0]) + "\n")


def _execute(
    doc: str,
    run: Run,
    tmp: Path,
    cache: Path | None = None,
    run_dir: Path | None = None,
    expects: tuple[str, ...] | None = None,
):
    _readme_method(tmp)
    cmd = run.cmd.format(doc=doc, tmp=tmp, cache=cache, run=run_dir)
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "BEHAVIORTRACE_CACHE": str(tmp / "cache"),
        "PYTHONPATH": str(tmp),
        "COLUMNS": "120",
    }
    env.pop("PYTEST_ADDOPTS", None)
    res = subprocess.run(
        ["bash", "-c", cmd],
        cwd=ROOT if run.cwd == "root" else tmp,
        env=env,
        capture_output=True,
        text=True,
        timeout=7200 if run.tier == "full" else 600,
    )
    out = res.stdout + res.stderr
    assert res.returncode in run.ok, (
        f"`{cmd}` exited {res.returncode} (expected {run.ok}):\n{out[-3000:]}"
    )
    for want in (run.expect,) if expects is None else expects:
        assert want in out, f"`{cmd}`: no {want!r} in its output:\n{out[-3000:]}"
    if run.judged:  # the run judged the method: a pass or a fail on the item, not a crash or a skip
        card = json.loads((tmp / "scorecard.json").read_text())
        status = {(r["estimator"], r["item"]): r["status"] for r in card["records"]}
        assert status.get(run.judged) in ("pass", "fail"), (run.judged, status, out[-2000:])
    return out


UNIT = _runs("unit")


@pytest.mark.parametrize(("doc", "run", "expects"), UNIT, ids=_ids(UNIT))
def test_unit_tier_commands_run(doc: str, run: Run, expects: tuple[str, ...], tmp_path):
    out = _execute(doc, run, tmp_path, expects=expects)
    if DRY in run.cmd and run.ok == (
        0,
    ):  # collected the checklist: every item of every selected estimator
        assert "tests collected" in out or "test collected" in out, out[-2000:]
    if run.cmd == "{doc}" and "--json" in doc:
        json.loads(out.strip().splitlines()[-1])  # the --json form prints JSON


TRAIN = _runs("train")


# a long check (about 2 min of one core in all, each a documented benchmark or judged session on
# the smoke cache): CI runs it after the README's test command (tests/conftest.py, `long`)
@pytest.mark.long
@pytest.mark.parametrize(("doc", "run", "expects"), TRAIN, ids=_ids(TRAIN))
def test_train_tier_commands_run_on_the_smoke_cache(
    doc: str, run: Run, expects: tuple[str, ...], tmp_path, smoke_artifacts, smoke_cache
):
    _execute(doc, run, tmp_path, smoke_cache, smoke_artifacts[0].run.path, expects)


FULL_RUNS = _runs("full")


@pytest.mark.full_scale
@pytest.mark.skipif(
    not FULL, reason="a documented command at full scale: BT_FULL_SCALE=1 (tox -e benchmarks)"
)
@pytest.mark.parametrize(("doc", "run", "expects"), FULL_RUNS, ids=_ids(FULL_RUNS))
def test_full_scale_commands_run(doc: str, run: Run, expects: tuple[str, ...], tmp_path):
    _execute(doc, run, tmp_path, expects=expects)


def test_the_readme_commands_are_the_ci_commands():
    """The README's test command is `.ci/run`'s, character for character."""
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    readme = commands()
    assert TEST_COMMAND in ci and "README.md" in readme[TEST_COMMAND]
    assert "README.md" in readme[f"{INSTALL} && pytest benchmarks"]
    # the README's two commands install alike (the extras CI tests are installed after its test
    # command, on lines of their own: that command passes without them)
    assert shlex.split(f"{INSTALL} && pytest benchmarks")[:5] == shlex.split(TEST_COMMAND)[:5]
