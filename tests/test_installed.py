"""The gate as a method author meets it: behaviortrace installed from its wheel (not this checkout),
run from a directory outside the checkout that holds only `my_method.py`.

A scratch virtual environment gets the wheel (no dependencies); the dependencies come from this
environment's site directories through `.pth` lines, which add the directories but run none of their
`.pth` files, so this checkout's editable install stays invisible there (a test asserts the imports
come from the wheel).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers import outer_venv

ROOT = Path(__file__).resolve().parents[1]
# a test that points a session at the smoke cache and asserts it is warm must have it built
# first, whatever ran before it (under `-n 2 --dist loadfile` this file can be a worker's first)
WARM = pytest.mark.usefixtures("smoke_artifacts")
pytestmark = pytest.mark.train

MY_METHOD = '''
import numpy as np
from bt_core.attribution import Estimator


class MyMethod(Estimator):
    """Scores = the in-context target's alignment: a real (if confounded) method."""
    name = "my_method"
    levels = ("rollout", "step")
    needs = ("emb", "weight", "targets", "ckpt_index")

    def score(self, problem):
        return problem.dot("in_context")
'''


def _clean_venv(venv: Path) -> Path:
    """A virtual environment without pip or behaviortrace whose dependencies are this environment's
    site directories (`helpers.outer_venv`); its python."""
    return outer_venv(venv)


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    """(python of a scratch venv holding the behaviortrace wheel, its bin dir)."""
    tmp = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "-w",
            str(tmp / "dist"),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
        timeout=600,
    )
    wheel = next((tmp / "dist").glob("behaviortrace-*.whl"))
    venv = tmp / "venv"
    py = _clean_venv(venv)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(py),
            "install",
            "-q",
            "--no-deps",
            str(wheel),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return py, venv / "bin", wheel


@pytest.fixture
def author_repo(tmp_path):
    d = tmp_path / "my-method-repo"
    d.mkdir()
    (d / "my_method.py").write_text(MY_METHOD)
    return d


def _env(bin_dir: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTEST_ADDOPTS")}
    return {**env, "PATH": f"{bin_dir}{os.pathsep}{env['PATH']}", "PYTHONNOUSERSITE": "1"}


def _run(
    cmd: list[str], cwd: Path, bin_dir: Path, timeout: int = 900
) -> subprocess.CompletedProcess:
    return subprocess.run(
        cmd, cwd=cwd, env=_env(bin_dir), capture_output=True, text=True, timeout=timeout
    )


def test_the_wheel_installs_only_namespaced_packages(scratch, tmp_path):
    py, _, wheel = scratch
    import zipfile

    tops = {
        n.split("/")[0]
        for n in zipfile.ZipFile(wheel).namelist()
        if not n.endswith(".dist-info/RECORD")
    }
    assert {t for t in tops if not t.endswith(".dist-info")} == {"bt_core", "behaviortrace"}
    out = subprocess.run(
        [
            str(py),
            "-c",
            "import bt_core, behaviortrace.checklist as c; print(bt_core.__file__); "
            "print(c.__file__)",
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    ).stdout
    assert str(ROOT) not in out and "site-packages" in out  # the wheel's code, not this checkout's


@WARM
def test_check_gates_a_method_from_outside_the_checkout(scratch, author_repo, smoke_cache):
    _, bin_dir, _ = scratch
    common = ["--scale=smoke", f"--bt-cache={smoke_cache}", "--bt-workers=1"]
    res = _run(
        [str(bin_dir / "behaviortrace"), "check", "--estimator=my_method:MyMethod", *common],
        author_repo,
        bin_dir,
    )
    assert res.returncode in (0, 1, 11), res.stdout[-3000:] + res.stderr[-3000:]
    card = json.loads((author_repo / "scorecard.json").read_text())
    recs = [r for r in card["records"] if r["estimator"] == "my_method"]
    from behaviortrace.checklist import ESTIMATOR_ITEMS

    assert len(recs) == len(ESTIMATOR_ITEMS)
    assert all(r["estimator_spec"]["origin"] == "path:my_method:MyMethod" for r in recs)
    statuses = {r["status"] for r in recs}
    # the exit code is the gate: 1 a judged failure, else 11 anything not judged, else 0
    want = 1 if "fail" in statuses else 11 if statuses - {"pass"} else 0
    assert res.returncode == want, (statuses, res.stdout[-2000:])
    # the installed suite ran: the rootdir is its package (the test ids read benchmarks/…)
    head = res.stdout[:800]
    assert re.search(r"^rootdir: .*site-packages/behaviortrace$", head, re.M), head
    res = _run(
        [str(bin_dir / "behaviortrace"), "check", "--estimator=no_such_method", *common],
        author_repo,
        bin_dir,
    )
    assert res.returncode == 4 and "unknown estimator 'no_such_method'" in res.stderr


@WARM
def test_the_default_cache_follows_the_user_across_folders(scratch, tmp_path, smoke_cache):
    """Issue 39: without --bt-cache or $BEHAVIORTRACE_CACHE, `behaviortrace check` reads and builds
    in the per-user cache (the platform's cache directory; here $XDG_CACHE_HOME points at a folder
    whose behaviortrace/ is the session's smoke cache), so a gate from a second folder is warm:
    nothing is built. The output names the suite's own test ids, and neither folder is left with a
    cache or pytest-benchmark's storage."""
    _, bin_dir, _ = scratch
    xdg = tmp_path / "xdg"
    xdg.mkdir()
    (xdg / "behaviortrace").symlink_to(smoke_cache, target_is_directory=True)
    env = {k: v for k, v in _env(bin_dir).items() if k != "BEHAVIORTRACE_CACHE"}
    env["XDG_CACHE_HOME"] = str(xdg)
    log = smoke_cache / "builds.jsonl"
    before = log.read_text() if log.exists() else ""
    for name in ("first", "second"):
        d = tmp_path / name
        d.mkdir()
        res = subprocess.run(
            [str(bin_dir / "behaviortrace"), "check", "--estimator=random", "--scale=smoke"]
            + ["--bt-workers=1", "-k", "magnitude_control", "-rA"],
            cwd=d,
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert res.returncode in (0, 1), res.stdout[-3000:] + res.stderr[-3000:]
        assert f"behaviortrace cache: {xdg / 'behaviortrace'}" in res.stdout
        assert "benchmarks/test_checklist.py::" in res.stdout
        named = [x for x in res.stdout.splitlines() if "test_checklist.py" in x]
        assert named and not [x for x in named if "../" in x or "site-packages" in x], named
        assert "PytestAssertRewriteWarning" not in res.stdout
        # the scorecard (JSON, Markdown, page, figures) and nothing else: no cache, no .benchmarks/
        left = sorted(p.name for p in d.iterdir())
        assert "scorecard.json" in left and all(n.startswith("scorecard") for n in left), left
    assert (log.read_text() if log.exists() else "") == before  # warm: nothing was built


@WARM
def test_plain_pytest_runs_the_installed_suite_through_the_entry_point(
    scratch, author_repo, smoke_cache
):
    _, bin_dir, _ = scratch
    (author_repo / "test_unrelated.py").write_text("def test_theirs():\n    pass\n")
    # the oracle passes every item of the reference view (the planted labels' own) but
    # `counterfactual`, which is causal only (labels are not a perfect LDS predictor, see
    # checklist/counterfactual.py; tests/test_suite_end_to_end.py); here it stands for a method
    # that passes everything
    res = _run(
        [
            str(bin_dir / "python"),
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "--estimator=oracle",
            "--scale=smoke",
            f"--bt-cache={smoke_cache}",
            "--bt-workers=1",
            "--gate-view=reference",
            "-k",
            "not counterfactual",
        ],
        author_repo,
        bin_dir,
    )
    assert res.returncode == 0, res.stdout[-3000:]
    # only the suite, not their tests
    assert "test_theirs" not in res.stdout and "oracle" in res.stdout
    plain = _run(
        [str(bin_dir / "python"), "-m", "pytest", "-p", "no:cacheprovider", "-q"],
        author_repo,
        bin_dir,
    )
    assert plain.returncode == 0 and "1 passed" in plain.stdout  # without a suite option: inert
    assert not (author_repo / ".bt_cache").exists()


@WARM
def test_the_gate_workflow_runs_in_a_scratch_repository(scratch, author_repo, smoke_cache):
    """.github/workflows/gate-estimator.yml's own steps, the install replaced by the local wheel."""
    _, bin_dir, _ = scratch
    wf = yaml.safe_load((ROOT / ".github" / "workflows" / "gate-estimator.yml").read_text())
    steps = [s for s in wf["jobs"]["checklist"]["steps"] if "run" in s]
    # replaced: the scratch venv holds the wheel
    assert steps[0]["name"].startswith("Install BehaviorTrace")
    subprocess.run(["git", "init", "-q", str(author_repo)], check=True)
    (author_repo / ".bt_cache").symlink_to(smoke_cache, target_is_directory=True)
    output = author_repo / "github_output"
    env = {
        **_env(bin_dir),
        "ESTIMATOR": "my_method:MyMethod",
        "SCALE": "smoke",
        "GITHUB_OUTPUT": str(output),
    }
    for step in steps[1:]:
        res = subprocess.run(
            ["bash", "-e", "-c", step["run"]],
            cwd=author_repo,
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        if step["name"] == "Run the checklist":
            assert res.returncode in (0, 1, 11), res.stdout[-3000:] + res.stderr[-3000:]
        else:
            assert res.returncode == 0, (step["name"], res.stderr)
    assert output.read_text().startswith("key=behaviortrace-smoke-")
    for f in ("scorecard.json", "scorecard.md", "scorecard.html", "junit.xml"):
        assert (author_repo / f).is_file(), f
    junit = (author_repo / "junit.xml").read_text()
    assert (
        'classname="benchmarks.test_checklist"' in junit
        and "my_method-magnitude_control-causal" in junit
    )


def _clone(dest: Path) -> Path:
    """Another copy of this checkout: its tracked files as they are in the working tree (a user's
    clone)."""
    files = subprocess.run(
        [
            "git",
            "ls-files",
            "benchmarks",
            "checklist",
            "fixtures",
            "bt_core",
            "conftest.py",
            "pyproject.toml",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    for f in files:
        (dest / f).parent.mkdir(parents=True, exist_ok=True)
        (dest / f).write_bytes((ROOT / f).read_bytes())
    return dest


@WARM
def test_the_readme_command_runs_from_a_clone_while_another_copy_is_installed(
    scratch, tmp_path, smoke_cache
):
    """`pytest benchmarks --estimator=…` in a clone, the package installed from the wheel (another
    copy): the clone's suite is collected once (before: the installed suite was added too, and
    collection crashed with "import file mismatch")."""
    _, bin_dir, _ = scratch
    clone = _clone(tmp_path / "clone")
    common = [
        "-m",
        "pytest",
        "benchmarks",
        "--estimator=random",
        "--scale=smoke",
        f"--bt-cache={smoke_cache}",
        "--bt-workers=1",
        "-p",
        "no:cacheprovider",
    ]
    res = _run([str(bin_dir / "python"), *common, "--collect-only", "-q"], clone, bin_dir)
    from behaviortrace.checklist import ESTIMATOR_ITEMS, SETUP_ITEMS

    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    ids = [ln for ln in res.stdout.splitlines() if "::" in ln]
    assert len(ids) == len(SETUP_ITEMS) + len(ESTIMATOR_ITEMS) and len(set(ids)) == len(ids)  # once
    assert all(i.startswith("benchmarks/test_checklist.py::") for i in ids)  # the clone's copy
    res = _run(
        [str(bin_dir / "python"), *common, "-q", "-k", "random and magnitude_control"],
        clone,
        bin_dir,
    )
    assert res.returncode in (0, 1, 11) and "import file mismatch" not in res.stdout, res.stdout[
        -3000:
    ]
    card = json.loads((clone / "scorecard.json").read_text())
    assert [r["item"] for r in card["records"] if r["estimator"] == "random"] == [
        "magnitude_control"
    ]


def _readme_gate_block() -> list[str]:
    """The command lines of the README's "Gate your method" bash block."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Gate your method") :]
    start = section.index("```bash") + len("```bash")
    block = section[start : section.index("```", start)]
    return [ln.strip() for ln in block.strip().splitlines() if ln.strip()]


def test_the_readme_install_line_installs_the_gate_from_a_copy_beside_the_method(tmp_path):
    """Issue 39: the README's install line works as printed on a machine with only the package
    registries. It names a folder (BehaviorTrace is not on PyPI), the workflow's default installs
    the same folder, and pip installs it into a clean virtual environment, where the gate's command
    answers (dependencies come from this environment's site directories, as in `scratch`: the line's
    torch pin is not downloaded again)."""
    install, check = _readme_gate_block()
    assert install == "pip install torch==2.13.0 ./behaviortrace", install
    assert check.startswith("behaviortrace check --estimator=my_method:")
    wf = yaml.safe_load((ROOT / ".github" / "workflows" / "gate-estimator.yml").read_text())
    assert wf["env"]["BEHAVIORTRACE"] == "./behaviortrace"  # the workflow installs what it says
    repo = tmp_path / "my-method-repo"
    clone = _clone(repo / "behaviortrace")
    (clone / "README.md").write_bytes((ROOT / "README.md").read_bytes())  # the package's readme
    venv = tmp_path / "venv"
    py = _clean_venv(venv)
    # the line's own target, from the method's folder (torch is this environment's 2.13.0)
    target = install.split()[-1]
    res = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps", target],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    res = _run([str(venv / "bin" / "behaviortrace"), "check", "--help"], repo, venv / "bin")
    assert res.returncode == 0 and "--estimator" in res.stdout, res.stdout[-2000:] + res.stderr
    where = subprocess.run(
        [str(py), "-c", "import behaviortrace.checklist as c; print(c.__file__)"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert str(ROOT) not in where and "site-packages" in where
