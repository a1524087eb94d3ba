"""Artifact store: atomic builds, integrity checks, config mismatch, no pickle, stale debris,
resumable work directories."""

import json
from pathlib import Path

import numpy as np
import pytest

from bt_core.artifacts.store import (
    ArtifactError,
    ArtifactStore,
    load_array,
    partial_dir,
    save_array,
    verify_dir,
)


def _build(d):
    save_array(d / "a.npy", np.arange(10))
    (d / "meta.json").write_text("{}")


def _entries(d):
    return sorted(p.name for p in d.iterdir() if not p.name.endswith(".lock"))


def test_build_once_then_verify(tmp_path):
    store = ArtifactStore(tmp_path)
    calls = []
    p1 = store.get_or_build("x", "k1", {"c": 1}, lambda d: (calls.append(1), _build(d))[-1])
    p2 = ArtifactStore(tmp_path).get_or_build("x", "k1", {"c": 1}, lambda d: calls.append(2))
    assert p1 == p2 and calls == [1]
    manifest = json.loads((p1 / "manifest.json").read_text())
    assert manifest["files"].keys() == {"a.npy", "meta.json"}
    assert {"config", "versions", "git_commit", "builder", "key"} <= manifest.keys()
    log = [json.loads(line) for line in (tmp_path / "builds.jsonl").read_text().splitlines()]
    assert [(r["kind"], r["key"]) for r in log] == [("x", "k1")]


def test_tampered_file_is_detected_with_the_fix(tmp_path):
    p = ArtifactStore(tmp_path).get_or_build("x", "k1", {"c": 1}, _build)
    with open(p / "a.npy", "r+b") as f:
        f.truncate(40)
    with pytest.raises(ArtifactError, match=r"a\.npy.*--bt-rebuild"):
        ArtifactStore(tmp_path).get_or_build("x", "k1", {"c": 1}, _build)


def test_missing_and_added_files_are_detected(tmp_path):
    p = ArtifactStore(tmp_path).get_or_build("x", "k1", {"c": 1}, _build)
    (p / "step_emb.npy").write_bytes(b"planted")  # a loader reading optional files must not see it
    with pytest.raises(
        ArtifactError, match=r"step_emb\.npy is not listed in the manifest.*--bt-rebuild"
    ):
        verify_dir(p)
    (p / "step_emb.npy").unlink()
    (p / "meta.json").unlink()
    with pytest.raises(ArtifactError, match=r"meta\.json is missing"):
        verify_dir(p)
    (p / "manifest.json").write_text("{not json")
    with pytest.raises(ArtifactError, match=r"manifest\.json is not a valid manifest.*delete"):
        verify_dir(p)


def test_other_config_is_never_reused(tmp_path):
    ArtifactStore(tmp_path).get_or_build("x", "k1", {"c": 1}, _build)
    with pytest.raises(ArtifactError, match="another config"):
        ArtifactStore(tmp_path).get_or_build("x", "k1", {"c": 2}, _build)


def test_failed_build_leaves_nothing(tmp_path):
    def boom(d):
        _build(d)
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError):
        ArtifactStore(tmp_path).get_or_build("x", "k1", {}, boom)
    assert _entries(tmp_path / "x") == []


def test_debris_of_a_dead_builder_is_removed_under_the_lock(tmp_path):
    """A SIGKILLed build leaves `.k1.tmp-<pid>-<hex>` (even with a manifest inside); it is never
    loaded, and the next builder of that key (holding the lock, so the owner is dead) removes it."""
    ArtifactStore(tmp_path).open()  # debris lies in a cache root (which carries its marker)
    dead = tmp_path / "x" / ".k1.tmp-999999-deadbeef"
    dead.mkdir(parents=True)
    _build(dead)
    (dead / "manifest.json").write_text("{}")
    (tmp_path / "x" / ".k1.trash-999999-0").mkdir()
    (tmp_path / "x" / ".k2.tmp-1-1").mkdir()  # another key's: not ours to touch
    ArtifactStore(tmp_path).get_or_build("x", "k1", {}, _build)
    assert _entries(tmp_path / "x") == [".k2.tmp-1-1", "k1"]


def test_rebuild_replaces(tmp_path):
    ArtifactStore(tmp_path).get_or_build("x", "k1", {}, _build)
    calls = []
    ArtifactStore(tmp_path, rebuild=True).get_or_build(
        "x", "k1", {}, lambda d: (calls.append(1), _build(d))[-1]
    )
    assert calls == [1]
    assert _entries(tmp_path / "x") == ["k1"]


