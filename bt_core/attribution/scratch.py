"""A label-free problem on disk: what the judge writes for the scoring worker, and how the worker
reads it.

    write_problem(problem, dir)     the judge: one directory per problem, written once per session
    read_problem(dir)               the worker: the same `AttributionProblem`, its arrays
                                    memory-mapped

Layout of a problem directory (nothing else is written into it):

    arrays/<field>.npy          every array field, (n_units, …) as in `AttributionProblem`
    targets/<kind>.npy          (n_ckpt, k) sketched targets
    rollouts/<column>.npy       the label-free `RolloutView` (rollout level only)
    ckpt/<file>                 the checkpoints a method may load (parameters and AdamW state)
    meta.pkl                    scalars, `extra`, the codec, the behavior measure, the target
                                examples of every (kind, checkpoint) and the loaders, their files
                                named relative to
                                the directory

An array that is a whole ``.npy`` file memory-mapped from the cache (the embeddings, the token ids)
is hard-linked, not copied (copied only where the scratch lies on another file system); every other
one is saved once. The worker maps them read-only (``mmap_mode="r"``), so no estimator gets its own
copy.

Only the fields of `AttributionProblem` are written: a `LabelledProblem`'s `truth` and `labels`
never are, and neither is the run's rollout table, the contaminator's key or any replay. The judge
reads `meta.pkl` back never; only the worker unpickles it (the judge wrote it).
"""

from __future__ import annotations

import os
import pickle
import shutil
from dataclasses import fields, replace
from pathlib import Path

import numpy as np

from bt_core.artifacts.readonly import readonly
from bt_core.attribution.problem import ARRAY_FIELDS, AttributionProblem

__all__ = ["ScratchError", "read_problem", "write_problem"]

# callables whose checkpoint files are linked in
LOADERS = ("model_at", "preconditioner", "optimizer_at")
PICKLED = ("kind", "level", "seed", "name", "draw", "grad_clip", "codec", "measure", "project")


class ScratchError(RuntimeError):
    """A problem field that cannot be handed to a worker process (an unpicklable callable)."""


def _link_or_copy(src: Path, dst: Path, linked: set | None = None) -> None:
    """Hard-link `src` at `dst` (adding `src` to `linked`), or copy it where links fail."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dst)
    except OSError:  # another file system, or links not allowed: one copy per session
        shutil.copyfile(src, dst)
    else:
        if linked is not None:
            linked.add(Path(src))


def _whole_file(a: np.ndarray) -> Path | None:
    """The ``.npy`` file `a` is a read-only memory map of, when `a` is that file's whole array."""
    name = getattr(a, "filename", None)
    if not isinstance(a, np.memmap) or not name or not str(name).endswith(".npy"):
        return None
    try:
        on_disk = np.load(name, mmap_mode="r")
    except (OSError, ValueError):
        return None
    same = (
        on_disk.shape == a.shape
        and on_disk.dtype == a.dtype
        and a.flags.c_contiguous
        and getattr(a, "offset", None) == on_disk.offset
        and a.__array_interface__["data"][0] == np.asarray(a).__array_interface__["data"][0]
    )
    return Path(name) if same else None


def _put_array(a, dst: Path, linked: set | None = None) -> None:
    src = _whole_file(a)
    if src is not None:
        _link_or_copy(src, dst, linked)
    else:
        dst.parent.mkdir(parents=True, exist_ok=True)
        np.save(dst, np.ascontiguousarray(np.asarray(a)), allow_pickle=False)


def _examples(problem: AttributionProblem) -> dict | None:
    """Every (kind, checkpoint step) → TargetExamples the problem's `target_examples` answers."""
    fn = problem.target_examples
    if fn is None:
        return None
    return {(k, int(s)): fn(k, int(s)) for k in problem.targets for s in problem.checkpoint_steps}


