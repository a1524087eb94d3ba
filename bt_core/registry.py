"""Estimator registry: a decorator for built-ins, entry-point plug-ins, and `pkg.mod:factory` paths.

    from bt_core.registry import register, Estimator

    @register
    class MyMethod(Estimator):
        name = "my_method"
        levels = ("rollout",)
        def score(self, problem): ...          # → (problem.n_units,) floats

Installed packages register through the entry-point group ``behaviortrace.estimators`` (the entry
point's name is the estimator's name; it points at a class or a zero-argument factory). Unregistered
code runs with ``--estimator=package.module:factory``.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.metadata as md
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

ENTRY_POINT_GROUP = "behaviortrace.estimators"
LEVELS = ("rollout", "step")


class Estimator:
    """Base class. Subclasses set `name`, `levels` and implement `score`."""

    name: str = ""
    levels: tuple[str, ...] = LEVELS
    needs: tuple[str, ...] = ()  # optional AttributionProblem fields it reads that may be None (e.g. "rollouts")

    def __init__(self, **params):
        self.params = params

    def score(self, problem) -> np.ndarray:  # pragma: no cover - interface
        """Return one float per unit of `problem`, shape (problem.n_units,); higher = more responsible."""
        raise NotImplementedError


@dataclass(frozen=True)
class EstimatorSpec:
    name: str
    factory: Callable[..., Estimator]
    levels: tuple[str, ...]
    origin: str  # "builtin" | "adapter:<library>" | "plugin:<distribution>" | "path:<module:attr>"
    doc: str
    needs: tuple[str, ...] = ()  # optional problem fields the estimator reads (checked before scoring)

    def create(self, **params) -> Estimator:
        est = self.factory(**params)
        if not hasattr(est, "score"):
            raise TypeError(f"estimator {self.name!r} ({self.origin}) built an object without a score() method")
        return est

    def as_dict(self) -> dict:
        return {"name": self.name, "levels": list(self.levels), "origin": self.origin, "needs": list(self.needs)}


class Declined(Exception):
    """Raised by `score` for a problem the estimator documents it does not handle (e.g. too many units for
    a library adapter). Evidence reports it as an `EstimatorFailure` whose `declined` is True, so a checklist
    item can tell a documented limitation from a bug."""


class UnknownEstimatorError(LookupError):
    """Raised for a name that is neither registered nor a `module:attr` path."""


class DuplicateEstimatorError(ValueError):
    """Raised when two estimators claim one name."""


_REGISTRY: dict[str, EstimatorSpec] = {}
_LOADED = False


def _spec_from(obj, name: str | None, origin: str) -> EstimatorSpec:
    est_name = name or getattr(obj, "name", "") or getattr(obj, "__name__", "")
    levels = tuple(getattr(obj, "levels", LEVELS))
    bad = [lv for lv in levels if lv not in LEVELS]
    if bad:
        raise ValueError(f"estimator {est_name!r} declares unknown level(s) {bad}; allowed: {list(LEVELS)}")
    doc = (getattr(obj, "__doc__", "") or "").strip().split("\n")[0]
    return EstimatorSpec(est_name, obj, levels, origin, doc, tuple(getattr(obj, "needs", ())))


def register(obj=None, *, name: str | None = None, origin: str = "builtin"):
    """Class decorator (bare or with `name=`) adding an estimator to the registry."""

    def deco(o):
        spec = _spec_from(o, name, origin)
        if not spec.name:
            raise ValueError(f"{o!r} has no name: set a `name` attribute or pass register(name=...)")
        if spec.name in _REGISTRY and _REGISTRY[spec.name].factory is not o:
            raise DuplicateEstimatorError(
                f"estimator name {spec.name!r} is already registered by {_REGISTRY[spec.name].origin} "
                f"({_REGISTRY[spec.name].factory!r}); choose another name")
        _REGISTRY[spec.name] = spec
        return o

    return deco(obj) if obj is not None else deco


def _load() -> None:
    global _LOADED
    if _LOADED:
        return
    _LOADED = True
    importlib.import_module("bt_core.estimators")  # built-ins register on import
    for ep in md.entry_points(group=ENTRY_POINT_GROUP):
        dist = ep.dist.name if ep.dist is not None else "unknown"
        try:
            register(ep.load(), name=ep.name, origin=f"plugin:{dist}")
        except DuplicateEstimatorError:
            raise
        except Exception as e:  # a broken plug-in must not hide the others
            _BROKEN[ep.name] = f"plugin {ep.name!r} from {dist} failed to load: {type(e).__name__}: {e}"


_BROKEN: dict[str, str] = {}


def available() -> list[EstimatorSpec]:
    _load()
    return sorted(_REGISTRY.values(), key=lambda s: s.name)


def names() -> list[str]:
    return [s.name for s in available()]


def get(name: str) -> EstimatorSpec:
    """Registered name or `package.module:factory` path → spec; unknown → error with suggestions."""
    _load()
    if name in _REGISTRY:
        return _REGISTRY[name]
    if ":" in name:
        return _from_path(name)
    if name in _BROKEN:
        raise UnknownEstimatorError(_BROKEN[name])
    close = difflib.get_close_matches(name, list(_REGISTRY), n=3, cutoff=0.5)
    hint = f"Did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
    raise UnknownEstimatorError(
        f"unknown estimator {name!r}. {hint}Available: {', '.join(sorted(_REGISTRY))}. "
        "Register one with @bt_core.registry.register, install a plug-in (entry-point group "
        f"'{ENTRY_POINT_GROUP}'), or pass --estimator=package.module:factory.")


def _from_path(path: str) -> EstimatorSpec:
    mod_name, _, attr = path.partition(":")
    try:
        obj = getattr(importlib.import_module(mod_name), attr)
    except (ImportError, AttributeError) as e:
        raise UnknownEstimatorError(f"--estimator={path!r}: cannot import {attr!r} from {mod_name!r} "
                                    f"({type(e).__name__}: {e}); check the module is importable") from e
    spec = _spec_from(obj, None, f"path:{path}")
    return EstimatorSpec(spec.name or path, obj, spec.levels, spec.origin, spec.doc, spec.needs)
