"""The estimator catalog: every estimator that can be asked for by name.

* built-ins (`bt_core.attribution.estimators`, registered on import) and the library adapters whose
  library is installed (`bt_core.attribution.adapters`);
* installed plug-ins, through the entry-point group ``behaviortrace.estimators`` (the entry point's
  name is the estimator's name; it points at a class or a zero-argument factory);
* unregistered code, by path: ``package.module:factory``.

A name that is none of these raises `UnknownEstimatorError` with "Did you mean …? Available: …".
"""

from __future__ import annotations

import difflib
import importlib
import importlib.metadata as md
import os
import sys

from bt_core.attribution.frames import raised_at
from bt_core.attribution.registry import (
    ENTRY_POINT_GROUP,
    REGISTRY,
    DuplicateEstimatorError,
    EstimatorSpec,
    UnknownEstimatorError,
    register,
    spec_from,
)

_LOADED = False
_BROKEN: dict[str, str] = {}


def _load() -> None:
    global _LOADED
    if _LOADED:
        return
    _LOADED = True
    from bt_core.attribution import adapters, estimators  # noqa: F401  (built-ins register on import)

    for ep in md.entry_points(group=ENTRY_POINT_GROUP):
        dist = ep.dist.name if ep.dist is not None else "unknown"
        try:
            register(ep.load(), name=ep.name, origin=f"plugin:{dist}")
        except DuplicateEstimatorError:
            raise
        except Exception as e:  # a broken plug-in must not hide the others
            _BROKEN[ep.name] = f"plugin {ep.name!r} from {dist} failed to load: {_at(e)}"


def available() -> list[EstimatorSpec]:
    _load()
    return REGISTRY.specs()


def not_installed() -> dict[str, str]:
    """Adapter estimators whose optional extra is missing here → the `pip install` that brings
    it."""
    from bt_core.attribution import adapters

    return {
        est: adapters.MISSING[lib]
        for est, lib in adapters.ESTIMATORS.items()
        if lib in adapters.MISSING
    }


def names() -> list[str]:
    return [s.name for s in available()]


def default_names() -> list[str]:
    """What a session judges when no `--estimator` is given: every registered estimator but the
    opt-in ones (`Estimator.opt_in`: the ladder's rungs), which are judged where named."""
    return [s.name for s in available() if not s.opt_in]


def get(name: str) -> EstimatorSpec:
    """Registered name or `package.module:factory` path → spec; unknown → error with suggestions."""
    _load()
    if name in REGISTRY:
        return REGISTRY[name]
    if ":" in name:
        return _from_path(name)
    if name in _BROKEN:
        raise UnknownEstimatorError(_BROKEN[name])
    missing = not_installed().get(name)
    if missing:
        raise UnknownEstimatorError(
            f"estimator {name!r} is an adapter whose library is not installed here; "
            f"install it with: {missing}"
        )
    close = difflib.get_close_matches(name, REGISTRY.names(), n=3, cutoff=0.5)
    hint = f"Did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
    raise UnknownEstimatorError(
        f"unknown estimator {name!r}. {hint}Available: {', '.join(REGISTRY.names())}. Register "
        "one with @bt_core.attribution.registry.register, install a plug-in (entry-point group "
        f"'{ENTRY_POINT_GROUP}'), or pass --estimator=package.module:factory."
    )


def _at(e: BaseException) -> str:
    return raised_at(e, skip=(__file__,))


def _from_path(path: str) -> EstimatorSpec:
    mod_name, _, attr = path.partition(":")
    if os.getcwd() not in sys.path and "" not in sys.path:
        # as `python -m pytest` would: the user's module lies in the directory they run from
        # (appended, so it never shadows an installed package)
        sys.path.append(os.getcwd())
    try:
        module = importlib.import_module(mod_name)
    except ModuleNotFoundError as e:
        # the module itself is absent
        if e.name and (mod_name == e.name or mod_name.startswith(e.name + ".")):
            raise UnknownEstimatorError(
                f"{path!r}: no module {e.name!r} (looked in {os.getcwd()} and the installed "
                "packages); run from the directory holding it, or install it"
            ) from None
        raise UnknownEstimatorError(
            f"{path!r}: importing {mod_name!r} failed at {_at(e)}"
        ) from None
    # a syntax error or an import-time exception in the plug-in: a usage error
    except Exception as e:
        raise UnknownEstimatorError(
            f"{path!r}: importing {mod_name!r} failed at {_at(e)}"
        ) from None
    try:
        obj = getattr(module, attr)
    except AttributeError:
        found = sorted(
            n
            for n in vars(module)
            if not n.startswith("_") and isinstance(getattr(module, n), type)
        )
        raise UnknownEstimatorError(
            f"{path!r}: {module.__file__} has no {attr!r}"
            + (f"; its classes: {', '.join(found)}" if found else "")
        ) from None
    spec = spec_from(obj, None, f"path:{path}")
    return EstimatorSpec(spec.name or path, obj, spec.levels, spec.origin, spec.doc, spec.needs)
