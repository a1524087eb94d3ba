"""Content-addressed artifact cache: atomic directories, manifests, integrity checks, file locks.

Layout of ``<root>/<kind>/``::

    <key>/                   a finished artifact: its files + manifest.json (sha256 of every file,
                             the config, versions, git commit); the only thing a load ever accepts
    <key>.lock               the file lock of that key (kept forever: deleting a lock file races)
    .<key>.tmp-<pid>-<hex>/  a build in progress (or the debris of a killed one)
    .<key>.partial/          the resumable work directory of a build that can resume (training)
    .<key>.trash-<pid>-<hex>/  an artifact being deleted (renamed first, so a kill mid-delete leaves
                             no half artifact under the real name)

A directory is built under a temporary name and renamed into place only when complete, so an
interrupted build leaves nothing a later run accepts. The per-key file lock makes concurrent
processes (pytest-xdist, two sessions) build each artifact once; whoever holds it knows that every
tmp/trash directory of that key belongs to a dead process and removes it. Loading verifies the
manifest: a truncated, edited, missing or extra file is an error naming the file and the fix, never
a silent reuse. Arrays are plain ``.npy`` read with ``allow_pickle=False``.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from filelock import FileLock

from bt_core.artifacts.cacheroot import classify, describe, is_cache_root, open_root
from bt_core.atomic import write_text_atomic
from bt_core.faults import fault_point

MANIFEST = "manifest.json"
BUILD_LOG = "builds.jsonl"  # one line per finished build: proves "built once" under concurrency
# one line per artifact whose hashes a process checked, with the identity of every file it checked
# (`_stamp`): a later process skips the hashing while that identity holds (`verify_dir`)
VERIFIED_LOG = "verified.jsonl"
PARTIAL = "partial.json"  # identity of a resumable work directory (config, versions)


class ArtifactError(RuntimeError):
    """An artifact on disk is incomplete, corrupted or from another config."""

    # a session (pytest, `behaviortrace check`) or `show` that meets one exits with this code
    exit_code = 7


# --------------------------------------------------------------------------- names
def lock_path(final: Path) -> Path:
    return Path(str(final) + ".lock")


def tmp_dir(final: Path) -> Path:
    return final.parent / f".{final.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def partial_dir(final: Path) -> Path:
    return final.parent / f".{final.name}.partial"


def trash_dir(final: Path) -> Path:
    return final.parent / f".{final.name}.trash-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def stale_siblings(final: Path) -> list[Path]:
    """tmp/trash directories of `final`'s key. Only call while holding the key's lock: then no live
    process owns them (a builder holds the lock for as long as its tmp directory exists)."""
    if not final.parent.exists():
        return []
    out = []
    for p in final.parent.iterdir():
        key, state = classify(p.name)
        if key == final.name and state in ("tmp", "trash"):
            out.append(p)
    return out


def discard(path: Path) -> None:
    """Delete an artifact directory: rename it out of the way first (atomic), then remove."""
    if not path.exists():
        return
    gone = trash_dir(path)
    os.rename(path, gone)
    shutil.rmtree(gone, ignore_errors=True)


# --------------------------------------------------------------------------- provenance
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
        res = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            cwd=Path(__file__).resolve().parent,
        )
        return res.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


# --------------------------------------------------------------------------- files
def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


def save_array(path: Path, arr: np.ndarray) -> None:
    np.save(path, np.ascontiguousarray(arr), allow_pickle=False)


def load_array(path: Path, mmap: bool = True) -> np.ndarray:
    """A plain numeric/bool array from `.npy`. Never unpickles: an object array is an
    ArtifactError."""
    try:
        return np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    except ValueError as e:
        what = (
            "holds Python objects (a pickle payload), which BehaviorTrace never loads"
            if "pickle" in str(e) or "Python objects" in str(e)
            else f"is not a plain numpy array ({e})"
        )
        raise ArtifactError(
            f"{path} {what}; delete the artifact directory that holds it or rerun with --bt-rebuild"
        ) from e


def write_json_atomic(path: Path, obj: Any) -> None:
    write_text_atomic(path, json.dumps(obj, indent=1, sort_keys=True))


def fsync_tree(root: Path) -> None:
    for p in root.rglob("*"):
        if p.is_file():
            with open(p, "rb") as f:
                os.fsync(f.fileno())


# --------------------------------------------------------------------------- verification
_VERIFIED: dict[str, tuple] = {}  # resolved dir → `_stamp` when its hashes were checked
# cache root → (size of its VERIFIED_LOG when read, {resolved dir: stamp} from it)
_LEDGERS: dict[str, tuple[int, dict[str, tuple]]] = {}


def _stamp(path: Path, files) -> tuple:
    """Identity of a verified directory: (inode, mtime, ctime, size) of the manifest, of every
    listed file and of every directory of the artifact, in nanoseconds. Any later edit,
    truncation or replacement changes it (and ctime cannot be set back by a user: `touch -r` or an
    edit that restores the mtime still moves it), so the hashes are checked again."""
    out = []
    try:
        # the directories too: a file added after the build changes its directory's mtime/ctime
        dirs = [path, *sorted(p for p in path.rglob("*") if p.is_dir())]
        for p in (*(path / rel for rel in (MANIFEST, *files)), *dirs):
            st = p.stat()
            out.append((st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_size))
    except OSError:
        return ()
    return tuple(out)


def _ledger(root: Path) -> dict[str, tuple]:
    """The stamps other processes recorded in `root`'s VERIFIED_LOG (re-read when it grew)."""
    log = root / VERIFIED_LOG
    try:
        size = log.stat().st_size
    except OSError:
        return {}
    cached = _LEDGERS.get(str(root))
    if cached is not None and cached[0] == size:
        return cached[1]
    out: dict[str, tuple] = {}
    with open(log, "rb") as f:
        for line in f.read(size).splitlines():
            try:
                rec = json.loads(line)
                out[rec["dir"]] = tuple(tuple(x) for x in rec["stamp"])
            except (ValueError, KeyError, TypeError):
                continue  # a torn or foreign line proves nothing: that dir is hashed again
    _LEDGERS[str(root)] = (size, out)
    return out


