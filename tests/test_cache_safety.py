"""Nothing outside a cache is ever deleted (bt_core/artifacts/cacheroot.py).

`behaviortrace cache clean`, `--bt-rebuild` and the store act only on a directory carrying the
cache's marker (or a legacy cache every entry of which is a cache's own, which is then marked), and
only on its artifact folders. `show` on anything but a run says what the folder is and what to pass,
and never suggests deleting it. Each case is a folder a user might pass by mistake: a source
checkout, a home-like directory, a cache root and its parts.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

import pytest

from bt_core.artifacts.cacheroot import MARKER, NotACacheError, is_cache_root
from bt_core.artifacts.store import ArtifactError, ArtifactStore, verify_dir
from bt_core.cli import main

ROOT = Path(__file__).resolve().parents[1]
KEY = "0123456789abcdef"


def _tree(root: Path) -> dict[str, str]:
    """Every file under `root` → sha256, and every directory → 'dir': what a deletion would
    change."""
    return {
        str(p.relative_to(root)): "dir"
        if p.is_dir()
        else hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
    }


def _cli(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.fixture
def checkout(tmp_path) -> Path:
    """A copy of a few tracked files of this repository (its artifacts package: folders a careless
    clean would take for kinds, as it did before the marker existed)."""
    d = tmp_path / "checkout"
    d.mkdir()
    files = subprocess.run(
        ["git", "ls-files", "pyproject.toml", "bt_core/artifacts", "bt_core/attribution"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    for f in files:
        (d / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / f, d / f)
    return d


@pytest.fixture
def home(tmp_path) -> Path:
    """A home-like directory, with a folder that happens to be called `runs`."""
    d = tmp_path / "home"
    (d / "projects" / "x").mkdir(parents=True)
    (d / "projects" / "x" / "main.py").write_text("print('mine')\n")
    (d / ".bashrc").write_text("export PS1='$ '\n")
    (d / "notes.txt").write_text("do not delete\n")
    # a key-shaped name even: still not a cache's
    (d / "runs" / "0123456789abcdef").mkdir(parents=True)
    (d / "runs" / "0123456789abcdef" / "log.txt").write_text("my experiment\n")
    return d


def _build(out: Path) -> None:
    (out / "a.txt").write_text("artifact")


@pytest.fixture
def cache(tmp_path) -> Path:
    root = tmp_path / "cache"
    ArtifactStore(root).get_or_build("runs", KEY, {}, _build)
    return root


@pytest.mark.parametrize("which", ["checkout", "home"])
def test_clean_info_and_rebuild_refuse_a_folder_that_is_not_a_cache(which, request, capsys):
    d = request.getfixturevalue(which)
    before = _tree(d)
    for argv in (
        ["cache", "clean", "--bt-cache", str(d), "--yes"],
        ["cache", "info", "--bt-cache", str(d)],
    ):
        rc, out, err = _cli(capsys, *argv)
        assert rc == 2 and not out
        assert (
            f"{d} is not a BehaviorTrace cache: it has no {MARKER}" in err
            and "Nothing in it was changed" in err
        )
    with pytest.raises(NotACacheError, match="is not a BehaviorTrace cache"):
        ArtifactStore(d, rebuild=True).get_or_build("runs", KEY, {}, _build)
    assert _tree(d) == before  # nothing deleted, nothing written (no marker either)


def test_the_suite_refuses_a_folder_that_is_not_a_cache_as_a_usage_error(home, capsys):
    before = _tree(home)
    rc = main(
        [
            "check",
            "--estimator=random",
            "--scale=smoke",
            f"--bt-cache={home}",
            "--bt-rebuild",
            "-p",
            "no:cacheprovider",
        ]
    )
    err = capsys.readouterr().err
    assert rc == 4 and f"--bt-cache={home}: {home} is not a BehaviorTrace cache" in err
    assert _tree(home) == before


def test_the_repository_itself_is_refused_and_described(capsys):
    before = _tree(ROOT / "bt_core" / "artifacts")
    # a dry run: lists, never deletes
    rc, _, err = _cli(capsys, "cache", "clean", "--bt-cache", str(ROOT))
    assert rc == 2 and "is not a BehaviorTrace cache" in err
    rc, _, err = _cli(capsys, "show", str(ROOT))
    assert rc == 2 and "is a source checkout" in err and "delete" not in err
    assert _tree(ROOT / "bt_core" / "artifacts") == before


@pytest.mark.parametrize("which", ["checkout", "home"])
def test_show_on_a_folder_that_is_not_a_run_never_suggests_deleting_it(which, request, capsys):
    d = request.getfixturevalue(which)
    rc, _, err = _cli(capsys, "show", str(d))
    assert rc == 2 and "not a run; pass a run directory" in err and "delete" not in err
    assert "Traceback" not in err
    with pytest.raises(ArtifactError) as e:
        verify_dir(d)
    assert "not a BehaviorTrace artifact" in str(e.value) and "delete" not in str(e.value)


def test_clean_removes_only_artifact_folders_of_a_marked_cache(cache, capsys):
    # the store marked the root it created
    assert is_cache_root(cache) and (cache / MARKER).is_file()
    (cache / "runs" / "my-notes").mkdir()
    (cache / "runs" / "my-notes" / "n.txt").write_text("kept")
    (cache / "sketches" / "scratch").mkdir(parents=True)
    # key-shaped, but no store ever locked it
    (cache / "mine" / "fedcba9876543210").mkdir(parents=True)
    rc, out, _ = _cli(capsys, "cache", "clean", "--bt-cache", str(cache), "--yes")
    assert rc == 0 and "removed 1 directory" in out
    assert not (cache / "runs" / KEY).exists()
    assert (cache / "runs" / "my-notes" / "n.txt").read_text() == "kept" and (
        cache / "sketches" / "scratch"
    ).is_dir()
    assert (cache / "mine" / "fedcba9876543210").is_dir()
    assert is_cache_root(cache)


def test_show_names_the_parts_of_a_cache_and_lists_its_runs(cache, capsys):
    run = cache / "runs" / KEY
    for d, what in (
        (cache, "is a BehaviorTrace cache root"),
        (cache / "runs", "is the runs/ folder"),
    ):
        rc, _, err = _cli(capsys, "show", str(d))
        assert (
            rc == 2
            and what in err
            and f"pass one of the cache's runs:\n  {run}" in err
            and "delete" not in err
        )
    sk = cache / "sketches" / KEY
    ArtifactStore(cache).get_or_build("sketches", KEY, {}, _build)
    rc, _, err = _cli(capsys, "show", str(sk))
    assert rc == 2 and "is a BehaviorTrace artifact of kind 'sketches', not a run" in err
    assert "Traceback" not in err and "FileNotFoundError" not in err


def test_a_damaged_run_of_a_cache_exits_with_the_damaged_code(tmp_path, capsys):
    root = tmp_path / "cache"
    ArtifactStore(root).open()
    (root / "runs" / KEY).mkdir(parents=True)  # a run folder whose manifest is gone
    rc, _, err = _cli(capsys, "show", str(root / "runs" / KEY))
    assert rc == ArtifactError.exit_code == 7
    assert f"has no manifest.json: it is incomplete; delete {root / 'runs' / KEY} or rerun" in err


def test_a_legacy_cache_is_adopted_only_if_it_holds_nothing_but_a_cache(cache, capsys):
    (cache / MARKER).unlink()  # a cache written before markers existed
    (cache / "runs" / f"{KEY}.lock").touch()
    rc, out, _ = _cli(capsys, "cache", "info", "--bt-cache", str(cache))
    assert (
        rc == 0
        and "a cache written before markers existed" in out
        and not (cache / MARKER).exists()
    )
    (cache / "todo.txt").write_text("mine")  # one entry a cache never writes: refused
    rc, _, err = _cli(capsys, "cache", "clean", "--bt-cache", str(cache), "--yes")
    assert rc == 2 and "holds todo.txt" in err and (cache / "runs" / KEY).is_dir()
    (cache / "todo.txt").unlink()
    rc, out, err = _cli(capsys, "cache", "clean", "--bt-cache", str(cache), "--yes")
    assert rc == 0 and "removed 1 directory" in out and f"marked {cache}" in err
    assert is_cache_root(cache) and '"adopted"' in (cache / MARKER).read_text()


def test_a_marker_of_another_schema_is_refused(tmp_path, capsys):
    d = tmp_path / "c"
    d.mkdir()
    (d / MARKER).write_text('{"schema": "someone.else"}')
    rc, _, err = _cli(capsys, "cache", "clean", "--bt-cache", str(d), "--yes")
    assert rc == 2 and "does not name the schema 'behaviortrace.cache'" in err


def test_a_folder_with_someone_elses_manifest_is_not_a_run_and_never_deleted(tmp_path, capsys):
    d = tmp_path / "webapp"
    d.mkdir()
    # another tool's file of the same name, even broken
    (d / "manifest.json").write_text('{"name": "my app"')
    rc, _, err = _cli(capsys, "show", str(d))
    assert (
        rc == 2 and "has a manifest.json of unknown form, not a run" in err and "delete" not in err
    )
    with pytest.raises(ArtifactError) as e:
        verify_dir(d)
    assert "is not a valid manifest" in str(e.value) and "delete" not in str(e.value)


def test_train_into_a_non_empty_folder_is_refused_without_suggesting_to_delete_it(home, capsys):
    before = _tree(home)
    rc, _, err = _cli(capsys, "train", "--scale", "smoke", "--out", str(home))
    assert (
        rc == 2
        and "exists and is not empty; choose a new or empty directory" in err
        and "delete" not in err
    )
    assert _tree(home) == before


def test_the_default_cache_is_per_user_and_the_variable_moves_it(monkeypatch, tmp_path):
    """Without --bt-cache: $BEHAVIORTRACE_CACHE when set, else the platform's per-user cache
    directory (Linux: $XDG_CACHE_HOME/behaviortrace), never a folder of the working directory."""
    import sys

    from bt_core.artifacts.cacheroot import default_cache_dir, user_cache_dir

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("BEHAVIORTRACE_CACHE", str(tmp_path / "moved"))
    assert default_cache_dir() == tmp_path / "moved"
    monkeypatch.delenv("BEHAVIORTRACE_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == user_cache_dir()
    if sys.platform.startswith("linux"):
        assert user_cache_dir() == tmp_path / "xdg" / "behaviortrace"
    assert not default_cache_dir().is_relative_to(tmp_path / ".bt_cache")


def test_a_cache_of_the_old_default_in_the_folder_gets_a_note_that_says_how_to_keep_it(tmp_path):
    from bt_core.artifacts.cacheroot import legacy_cache_note

    user = tmp_path / "user"
    assert legacy_cache_note(user, cwd=tmp_path) is None  # nothing there
    (tmp_path / ".bt_cache" / "runs").mkdir(parents=True)
    note = legacy_cache_note(user, cwd=tmp_path)
    assert note and "--bt-cache .bt_cache" in note and f"mv .bt_cache {user}" in note
    # the old folder is the cache in use (e.g. $BEHAVIORTRACE_CACHE=.bt_cache): nothing to say
    assert legacy_cache_note(tmp_path / ".bt_cache", cwd=tmp_path) is None
