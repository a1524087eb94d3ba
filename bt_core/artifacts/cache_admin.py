"""`behaviortrace cache info|clean`: what the artifact cache holds, and removing it safely.

    behaviortrace cache info  [--bt-cache DIR] [--json]
    behaviortrace cache clean [--bt-cache DIR] [--kind K] [--stale-only] [--yes] [--json]

`info` reports, per kind (runs, sketches, targets, draws, …), the number of finished artifacts and
their bytes, and lists leftover directories: `tmp`/`trash` debris of killed processes and resumable
`partial` training directories (bt_core/artifacts/store.py names them). An entry counts as *stale*
only if its key's file lock is free — a live builder holds the lock for as long as its directory
exists — and as *busy* otherwise.

Both act only on a cache root (`bt_core/artifacts/cacheroot.py`: a directory carrying the cache's
marker, or a legacy cache every entry of which is a cache's own, which is then marked), and only on
its artifact folders (key-named entries of its kind directories and their leftovers); anything else
is refused or kept, and named.

`clean` takes each key's lock before deleting anything (without waiting: a key being built is
skipped and reported), so it never removes what another process is building or loading for a build.
Without `--yes` it only says what it would delete. Lock files are kept: deleting a lock file while
another process waits on it would let two processes hold "the" lock.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from filelock import FileLock, Timeout
from tabulate import tabulate

from bt_core.artifacts.cacheroot import (
    CACHE_ENV,
    KNOWN_KINDS,
    MARKER,
    NotACacheError,
    check_root,
    default_cache_dir,
    is_cache_root,
    is_key,
    open_root,
    user_cache_dir,
)
from bt_core.artifacts.store import classify, discard, lock_path, partial_dir, stale_siblings

LEFTOVER = ("tmp", "partial", "trash")


@dataclass
class Entry:
    kind: str
    key: str
    state: str  # artifact | tmp | partial | trash
    path: str
    bytes: int
    age_s: float  # seconds since the entry was last modified
    busy: bool  # its key's lock is held by a live process


def dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def key_busy(final: Path) -> bool:
    """True if a live process holds the key's lock (we try it without waiting and release at
    once)."""
    try:
        with FileLock(str(lock_path(final)), timeout=0):
            return False
    except Timeout:
        return True


def kinds_in(root: Path) -> list[str]:
    return (
        sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
        if root.is_dir()
        else []
    )


def scan(root: Path) -> list[Entry]:
    """Every artifact and leftover directory under `root`."""
    out, now = [], time.time()
    for kind in kinds_in(root):
        for p in sorted((root / kind).iterdir()):
            key, state = classify(p.name)
            final = root / kind / key
            if (
                not p.is_dir()
                or state not in ("artifact", *LEFTOVER)
                or not is_key(key)
                or not lock_path(final).is_file()
            ):
                # only artifact folders (the store locks a key before writing anything under it)
                continue
            out.append(
                Entry(
                    kind,
                    key,
                    state,
                    str(p),
                    dir_bytes(p),
                    round(now - p.stat().st_mtime, 1),
                    key_busy(final) if state in LEFTOVER else False,
                )
            )
    return out


def info(root: Path) -> dict:
    entries = scan(root) if root.is_dir() else []
    kinds: dict[str, dict] = {}
    for k in kinds_in(root):
        arts = [e for e in entries if e.kind == k and e.state == "artifact"]
        left = [e for e in entries if e.kind == k and e.state != "artifact"]
        kinds[k] = {
            "artifacts": len(arts),
            "bytes": sum(e.bytes for e in arts),
            "leftover": len(left),
            "leftover_bytes": sum(e.bytes for e in left),
        }
    total = dir_bytes(root) if root.is_dir() else 0
    return {
        "root": str(root),
        "exists": root.is_dir(),
        "marked": is_cache_root(root),
        "total_bytes": total,
        "kinds": kinds,
        "leftovers": [asdict(e) for e in entries if e.state != "artifact"],
    }


def clean(
    root: Path, kind: str | None = None, stale_only: bool = False, dry_run: bool = True
) -> dict:
    """Remove leftovers (always) and finished artifacts (unless `stale_only`) of `kind` (or all
    kinds), each under its key's lock; busy keys are skipped. Returns what was (or would be)
    removed."""
    if not dry_run and root.is_dir() and any(root.iterdir()) and not is_cache_root(root):
        # only a marked root is cleaned (main marks a legacy one first)
        raise NotACacheError(f"{root} carries no {MARKER}: refusing to delete anything in it")
    removed, busy = [], []
    for e in scan(root) if root.is_dir() else []:
        if (kind and e.kind != kind) or (stale_only and e.state == "artifact"):
            continue
        final = root / e.kind / e.key
        try:
            with FileLock(str(lock_path(final)), timeout=0):
                if not dry_run:
                    _remove(final, e.state)
            removed.append(asdict(e))
        except Timeout:
            busy.append(asdict(e))
    return {
        "root": str(root),
        "dry_run": dry_run,
        "removed": removed,
        "busy": busy,
        "bytes": sum(e["bytes"] for e in removed),
    }


def _remove(final: Path, state: str) -> None:
    """Under the key's lock: remove the artifact or all its leftovers."""
    if state == "artifact":
        discard(final)
        return
    for p in [*stale_siblings(final), partial_dir(final)]:
        discard(p)