def _record_verified(root: Path, key: str, stamp: tuple) -> None:
    line = json.dumps({"dir": key, "stamp": stamp, "time": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
    try:
        fd = os.open(root / VERIFIED_LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    except OSError:
        return  # a read-only cache: every process hashes it, nothing is lost
    try:
        os.write(fd, (line + "\n").encode())  # one small O_APPEND write: atomic between processes
    finally:
        os.close(fd)


def verify_dir(path: Path, config: dict[str, Any] | None = None) -> dict[str, Any]:
    """Check an artifact directory against its manifest and return the manifest.

    Raises ArtifactError naming the file and the fix when the manifest is missing or unreadable, the
    config differs from `config`, or a file is missing, truncated/edited (hash) or not in the
    manifest.
    File hashes are checked once while no listed file's inode, mtime, ctime or size changes: once
    per process, and in a cache root once for all processes (VERIFIED_LOG records each check with
    those identities; a warm default session hashed 3.7 GB before reading anything)."""
    path = Path(path)
    fix = f"delete {path} or rerun with --bt-rebuild"
    mpath = path / MANIFEST
    if not path.is_dir():
        raise ArtifactError(f"{path} is not an artifact directory: it {describe(path)}")
    if not mpath.exists():
        if is_cache_root(path.parent.parent):  # an artifact folder of a cache
            raise ArtifactError(f"{path} has no {MANIFEST}: it is incomplete; {fix}")
        raise ArtifactError(
            f"{path} has no {MANIFEST}, so it is not a BehaviorTrace artifact: it {describe(path)}"
        )
    try:
        manifest = json.loads(mpath.read_text())
        files = manifest["files"]
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        # not in a cache, maybe not ours at all: no "delete"
        if not is_cache_root(path.parent.parent):
            fix = (
                "it is not in a cache, so nothing rebuilds it in place: if it is a run written by "
                "`behaviortrace train --out`, train it again into a new directory"
            )
        raise ArtifactError(
            f"{mpath} is not a valid manifest ({type(e).__name__}: {e}); {fix}"
        ) from e
    if config is not None and manifest.get("config") != json.loads(json.dumps(config)):
        raise ArtifactError(f"{path} was built from another config than the one requested; {fix}")
    key = str(path.resolve())
    stamp = _stamp(path, files)
    if _VERIFIED.get(key) == stamp != ():
        return manifest
    root = path.parent.parent
    in_cache = is_cache_root(root)
    if in_cache and stamp != () and _ledger(root).get(key) == stamp:
        _VERIFIED[key] = stamp
        return manifest
    for rel, digest in files.items():
        f = path / rel
        if not f.is_file():
            raise ArtifactError(f"{f} is missing from the artifact; {fix}")
        if sha256_file(f) != digest:
            raise ArtifactError(
                f"{f} does not match its manifest hash (truncated or edited); {fix}"
            )
    extra = sorted(
        str(p.relative_to(path))
        for p in path.rglob("*")
        if p.is_file() and p != mpath and str(p.relative_to(path)) not in files
    )
    if extra:
        raise ArtifactError(
            f"{path / extra[0]} is not listed in the manifest (added after the build); {fix}"
        )
    _VERIFIED[key] = stamp
    if in_cache and stamp != ():
        _record_verified(root, key, stamp)
    return manifest


def restamp_after_links(files) -> int:
    """Record again, in this process and in the cache's VERIFIED_LOG, the stamps of the verified
    artifacts that hold `files`, after this process hard-linked those files somewhere else and
    removed the links again (the scoring scratch directory, `bt_core.attribution.scratch`).

    Why: link() and unlink() move a file's ctime, which is part of its stamp (`_stamp`), so without
    this every judging session left its artifacts looking edited and the next session hashed them
    again (2,060 files, ~3 s of a warm default session). What is accepted: an artifact this process
    verified (or found in the ledger) whose manifest, directories and other files have exactly the
    verified stamp, and whose linked files differ from it in their ctime only (same inode, mtime
    and size). Anything else is left alone and hashed by the next reader. The one edit this cannot
    tell from a link is one made while the session ran that kept the file's size and set its mtime
    back; such an edit was already invisible to the rest of the session, which had checked the
    hashes at its start. Returns how many artifacts were recorded again."""
    by_dir: dict[str, set[str]] = {}
    for f in files:
        f = Path(f).resolve()
        for d in f.parents:
            if str(d) in _VERIFIED:
                by_dir.setdefault(str(d), set()).add(str(f.relative_to(d)))
                break
    n = 0
    for key, linked in by_dir.items():
        path, old = Path(key), _VERIFIED[key]
        try:
            files_ = json.loads((path / MANIFEST).read_text())["files"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        new = _stamp(path, files_)
        names = [MANIFEST, *files_]
        if not new or len(new) != len(old):
            continue
        ok = all(
            a == b
            or (i < len(names) and names[i] in linked and (a[0], a[1], a[3]) == (b[0], b[1], b[3]))
            for i, (a, b) in enumerate(zip(old, new, strict=True))
        )
        if not ok or new == old:
            continue
        _VERIFIED[key] = new
        root = path.parent.parent
        if is_cache_root(root):
            _record_verified(root, key, new)
        n += 1
    return n


# --------------------------------------------------------------------------- the store
def _token(path: Path) -> str | None:
    """The rebuild token recorded in a manifest / partial.json (None if absent or unreadable)."""
    try:
        return json.loads(path.read_text()).get("rebuild_token")
    except (OSError, json.JSONDecodeError, AttributeError):
        return None


def _reset_peak_rss() -> None:
    """Start a new peak-memory window for this process (Linux: writing 5 to clear_refs resets
    VmHWM), so each build records its own peak even in a worker that built something before.
    Elsewhere: no-op."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


def _peak_rss_mb() -> float | None:
    """Peak resident memory of this process since `_reset_peak_rss` (VmHWM), in MB; None where
    unknown."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    except (OSError, ValueError, IndexError):
        pass
    return None


class ArtifactStore:
    """A cache directory of artifacts keyed by (kind, config hash)."""

    def __init__(self, root: str | os.PathLike, rebuild: bool | str = False):
        """`rebuild`: False; True (rebuild every artifact this store touches, once); or a token
        string shared by cooperating processes (xdist workers, build workers) so that each artifact
        is rebuilt once per session, not once per process: an artifact whose manifest carries the
        token was already rebuilt in this session. `self.rebuild` is False or the token."""
        self.root = Path(root)
        self.rebuild: str | bool = (uuid.uuid4().hex if rebuild is True else rebuild) or False
        self._opened = False

    def open(self) -> None:
        """Check (once) that the root is a cache, creating and marking it if new or empty; raises
        NotACacheError otherwise, before anything is written or deleted
        (bt_core/artifacts/cacheroot.py)."""
        if not self._opened:
            open_root(self.root)
            self._opened = True

    def path(self, kind: str, key: str) -> Path:
        return self.root / kind / key

    def get_or_build(
        self,
        kind: str,
        key: str,
        config: dict[str, Any],
        build: Callable[..., dict[str, Any] | None],
        resumable: bool = False,
    ) -> Path:
        """Return the verified directory of (kind, key), building it if absent.

        `build(out)` writes the artifact's files into `out` and may return extra manifest fields.
        With `resumable=True` it is called as `build(out, work)`: `work` is a stable directory kept
        across interrupted attempts (the builder journals its progress there) and `out` lies inside
        it; an attempt killed or interrupted leaves `work` for the next attempt to resume from."""
        self.open()
        final = self.path(kind, key)
        final.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(lock_path(final))):
            for p in stale_siblings(final):  # debris of killed processes (we hold the lock)
                shutil.rmtree(p, ignore_errors=True)
            if final.exists() and self.rebuild and _token(final / MANIFEST) != self.rebuild:
                discard(final)
            if final.exists():
                shutil.rmtree(partial_dir(final), ignore_errors=True)  # killed after the rename
                self.verify(final, config)
                return final
            if resumable:
                work = self._work_dir(final, kind, key, config)
                out = work / "artifact"
                out.mkdir(exist_ok=True)
                self._finish(final, out, kind, key, config, lambda: build(out, work))
                shutil.rmtree(work, ignore_errors=True)
            else:
                tmp = tmp_dir(final)
                tmp.mkdir()
                try:
                    self._finish(final, tmp, kind, key, config, lambda: build(tmp))
                except BaseException:
                    shutil.rmtree(tmp, ignore_errors=True)
                    raise
            return final

    def _work_dir(self, final: Path, kind: str, key: str, config: dict[str, Any]) -> Path:
        """The resumable work directory, reused only if it belongs to this exact config and code."""
        work = partial_dir(final)
        ident = {
            "kind": kind,
            "key": key,
            "config": json.loads(json.dumps(config)),
            "versions": versions(),
            "git_commit": git_commit(),
        }
        if work.exists():
            try:
                same = {
                    k: v
                    for k, v in json.loads((work / PARTIAL).read_text()).items()
                    if k != "rebuild_token"
                } == ident
            except (OSError, json.JSONDecodeError, AttributeError):
                same = False
            if not same or (self.rebuild and _token(work / PARTIAL) != self.rebuild):
                shutil.rmtree(work)
        if not work.exists():
            tmp = tmp_dir(final)
            tmp.mkdir()
            write_json_atomic(tmp / PARTIAL, {**ident, "rebuild_token": self.rebuild or None})
            os.rename(tmp, work)
        return work

    def _finish(
        self,
        final: Path,
        out: Path,
        kind: str,
        key: str,
        config: dict[str, Any],
        run_build: Callable[[], dict[str, Any] | None],
    ) -> None:
        _reset_peak_rss()
        t0, c0 = time.perf_counter(), time.process_time()
        extra = run_build() or {}
        build_s = round(time.perf_counter() - t0, 3)
        usage = {"cpu_s": round(time.process_time() - c0, 3), "peak_rss_mb": _peak_rss_mb()}
        manifest = {
            "kind": kind,
            "key": key,
            "config": config,
            "versions": versions(),
            "git_commit": git_commit(),
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "builder": {"pid": os.getpid(), "host": socket.gethostname()},
            "build_s": build_s,
            **usage,
            "rebuild_token": self.rebuild or None,
            **extra,
            "files": {
                str(p.relative_to(out)): sha256_file(p)
                for p in sorted(out.rglob("*"))
                if p.is_file() and p.name != MANIFEST
            },
        }
        (out / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True))
        fsync_tree(out)
        fault_point(f"store.before_rename.{kind}")
        os.rename(out, final)
        self._log_build(kind, key, build_s, usage)

    def _log_build(
        self, kind: str, key: str, build_s: float, usage: dict[str, Any] | None = None
    ) -> None:
        line = (
            json.dumps(
                {
                    "kind": kind,
                    "key": key,
                    "pid": os.getpid(),
                    "build_s": build_s,
                    **(usage or {}),
                    "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                }
            )
            + "\n"
        )
        fd = os.open(self.root / BUILD_LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())  # one small O_APPEND write: atomic between processes
        finally:
            os.close(fd)

    def verify(self, path: Path, config: dict[str, Any] | None = None) -> dict[str, Any]:
        """Check the manifest and every file's hash; raise ArtifactError naming the problem and
        fix."""
        return verify_dir(path, config)

    def manifest(self, path: Path) -> dict[str, Any]:
        return json.loads((path / MANIFEST).read_text())
