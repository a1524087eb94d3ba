"""What makes a directory a BehaviorTrace cache: its marker, and what a cache may hold.

A cache root carries ``behaviortrace-cache.json``, written by the store when it creates the root::

    {"schema": "behaviortrace.cache", "version": 1, "created": "...",
     "created_by": "behaviortrace 0.2.0"}

Everything that deletes (`behaviortrace cache clean`, `--bt-rebuild`) first opens the root with
`open_root`, which accepts only

* a marked root (the marker exists and names this schema);
* a directory that does not exist or is empty: the store creates it and writes the marker;
* an unmarked *legacy* cache, written before markers existed: adopted (the marker is written, with
  ``"adopted"`` saying so) only if every entry in it is one that a cache holds — kind directories
  (`runs`, `sketches`, …) of artifact folders whose manifest names that kind and key, their locks
  and leftovers, and the build log. One file or folder a cache never writes and it is refused.

Anything else (a source checkout, a home directory, a folder of data) is refused with
`NotACacheError`, which names the folder, what in it a cache never holds, and what to pass instead.
Within a marked root, only *artifact folders* are ever removed: key-named entries (16 hex
characters, the config hash) of a kind directory and their `.tmp-`/`.trash-`/`.partial` leftovers
(`is_artifact_name`).
"""

from __future__ import annotations

import importlib.metadata as md
import json
import os
import re
import time
from pathlib import Path

from bt_core.atomic import write_text_atomic

CACHE_ENV = "BEHAVIORTRACE_CACHE"  # moves the default cache (as --bt-cache does for one command)
LEGACY_DEFAULT = ".bt_cache"  # the default before issue 39: one cache per working directory
MARKER = "behaviortrace-cache.json"
SCHEMA = "behaviortrace.cache"
MARKER_VERSION = 1
KNOWN_KINDS = ("runs", "sketches", "targets", "draws", "replays", "replaysets", "scores")
ROOT_FILES = ("builds.jsonl", "verified.jsonl", MARKER)  # the only files a cache root holds
_KEY = re.compile(r"[0-9a-f]{16}")


class NotACacheError(ValueError):
    """A directory given as a cache root is not one (and is not a new or empty directory)."""


def is_key(name: str) -> bool:
    """Whether `name` is an artifact key (a config hash: 16 lowercase hex characters)."""
    return bool(_KEY.fullmatch(name))


def read_marker(root: Path) -> dict | None:
    """The root's marker, or None if it has none; a marker of another schema is a NotACacheError."""
    path = Path(root) / MARKER
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise NotACacheError(
            f"{path} is not a readable cache marker ({e}); it should be JSON with "
            f'"schema": "{SCHEMA}"'
        ) from e
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise NotACacheError(
            f"{path} does not name the schema {SCHEMA!r}; this is not a BehaviorTrace cache"
        )
    return data


def is_cache_root(root: Path) -> bool:
    try:
        return read_marker(root) is not None
    except NotACacheError:
        return False


def _manifest_names(path: Path, kind: str) -> bool:
    try:
        m = json.loads((path / "manifest.json").read_text())
    except (OSError, json.JSONDecodeError):
        return False
    return isinstance(m, dict) and m.get("kind") == kind and m.get("key") == path.name


def classify(name: str) -> tuple[str, str]:
    """Entry name in a kind directory → (key, state); state ∈ artifact | tmp | partial | trash |
    lock | other (bt_core/artifacts/store.py's layout)."""
    if name.endswith(".lock"):
        return name[:-5], "lock"
    if name.startswith("."):
        for tag, state in ((".tmp-", "tmp"), (".trash-", "trash")):
            if tag in name:
                return name[1 : name.index(tag)], state
        if name.endswith(".partial"):
            return name[1 : -len(".partial")], "partial"
        return name, "other"
    return name, "artifact"


def foreign_entries(root: Path, limit: int = 5) -> list[str]:
    """Entries of an unmarked `root` that a cache never holds (at most `limit`); [] = it looks like
    a cache."""
    out: list[str] = []
    for p in sorted(Path(root).iterdir()):
        if p.is_file() and (p.name in ROOT_FILES or p.name.startswith(f".{MARKER}.tmp-")):
            # (the marker's temporary file: another process is creating this root right now)
            continue
        if not (p.is_dir() and p.name in KNOWN_KINDS):
            out.append(p.name + ("/" if p.is_dir() else ""))
        else:
            for q in sorted(p.iterdir()):
                key, state = classify(q.name)
                ok = (state == "lock" and q.is_file()) or (
                    state in ("tmp", "trash", "partial") and q.is_dir()
                )
                ok = ok or (state == "artifact" and q.is_dir() and _manifest_names(q, p.name))
                if not (ok and is_key(key)):
                    out.append(f"{p.name}/{q.name}")
                    break
        if len(out) >= limit:
            break
    return out


def _write_marker(root: Path, **extra) -> None:
    try:
        version = md.version("behaviortrace")
    except md.PackageNotFoundError:
        version = "absent"
    marker = {
        "schema": SCHEMA,
        "version": MARKER_VERSION,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "created_by": f"behaviortrace {version}",
        **extra,
    }
    write_text_atomic(root / MARKER, json.dumps(marker, indent=1, sort_keys=True))


