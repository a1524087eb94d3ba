"""Estimator registry: how an estimator is declared (`Estimator`, `register`, `EstimatorSpec`) and
the errors of lookup. Which estimators exist (built-ins, plug-ins, `pkg.mod:factory` paths) is
`bt_core.attribution.catalog`'s business, so this module imports no estimator.

    from bt_core.attribution import Estimator, register

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

import inspect
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from bt_core.reporting.scorecard import ROLES

ENTRY_POINT_GROUP = "behaviortrace.estimators"
LEVELS = ("rollout", "step")
LABEL_FIELDS = ("labels", "truth")  # declaring either in `needs` makes an estimator a label reader


class Estimator:
    """Base class. Subclasses set `name`, `levels` and implement `score`."""

    name: str = ""
    levels: tuple[str, ...] = LEVELS
    # the problem fields it reads: it is handed only these (reading another fails its items);
    # "labels": validation only. A subclass that does not set `needs` sees every field and counts as
    # a target reader.
    needs: tuple[str, ...] = ()
    # what the estimator is for (one of `ROLES`), recorded as every scorecard row's
    # estimator_spec.role: "method" (an attribution method, the default), "control" (a target-free
    # baseline the items compare with) or "validation" (reads the labels on purpose, to show the
    # suite can be passed). Only a built-in's declaration counts (`EstimatorSpec.role`): a plug-in
    # is a method, or validation if it reads the labels, whatever it declares.
    role: str = "method"
    # judged only where named (`--estimator`): the default selection, every registered estimator,
    # leaves it out. The ladder's rungs are (issue 62: the default suite must not get slower for
    # estimators that cost about what the ideal does and pass nothing it does not).
    opt_in: bool = False

    def __init__(self, **params):
        self.params = params

    def score(self, problem) -> np.ndarray:  # pragma: no cover - interface
        """Return one float per unit of `problem`, shape (problem.n_units,); higher = more
        responsible."""
        raise NotImplementedError


@dataclass(frozen=True)
class EstimatorSpec:
    name: str
    factory: Callable[..., Estimator]
    levels: tuple[str, ...]
    origin: str  # "builtin" | "adapter:<library>" | "plugin:<distribution>" | "path:<module:attr>"
    doc: str
    needs: tuple[str, ...] = ()  # the problem fields it declared (enforced: see `declares_needs`)
    declared_role: str = "method"  # its class's `role` (one of ROLES); what counts of it: `role`
    opt_in: bool = False  # left out of the default selection (`Estimator.opt_in`)

    def create(self, **params) -> Estimator:
        est = self.factory(**params)
        if not hasattr(est, "score"):
            raise TypeError(
                f"estimator {self.name!r} ({self.origin}) built an object without a score() method"
            )
        return est

    def parameters(self) -> list[str] | None:
        """The keyword settings its factory accepts, or None when it takes ``**kwargs``
        (anything)."""
        sig = _signature(self.factory)
        if sig is None or any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values()):
            return None
        return [
            p.name
            for p in sig.parameters.values()
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
        ]

    def settings(self, **params) -> dict:
        """The settings it is built with: its factory's declared defaults, overridden by `params`
        (JSON-safe: a default that JSON cannot hold is recorded as its repr)."""
        sig = _signature(self.factory)
        defaults = (
            {}
            if sig is None
            else {
                p.name: _json_safe(p.default)
                for p in sig.parameters.values()
                if p.default is not p.empty
            }
        )
        return {**defaults, **{k: _json_safe(v) for k, v in params.items()}}

    @property
    def key(self) -> tuple[str, str]:
        """What identifies it in a session's evidence (scores, memos, built instances): (origin,
        name). A plug-in named like a built-in is another estimator and inherits nothing of it."""
        return (self.origin, self.name)

    @property
    def declares_needs(self) -> bool:
        """Whether it declared `needs` itself (its class or a base other than `Estimator`, or a
        factory's own `needs` attribute). One that declares nothing sees every problem field and is
        treated as a target reader; one that declares sees only the fields it lists."""
        mro = getattr(self.factory, "__mro__", None)
        if mro is None:
            return "needs" in getattr(self.factory, "__dict__", {})
        return any("needs" in vars(c) for c in mro if c not in (Estimator, object))

    @property
    def builtin_adapter(self) -> bool:
        """One of this package's library adapters (`bt_core.attribution.adapters`): the only
        estimator whose missing optional extra may skip its items instead of failing them."""
        return self.origin.startswith("adapter:") and getattr(
            self.factory, "__module__", ""
        ).startswith("bt_core.attribution.adapters.")

    @property
    def reads_labels(self) -> bool:
        """Whether it declared the labels in `needs`: it then gets them, and is validation only."""
        return bool(set(self.needs) & set(LABEL_FIELDS))

    @property
    def builtin_validation(self) -> bool:
        """A label reader the suite admits: a built-in that declares ``role = "validation"`` (the
        oracle).
        Every other label reader is refused as a gate: its verdicts fail with "reads labels —
        validation only"."""
        return self.reads_labels and self.origin == "builtin" and self.declared_role == "validation"

    @property
    def role(self) -> str:
        """'validation' (reads the labels), 'control' (a built-in declaring ``role = "control"``) or
        'method' (everything else: a plug-in's own declaration does not make it a control)."""
        if self.reads_labels:
            return "validation"
        return (
            "control" if self.origin == "builtin" and self.declared_role == "control" else "method"
        )

    def as_dict(self) -> dict:
        return {
            "name": self.name,
            "levels": list(self.levels),
            "origin": self.origin,
            "needs": list(self.needs),
            "reads_labels": self.reads_labels,
            "opt_in": self.opt_in,
        }


def _signature(factory) -> inspect.Signature | None:
    try:
        return inspect.signature(factory)
    except (TypeError, ValueError):  # builtins and some C callables have none
        return None


def _json_safe(v):
    try:
        json.dumps(v)
        return v
    except (TypeError, ValueError):
        return repr(v)


class Declined(Exception):
    """Raised by `score` for a problem the estimator documents it does not handle (e.g. too many
    units for a library adapter). Evidence reports it as an `EstimatorFailure` whose `declined` is
    True, so a checklist item can tell a documented limitation from a bug."""


class UnknownEstimatorError(LookupError):
    """Raised for a name that is neither registered nor a `module:attr` path."""


class DuplicateEstimatorError(ValueError):
    """Raised when two estimators claim one name."""


def spec_from(obj, name: str | None, origin: str) -> EstimatorSpec:
    """The `EstimatorSpec` of a class or factory: its name, levels, needs, role and first doc line
    (checked: an unknown level or role raises `ValueError` naming it)."""
    est_name = name or getattr(obj, "name", "") or getattr(obj, "__name__", "")
    levels = tuple(getattr(obj, "levels", LEVELS))
    bad = [lv for lv in levels if lv not in LEVELS]
    if bad:
        raise ValueError(
            f"estimator {est_name!r} declares unknown level(s) {bad}; allowed: {list(LEVELS)}"
        )
    role = getattr(obj, "role", "method")
    if role not in ROLES:
        raise ValueError(
            f"estimator {est_name!r} declares role={role!r}; choose one of {list(ROLES)} "
            "(or leave it unset: a method)"
        )
    doc = (getattr(obj, "__doc__", "") or "").strip().split("\n")[0]
    return EstimatorSpec(
        est_name,
        obj,
        levels,
        origin,
        doc,
        tuple(getattr(obj, "needs", ())),
        role,
        bool(getattr(obj, "opt_in", False)),
    )


def _same_definition(a, b) -> bool:
    """Whether `a` and `b` are one definition executed twice: the same module and qualified name (a
    module re-imported, e.g. after pytester restored sys.modules, registers its classes again)."""
    key = lambda o: (getattr(o, "__module__", None), getattr(o, "__qualname__", None))
    return key(a) == key(b) and key(a) != (None, None)


class Registry:
    """Registered estimators by name. `add` refuses a second estimator under a taken name
    (`DuplicateEstimatorError`); `scoped()` gives a block (a test, a one-off plug-in load) its own
    copy that is thrown away on exit. Which estimators exist beyond those registered on import
    (entry points, `pkg.mod:factory` paths) is `bt_core.attribution.catalog`'s business."""

    def __init__(self) -> None:
        self._specs: dict[str, EstimatorSpec] = {}

    def add(self, obj, *, name: str | None = None, origin: str = "builtin") -> EstimatorSpec:
        spec = spec_from(obj, name, origin)
        if not spec.name:
            raise ValueError(
                f"{obj!r} has no name: set a `name` attribute or pass register(name=...)"
            )
        held = self._specs.get(spec.name)
        if held is not None and held.factory is not obj and not _same_definition(held.factory, obj):
            raise DuplicateEstimatorError(
                f"estimator name {spec.name!r} is already registered by {held.origin} "
                f"({held.factory!r}); choose another name"
            )
        self._specs[spec.name] = spec
        return spec

    def remove(self, name: str) -> None:
        """Forget `name` (absent: nothing happens)."""
        self._specs.pop(name, None)

    def __contains__(self, name: object) -> bool:
        return name in self._specs

    def __getitem__(self, name: str) -> EstimatorSpec:
        return self._specs[name]

    def names(self) -> list[str]:
        return sorted(self._specs)

    def specs(self) -> list[EstimatorSpec]:
        """Every registered spec, by name."""
        return [self._specs[n] for n in self.names()]

    @contextmanager
    def scoped(self) -> Iterator[Registry]:
        """Within the block, additions and removals act on a copy; the registry is restored on
        exit."""
        saved = dict(self._specs)
        try:
            yield self
        finally:
            self._specs = saved


REGISTRY = Registry()


def register(obj=None, *, name: str | None = None, origin: str = "builtin"):
    """Class decorator (bare or with `name=`) adding an estimator to `REGISTRY`."""

    def deco(o):
        REGISTRY.add(o, name=name, origin=origin)
        return o

    return deco(obj) if obj is not None else deco
