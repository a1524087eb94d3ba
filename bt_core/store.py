"""Content-addressed artifact cache: atomic directories, manifests, integrity checks, file locks.

Layout: ``<root>/<kind>/<key>/`` with ``manifest.json`` listing every file's SHA-256, the config, the
config hash, package versions and the git commit. A directory is built under a temporary name and
renamed into place only when complete, so an interrupted build leaves nothing a later run accepts.
A file lock per key makes concurrent processes (pytest-xdist, two sessions) build each artifact once.
Loading verifies the manifest: a truncated or edited file is an error naming the file and the fix,
never a silent reuse. Arrays are plain ``.npy`` read with ``allow_pickle=False``.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from filelock import FileLock

MANIFEST = "manifest.json"


class ArtifactError(RuntimeError):
    """An artifact on disk is incomplete, corrupted or from another config."""


def versions() -> dict[str, str]:
    import importlib.metadata as md

    out = {"python": platform.python_version()}
    for name in ("behaviortrace", "torch", "transformers", "numpy"):
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            out[name] = "absent"
    return out


def git_commit() -> str | None:
    try:
        res = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5,
                             cwd=Path(__file__).resolve().parent)
        return res.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


def save_array(path: Path, arr: np.ndarray) -> None:
    np.save(path, np.ascontiguousarray(arr), allow_pickle=False)


def load_array(path: Path, mmap: bool = True) -> np.ndarray:
    return np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)


class ArtifactStore:
    """A cache directory of artifacts keyed by (kind, config hash)."""

    def __init__(self, root: str | os.PathLike, rebuild: bool = False):
        self.root = Path(root)
        self.rebuild = rebuild
        self._verified: set[Path] = set()

    def path(self, kind: str, key: str) -> Path:
        return self.root / kind / key

    def get_or_build(self, kind: str, key: str, config: dict[str, Any],
                     build: Callable[[Path], dict[str, Any] | None]) -> Path:
        """Return the verified directory of (kind, key), building it with `build(tmpdir)` if absent.
        `build` writes files into `tmpdir` and may return extra manifest fields (timings, summary)."""
        final = self.path(kind, key)
        final.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(final) + ".lock"):
            if final.exists() and self.rebuild and final not in self._verified:
                shutil.rmtree(final)
            if final.exists():
                self.verify(final, config)
                return final
            tmp = final.parent / f".{key}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
            tmp.mkdir()
            try:
                t0 = time.perf_counter()
                extra = build(tmp) or {}
                manifest = {
                    "kind": kind, "key": key, "config": config, "versions": versions(),
                    "git_commit": git_commit(), "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                    "build_s": round(time.perf_counter() - t0, 3), **extra,
                    "files": {str(p.relative_to(tmp)): sha256_file(p)
                              for p in sorted(tmp.rglob("*")) if p.is_file()},
                }
                (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True))
                _fsync_tree(tmp)
                os.rename(tmp, final)
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
            self._verified.add(final)
            return final

    def verify(self, path: Path, config: dict[str, Any] | None = None) -> dict[str, Any]:
        """Check the manifest and every file's hash; raise ArtifactError naming the problem and fix."""
        fix = f"delete {path} or rerun with --bt-rebuild"
        mpath = path / MANIFEST
        if not mpath.exists():
            raise ArtifactError(f"{path} has no {MANIFEST}: it is incomplete; {fix}")
        try:
            manifest = json.loads(mpath.read_text())
        except json.JSONDecodeError as e:
            raise ArtifactError(f"{mpath} is not valid JSON ({e}); {fix}") from e
        if config is not None and manifest.get("config") != json.loads(json.dumps(config)):
            raise ArtifactError(f"{path} was built from another config than the one requested; {fix}")
        if path in self._verified:
            return manifest
        for rel, digest in manifest["files"].items():
            f = path / rel
            if not f.exists():
                raise ArtifactError(f"{f} is missing from the artifact; {fix}")
            if sha256_file(f) != digest:
                raise ArtifactError(f"{f} does not match its manifest hash (truncated or edited); {fix}")
        self._verified.add(path)
        return manifest

    def manifest(self, path: Path) -> dict[str, Any]:
        return json.loads((path / MANIFEST).read_text())


def _fsync_tree(root: Path) -> None:
    for p in root.rglob("*"):
        if p.is_file():
            with open(p, "rb") as f:
                os.fsync(f.fileno())