def test_pickle_payload_is_refused(tmp_path):
    np.save(tmp_path / "evil.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    for mmap in (True, False):
        with pytest.raises(
            ArtifactError, match=r"evil\.npy holds Python objects \(a pickle payload\)"
        ):
            load_array(tmp_path / "evil.npy", mmap=mmap)


def _resumable(progress: list, fail_at: int | None = None):
    """A build that journals one 'step' per file in `work` and can be interrupted."""

    def build(out, work):
        done = sorted(work.glob("step*"))
        progress.append(len(done))
        for i in range(len(done), 4):
            if i == fail_at:
                raise KeyboardInterrupt
            (work / f"step{i}").write_text(str(i))
        _build(out)

    return build


def test_resumable_work_dir_survives_an_interrupt_and_is_resumed(tmp_path):
    seen = []
    with pytest.raises(KeyboardInterrupt):
        ArtifactStore(tmp_path).get_or_build(
            "x", "k1", {"c": 1}, _resumable(seen, fail_at=2), resumable=True
        )
    final = tmp_path / "x" / "k1"
    assert not final.exists() and partial_dir(final).is_dir()
    p = ArtifactStore(tmp_path).get_or_build("x", "k1", {"c": 1}, _resumable(seen), resumable=True)
    assert seen == [0, 2]  # the second attempt found two steps done
    assert not partial_dir(final).exists() and verify_dir(p)["files"].keys() == {
        "a.npy",
        "meta.json",
    }


def test_resumable_work_dir_of_another_config_or_rebuild_is_discarded(tmp_path):
    seen = []
    with pytest.raises(KeyboardInterrupt):
        ArtifactStore(tmp_path).get_or_build(
            "x", "k1", {"c": 1}, _resumable(seen, fail_at=2), resumable=True
        )
    # same key, other config (a hash collision or hand-copied dir)
    with pytest.raises(KeyboardInterrupt):
        ArtifactStore(tmp_path).get_or_build(
            "x", "k1", {"c": 2}, _resumable(seen, fail_at=3), resumable=True
        )
    ArtifactStore(tmp_path, rebuild=True).get_or_build(
        "x", "k1", {"c": 2}, _resumable(seen), resumable=True
    )
    assert seen == [0, 0, 0]


def test_leftover_work_dir_next_to_a_finished_artifact_is_removed(tmp_path):
    p = ArtifactStore(tmp_path).get_or_build("x", "k1", {}, _build)
    partial_dir(p).mkdir()  # killed between the rename and the clean-up
    ArtifactStore(tmp_path).get_or_build("x", "k1", {}, _build)
    assert _entries(tmp_path / "x") == ["k1"]


def test_rebuild_token_rebuilds_once_per_session_across_processes(tmp_path):
    """xdist workers / build workers share the session's token: whoever comes second finds the
    artifact already rebuilt in this session and loads it; a new session (new token) rebuilds
    again."""
    ArtifactStore(tmp_path).get_or_build("x", "k1", {}, _build)
    calls = []
    build = lambda d: (calls.append(1), _build(d))[-1]  # noqa: E731
    worker_a, worker_b = (
        ArtifactStore(tmp_path, rebuild="tok1"),
        ArtifactStore(tmp_path, rebuild="tok1"),
    )
    worker_a.get_or_build("x", "k1", {}, build)
    worker_b.get_or_build("x", "k1", {}, build)
    assert calls == [1]
    ArtifactStore(tmp_path, rebuild="tok2").get_or_build("x", "k1", {}, build)
    assert calls == [1, 1]
    # True → a fresh token
    assert ArtifactStore(tmp_path, rebuild=True).rebuild not in (True, False)


@pytest.mark.skipif(
    not Path("/proc/self/clear_refs").exists(),
    reason="peak memory per build is read from Linux /proc",
)
def test_each_build_records_its_own_peak_memory_and_cpu_time(tmp_path):
    """The manifest and the build log carry each build's CPU seconds and peak resident memory, the
    peak counted from the build's start: a small build after a big one in the same process reports
    its own."""

    def big(d):
        a = np.ones(400 * 2**20 // 8)  # 400 MB, touched
        save_array(d / "a.npy", a[:10])

    store = ArtifactStore(tmp_path)
    p_big = store.get_or_build("x", "big", {}, big)
    p_small = store.get_or_build("x", "small", {}, _build)
    m_big, m_small = (json.loads((p / "manifest.json").read_text()) for p in (p_big, p_small))
    assert m_big["peak_rss_mb"] >= m_small["peak_rss_mb"] + 300
    assert m_big["cpu_s"] >= 0 and m_small["cpu_s"] >= 0
    log = {
        r["key"]: r for r in map(json.loads, (tmp_path / "builds.jsonl").read_text().splitlines())
    }
    assert log["big"]["peak_rss_mb"] == m_big["peak_rss_mb"] and "cpu_s" in log["small"]


def _new_process(monkeypatch):
    """Forget what this process verified, as a new process would (the ledger file stays)."""
    from bt_core.artifacts import store as store_mod

    monkeypatch.setattr(store_mod, "_VERIFIED", {})
    monkeypatch.setattr(store_mod, "_LEDGERS", {})


def _no_hashing(monkeypatch):
    from bt_core.artifacts import store as store_mod

    def refuse(path):
        raise AssertionError(f"hashed {path} again")

    monkeypatch.setattr(store_mod, "sha256_file", refuse)


def test_a_later_process_skips_hashing_an_unchanged_artifact(tmp_path, monkeypatch):
    """The first verify hashes and records the files' identities in verified.jsonl; a later process
    trusts them while they hold, and hashes again once anything changed."""
    p = ArtifactStore(tmp_path).get_or_build("x", "k1", {"c": 1}, _build)
    verify_dir(p)  # hashes, records
    assert (tmp_path / "verified.jsonl").exists()
    _new_process(monkeypatch)
    with monkeypatch.context() as m:
        _no_hashing(m)
        verify_dir(p)  # trusted from the ledger: no hashing


@pytest.mark.parametrize("change", ["same_size_edit_mtime_restored", "added_file", "replaced"])
def test_a_change_after_verification_is_caught_by_a_later_process(tmp_path, monkeypatch, change):
    import os

    p = ArtifactStore(tmp_path).get_or_build("x", "k1", {"c": 1}, _build)
    verify_dir(p)
    f = p / "a.npy"
    if change == "same_size_edit_mtime_restored":
        st = f.stat()
        f.chmod(0o644)
        with open(f, "r+b") as fh:
            fh.seek(-8, 2)
            fh.write(b"\xff" * 8)
        os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))  # mtime set back: ctime still moves
        match = "does not match its manifest hash"
    elif change == "added_file":
        (p / "extra.txt").write_text("x")
        match = "not listed in the manifest"
    else:
        data = f.read_bytes()
        f.chmod(0o644)
        f.unlink()
        f.write_bytes(data[:-8] + b"\xff" * 8)
        match = "does not match its manifest hash"
    _new_process(monkeypatch)
    with pytest.raises(ArtifactError, match=match):
        verify_dir(p)