# --------------------------------------------------------------------------- command line
def human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def add_subparser(sub) -> None:
    """Register `cache info|clean` on the CLI's subparsers (self-contained)."""
    c = sub.add_parser("cache", help="report or clean the artifact cache")
    csub = c.add_subparsers(dest="cache_cmd", required=True)
    for name, hlp in (
        ("info", "per-kind counts and sizes, leftover tmp/partial directories"),
        ("clean", "delete artifacts and leftovers (dry run unless --yes)"),
    ):
        p = csub.add_parser(name, help=hlp)
        p.add_argument(
            "--bt-cache",
            metavar="DIR",
            default=None,
            help=f"cache directory (default: ${CACHE_ENV}, else the per-user cache "
            f"{user_cache_dir()})",
        )
        p.add_argument("--json", action="store_true", help="print one JSON object")
        if name == "clean":
            p.add_argument(
                "--kind",
                metavar="K",
                default=None,
                help=f"only this kind ({', '.join(KNOWN_KINDS)}; default: every kind)",
            )
            p.add_argument(
                "--stale-only",
                action="store_true",
                help="only leftovers of dead processes, keep finished artifacts",
            )
            p.add_argument("--yes", action="store_true", help="really delete (default: only list)")
        p.set_defaults(fn=main)


def _refuse(root: Path) -> str | None:
    """Why `root` must not be reported on or cleaned as a cache (None: a cache root, a legacy cache,
    empty, or absent)."""
    try:
        check_root(root)
    except NotACacheError as e:
        return str(e)
    return None


def main(args: argparse.Namespace) -> int:
    root = Path(args.bt_cache) if args.bt_cache else default_cache_dir()
    why = _refuse(root)
    if why:
        print(f"error: --bt-cache {root}: refused: {why}", file=sys.stderr)
        return 2
    if args.cache_cmd == "info":
        return _print_info(info(root), args.json)
    if args.yes and root.is_dir() and any(root.iterdir()) and not is_cache_root(root):
        # a legacy cache (every entry a cache's own) gets its marker now
        open_root(root, create=False)
        print(
            f"marked {root} as a cache ({MARKER}): it held only a cache's own entries",
            file=sys.stderr,
        )
    allowed = sorted(set(KNOWN_KINDS) | set(kinds_in(root)))
    if args.kind is not None and args.kind not in allowed:
        print(
            f"error: --kind {args.kind!r} is unknown; choose one of {', '.join(allowed)}",
            file=sys.stderr,
        )
        return 2
    res = clean(root, args.kind, args.stale_only, dry_run=not args.yes)
    if args.json:
        print(json.dumps(res))
        return 0
    verb = "would remove" if res["dry_run"] else "removed"
    rows = [[e["kind"], e["key"], e["state"], human(e["bytes"])] for e in res["removed"]]
    if rows:
        print(tabulate(rows, headers=["kind", "key", "state", "size"]))
    print(
        f"{verb} {len(rows)} director{'y' if len(rows) == 1 else 'ies'} ({human(res['bytes'])}) "
        f"from {root}"
    )
    for e in res["busy"]:
        print(f"skipped {e['path']}: its key is locked by a running build", file=sys.stderr)
    if res["dry_run"] and rows:
        print("dry run: rerun with --yes to delete")
    return 0


def _print_info(rep: dict, as_json: bool) -> int:
    if as_json:
        print(json.dumps(rep))
        return 0
    if not rep["exists"]:
        print(f"no cache at {rep['root']} (nothing built yet)")
        return 0
    rows = [
        [k, v["artifacts"], human(v["bytes"]), v["leftover"], human(v["leftover_bytes"])]
        for k, v in rep["kinds"].items()
    ]
    print(tabulate(rows, headers=["kind", "artifacts", "size", "leftovers", "leftover size"]))
    print(f"total {human(rep['total_bytes'])} in {rep['root']}")
    if not rep["marked"]:
        print(
            f"note: no {MARKER} yet: a cache written before markers existed (every entry is a "
            "cache's own); the next build or `cache clean` marks it"
        )
    for e in rep["leftovers"]:
        what = ("resumable training" if e["state"] == "partial" else "debris") + (
            " (busy: a live process holds its lock)" if e["busy"] else " (stale: no live owner)"
        )
        print(f"  {e['state']:8s} {e['path']}  {human(e['bytes'])}  {what}")
    if any(not e["busy"] for e in rep["leftovers"]):
        # runs as printed: the cache it reported on, quoted for a shell
        root = shlex.quote(str(rep["root"]))
        print(
            "remove stale leftovers with: "
            f"behaviortrace cache clean --bt-cache {root} --stale-only --yes"
        )
    return 0