def refusal(root: Path, foreign: list[str]) -> str:
    shown = ", ".join(foreign) + (", …" if len(foreign) >= 5 else "")
    return (
        f"{root} is not a BehaviorTrace cache: it has no {MARKER} and holds {shown}, which a "
        "cache never holds. Nothing in it was changed. Pass a new or empty directory, or a cache "
        f"root (the directory holding {MARKER}, runs/, sketches/ …)"
    )


def check_root(root: Path) -> None:
    """Raise NotACacheError, naming the folder and why, if `root` would be refused as a cache root
    (writes nothing: `open_root` is the one that creates and marks)."""
    root = Path(root)
    if root.exists() and not root.is_dir():
        raise NotACacheError(f"{root} is a file, not a cache directory; pass a directory")
    if not root.is_dir() or read_marker(root) is not None or not any(root.iterdir()):
        return
    foreign = foreign_entries(root)
    if foreign:
        raise NotACacheError(refusal(root, foreign))


def open_root(root: Path, create: bool = True) -> bool:
    """Make sure `root` is a cache root before anything writes or deletes there (see the module
    doc).

    Returns True if `root` exists as a cache root afterwards (False: absent or empty, and `create`
    is False). Raises NotACacheError, naming the folder and why, for anything that is not a
    cache."""
    root = Path(root)
    check_root(root)
    if read_marker(root) is not None:
        return True
    if not root.exists() or not any(root.iterdir()):
        if not create:
            return False
        root.mkdir(parents=True, exist_ok=True)
        _write_marker(root)
        return True
    _write_marker(
        root, adopted="a cache written before markers existed: every entry was a cache's own"
    )
    return True


def looks_like_cache(path: Path) -> bool:
    """A marked cache root, or an unmarked legacy one (holding a kind folder and nothing a cache
    never holds)."""
    path = Path(path)
    if is_cache_root(path):
        return True
    return (
        path.is_dir()
        and any((path / k).is_dir() for k in KNOWN_KINDS)
        and not foreign_entries(path)
        and not (path / MARKER).exists()
    )


def describe(path: Path) -> str:
    """What a directory is, in a few words, for messages about a path that is not what was asked
    for."""
    path = Path(path)
    if not path.exists():
        return "does not exist"
    if not path.is_dir():
        return "is a file, not a directory"
    if is_cache_root(path):
        return "is a BehaviorTrace cache root"
    if looks_like_cache(path):
        return "is a BehaviorTrace cache root (written before markers existed)"
    if looks_like_cache(path.parent):
        return (
            f"is the {path.name}/ folder of a BehaviorTrace cache (it holds artifacts of that kind)"
        )
    if (path / "manifest.json").is_file():
        try:
            kind = json.loads((path / "manifest.json").read_text()).get("kind")
        except (OSError, json.JSONDecodeError, AttributeError):
            kind = None
        return (
            f"is a BehaviorTrace artifact of kind {kind!r}"
            if kind
            else "has a manifest.json of unknown form"
        )
    if (
        (path / "pyproject.toml").is_file()
        or (path / ".git").exists()
        or (path / "bt_core").is_dir()
    ):
        return "is a source checkout (it has pyproject.toml, .git or bt_core/)"
    if not any(path.iterdir()):
        return "is an empty directory"
    return "is a directory that is neither a BehaviorTrace run nor a cache"


def user_cache_dir() -> Path:
    """The per-user cache (the platform's cache directory: ``$XDG_CACHE_HOME/behaviortrace`` or
    ``~/.cache/behaviortrace`` on Linux, ``~/Library/Caches/behaviortrace`` on macOS,
    ``%LOCALAPPDATA%\\behaviortrace\\Cache`` on Windows): shared by every directory, by `pytest` and
    by `behaviortrace check`, so a second gate from another folder is warm."""
    import platformdirs

    return Path(platformdirs.user_cache_dir("behaviortrace", appauthor=False))


def default_cache_dir() -> Path:
    """``$BEHAVIORTRACE_CACHE`` when set, else `user_cache_dir()` (what every command uses without
    ``--bt-cache``)."""
    env = os.environ.get(CACHE_ENV)
    return Path(env) if env else user_cache_dir()


def legacy_cache_note(used: Path, cwd: Path | None = None) -> str | None:
    """A note when the default cache is in use and the working directory holds a cache of the old
    default (``./.bt_cache``, before issue 39): its artifacts are no longer read unless asked for,
    so say how to keep them (None: nothing to say)."""
    old = (cwd or Path.cwd()) / LEGACY_DEFAULT
    if not (old / "runs").is_dir() or old.resolve() == used.resolve():
        return None
    return (
        f"note: {old} is a BehaviorTrace cache of the old default (./{LEGACY_DEFAULT}); the "
        f"default is now the per-user cache {used}. Pass --bt-cache {LEGACY_DEFAULT} (or set "
        f"{CACHE_ENV}={LEGACY_DEFAULT}) to keep using it, or move it: mv {LEGACY_DEFAULT} {used}"
    )