def test_a_torn_ledger_line_is_ignored(tmp_path, monkeypatch):
    p = ArtifactStore(tmp_path).get_or_build("x", "k1", {"c": 1}, _build)
    verify_dir(p)
    with open(tmp_path / "verified.jsonl", "a") as f:
        f.write('{"dir": "' + str(p.resolve()) + '", "stamp": [[1, 2')  # a killed writer
    _new_process(monkeypatch)
    with monkeypatch.context() as m:
        _no_hashing(m)
        verify_dir(p)  # the whole earlier line still vouches for it


def _link_and_unlink(src, where):
    """What a judging session does to a cache file: hard-link it into a scratch directory, then
    remove the scratch (both move the file's ctime)."""
    import os
    import time

    where.mkdir()
    time.sleep(0.01)  # a later ctime than the verification's, whatever the clock's resolution
    os.link(src, where / src.name)
    (where / src.name).unlink()


def test_links_made_and_removed_by_a_session_are_restamped(tmp_path, monkeypatch):
    """Linking a file into a scratch directory and removing the link moves its ctime, so the ledger
    no longer vouches for the artifact; `restamp_after_links` records it again and a later process
    does not hash it."""
    from bt_core.artifacts import store as store_mod

    cache = tmp_path / "cache"
    p = ArtifactStore(cache).get_or_build("x", "k1", {"c": 1}, _build)
    verify_dir(p)
    _link_and_unlink(p / "a.npy", tmp_path / "scratch")
    _new_process(monkeypatch)
    with monkeypatch.context() as m:  # without the re-stamp the next process hashes it again
        _no_hashing(m)
        with pytest.raises(AssertionError, match="hashed"):
            verify_dir(p)
    _new_process(monkeypatch)
    verify_dir(p)  # this "session" verified it
    _link_and_unlink(p / "a.npy", tmp_path / "scratch2")
    assert store_mod.restamp_after_links([p / "a.npy"]) == 1
    _new_process(monkeypatch)
    with monkeypatch.context() as m:
        _no_hashing(m)
        verify_dir(p)  # trusted from the ledger


@pytest.mark.parametrize("change", ["edited", "added_file", "unlinked_file_touched"])
def test_restamping_never_vouches_for_a_change(tmp_path, monkeypatch, change):
    """Only a ctime move of a linked file is accepted: an edit of it (its size or mtime moves), a
    file added to the artifact, or a change to a file that was not linked is left to be hashed (and
    refused) by the next reader."""
    import os

    from bt_core.artifacts import store as store_mod

    def build(d):
        _build(d)
        save_array(d / "b.npy", np.arange(5))

    cache = tmp_path / "cache"
    p = ArtifactStore(cache).get_or_build("x", "k1", {"c": 1}, build)
    verify_dir(p)
    f = p / "a.npy"
    _link_and_unlink(f, tmp_path / "scratch")
    if change == "edited":
        f.chmod(0o644)
        with open(f, "ab") as fh:
            fh.write(b"\0" * 8)
    elif change == "added_file":
        (p / "extra.txt").write_text("x")
    else:
        g = p / "b.npy"
        st = g.stat()
        g.chmod(0o644)
        with open(g, "r+b") as fh:
            fh.seek(-8, 2)
            fh.write(b"\xff" * 8)
        os.utime(g, ns=(st.st_atime_ns, st.st_mtime_ns))  # mtime set back: ctime moved
    assert store_mod.restamp_after_links([f]) == 0
    _new_process(monkeypatch)
    with pytest.raises(ArtifactError):
        verify_dir(p)