def _relocated(loader, d: Path, linked: set | None = None):
    """`loader` with its checkpoint files linked under ``d/ckpt`` and named relative to `d`."""
    if loader is None:
        return None
    if not hasattr(loader, "with_files"):
        return _picklable(loader, "a checkpoint loader")

    def move(p: Path) -> Path:
        rel = Path("ckpt") / Path(p).name
        if not (d / rel).exists():
            _link_or_copy(Path(p), d / rel, linked)
        return rel

    return loader.with_files(move)


def _picklable(obj, what: str):
    try:
        pickle.dumps(obj)
    except Exception as e:
        raise ScratchError(
            f"{what} {obj!r} cannot be handed to the scoring worker ({type(e).__name__}: {e}); "
            "give the problem module-level objects, or score in-process "
            "(--bt-scoring=in-process, marked on the scorecard)"
        ) from None
    return obj


def write_problem(problem: AttributionProblem, d: Path, linked: set | None = None) -> None:
    """Write the label-free fields of `problem` into the empty directory `d` (see the module).
    Every source file hard-linked into it is added to `linked` (the caller re-stamps them in the
    cache's ledger once the links are gone: `bt_core.artifacts.store.restamp_after_links`)."""
    d = Path(d)
    d.mkdir(parents=True, exist_ok=True)
    for name in ARRAY_FIELDS:
        _put_array(getattr(problem, name), d / "arrays" / f"{name}.npy", linked)
    for kind, t in problem.targets.items():
        _put_array(t, d / "targets" / f"{kind}.npy", linked)
    view = problem.rollouts
    if view is not None:
        for f in fields(view):
            _put_array(getattr(view, f.name), d / "rollouts" / f"{f.name}.npy", linked)
    meta = {name: _picklable(getattr(problem, name), f"problem field {name!r}") for name in PICKLED}
    meta.update(
        extra=dict(problem.extra),
        targets=list(problem.targets),
        examples=_examples(problem),
        rollouts=None if view is None else type(view),
        **{name: _relocated(getattr(problem, name), d, linked) for name in LOADERS},
    )
    (d / "meta.pkl").write_bytes(pickle.dumps(meta))


class ExamplesTable:
    """(kind, checkpoint step) → TargetExamples, from the table the judge wrote
    (`problem.target_examples`)."""

    def __init__(self, table: dict):
        self.table = table

    def __call__(self, kind: str, step: int):
        key = (kind, int(step))
        if key not in self.table:
            raise KeyError(
                f"no target examples for kind {kind!r} at step {step}; known: {sorted(self.table)}"
            )
        return self.table[key]


def _load(path: Path) -> np.ndarray:
    return np.load(path, mmap_mode="r", allow_pickle=False)


def _rebased(loader, d: Path):
    return loader.with_files(lambda p: d / p) if hasattr(loader, "with_files") else loader


def _readonly_measure(m):
    """The behavior measure with read-only arrays again (unpickled arrays are writable)."""
    if m is None or not hasattr(m, "examples"):
        return m
    ex = m.examples
    ex = type(ex)(**{f.name: readonly(getattr(ex, f.name)) for f in fields(ex)})
    return replace(m, examples=ex, window=None if m.window is None else readonly(m.window))


def read_problem(d: Path) -> AttributionProblem:
    """The problem written by `write_problem` into `d`, its arrays memory-mapped read-only."""
    d = Path(d)
    meta = pickle.loads((d / "meta.pkl").read_bytes())
    arrays = {name: _load(d / "arrays" / f"{name}.npy") for name in ARRAY_FIELDS}
    targets = {kind: _load(d / "targets" / f"{kind}.npy") for kind in meta["targets"]}
    view_type = meta["rollouts"]
    view = (
        None
        if view_type is None
        else view_type(
            **{f.name: _load(d / "rollouts" / f"{f.name}.npy") for f in fields(view_type)}
        )
    )
    loaders = {name: _rebased(meta[name], d) for name in LOADERS}
    examples = None if meta["examples"] is None else ExamplesTable(meta["examples"])
    return AttributionProblem(
        **arrays,
        targets=targets,
        rollouts=view,
        target_examples=examples,
        extra=meta["extra"],
        **{**{k: meta[k] for k in PICKLED}, "measure": _readonly_measure(meta["measure"])},
        **loaders,
    )
