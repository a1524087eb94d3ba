"""Artifact store: atomic builds, integrity checks, config mismatch, no pickle."""

import json

import numpy as np
import pytest

from bt_core.store import ArtifactError, ArtifactStore, load_array, save_array


def _build(d):
    save_array(d / "a.npy", np.arange(10))
    (d / "meta.json").write_text("{}")


def test_build_once_then_verify(tmp_path):
    store = ArtifactStore(tmp_path)
    calls = []
    p1 = store.get_or_build("x", "k1", {"c": 1}, lambda d: (calls.append(1), _build(d))[-1])
    p2 = ArtifactStore(tmp_path).get_or_build("x", "k1", {"c": 1}, lambda d: calls.append(2))
    assert p1 == p2 and calls == [1]
    assert json.loads((p1 / "manifest.json").read_text())["files"].keys() == {"a.npy", "meta.json"}


def test_tampered_file_is_detected_with_the_fix(tmp_path):
    p = ArtifactStore(tmp_path).get_or_build("x", "k1", {"c": 1}, _build)
    with open(p / "a.npy", "r+b") as f:
        f.truncate(40)
    with pytest.raises(ArtifactError, match=r"a\.npy.*--bt-rebuild"):
        ArtifactStore(tmp_path).get_or_build("x", "k1", {"c": 1}, _build)


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
    assert [p.name for p in (tmp_path / "x").iterdir() if not p.name.endswith(".lock")] == []


def test_rebuild_replaces(tmp_path):
    ArtifactStore(tmp_path).get_or_build("x", "k1", {}, _build)
    calls = []
    ArtifactStore(tmp_path, rebuild=True).get_or_build("x", "k1", {}, lambda d: (calls.append(1), _build(d))[-1])
    assert calls == [1]


def test_pickle_payload_is_refused(tmp_path):
    np.save(tmp_path / "evil.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(ValueError, match="allow_pickle"):
        load_array(tmp_path / "evil.npy", mmap=False)
