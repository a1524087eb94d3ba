"""What an estimator sees: an `AttributionProblem`, and what it returns: one float per unit.

Two kinds of problem:

* ``stream``: the real training stream of one run. Units are rollouts (``level="rollout"``,
  embedding = sketch of ∇(−ℓ_i) at the rollout's own parameters, weighted by its advantage A_i:
  A_i·e_i is the rollout's contribution to the batch gradient) or optimizer steps (``level="step"``,
  embedding = sketch of the aggregated batch gradient ∇L_s; all rollouts of a step tie). Scored
  against the GT.
* ``draw``: fresh sibling groups sampled at the analysis checkpoint (weight 1). Scored against the
  behavior label.

Targets are the sketched target gradients at every checkpoint; each unit uses the target of the
greatest checkpoint ≤ its step (`ckpt_index`).

**No answers.** A problem holds what a real method has: token ids (`rollouts`, a label-free
`RolloutView`), advantage, step, group, learning rate, checkpoints and the target examples. It has
no `truth` and no `labels` (reading either raises an `AttributeError` that says why), and its
rollout view has no `gt`, `eligible`, `reward`, `reward_base`, `behavior` or `behavior_mask`. The
labels stay with `bt_core.attribution.evidence.Evidence`, which scores against them. An estimator
that declares ``needs = ("labels",)`` (the `oracle`) is handed a `LabelledProblem` instead, and
every record of it is marked "reads labels — validation only".

**Only what it declares.** An estimator that declares ``needs`` is handed a view (`handout(needs)`)
holding only those fields and the structural ones (`STRUCTURAL_FIELDS`: what the problem is and how
its units map to checkpoints and rollouts); every other field is withheld, and reading it raises
`UndeclaredFieldError` naming the field (Evidence fails the estimator's items with that reason, even
when the estimator catches it). One that declares nothing sees every field, and is judged as a
target reader.

**Read-only.** Every array is read-only and cannot be made writable again
(`bt_core.artifacts.readonly`); `targets` and `extra` are read-only mappings. A write raises, the
estimator fails its items with the reason, and no estimator can change what another one is given.

Sign conventions (every built-in follows them; a plug-in should too):

* ``emb[u]`` is the sketch of ∇(−ℓ_u), the gradient of the unit's negative log-likelihood;
* a target ``t`` is the gradient of a target *loss* (an NLL), so −t is the direction that makes the
  behavior more likely;
* a stream rollout's update contribution is ``weight[u]·emb[u]`` (weight = advantage A_u); one SGD
  step of size η on it changes the target loss by ≈ −(η/B)·A_u⟨e_u, t⟩ (B = groups per step). So
  ⟨weight·e, t⟩ > 0 means "this unit taught the behavior": higher scores = more responsible.

Fields added for methods that compute their own gradients (all optional, `None` on synthetic
problems): ``rollouts`` (the label-free `RolloutView` whose row i is unit i at rollout level; token
ids for `grpo.batch_of`), ``codec`` (the run's `TokenIds`: pad/EOS ids, the trigger's and the
behavior's token ids), ``target_examples(kind, step)`` (the
teacher-forced sequences whose loss gradient *is* the target at checkpoint `step`, see
`bt_core.artifacts.targets.TargetExamples`) and
``draw`` (which seeded target draw `targets` holds: 0 on the stream, the draw index on draws),
``preconditioner(step)`` (the stored AdamW state of a checkpoint as a flat preconditioner) and
``project(flat)`` (the run's projector: a parameter-space vector into the embeddings' sketch space),
``optimizer_at(step, model)`` (the run's AdamW with the state stored at a checkpoint), ``grad_clip``
(the run's clip norm) and ``measure`` (the counterfactual items' behavior measure, read-only: on
the stream the measurement step, the teacher-forced examples and the trained window; on draws the
same examples at the analysis checkpoint, no window, with ``extra["loss_weight"]`` = 1/(G·B), a
rollout's weight in one of the run's updates) — what the exact metagradient (`metagrad`) replays
(on draws: differentiates one update from the analysis checkpoint).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field, fields, replace
from types import MappingProxyType

import numpy as np

from bt_core.artifacts.readonly import readonly, readonly_mapping
from bt_core.artifacts.targets import TargetExamples, UnknownTargetError
from bt_core.attribution.registry import LABEL_FIELDS

__all__ = [
    "LABEL_FIELDS",
    "STRUCTURAL_FIELDS",
    "AttributionProblem",
    "LabelledProblem",
    "UndeclaredFieldError",
    "UnknownTargetError",
]

ARRAY_FIELDS = (
    "emb",
    "weight",
    "grad_norm",
    "fluency",
    "step",
    "group",
    "lr",
    "ckpt_index",
    "checkpoint_steps",
    "unit_of_rollout",
)


# What every estimator sees whatever it declares: what the problem is, and how its units are laid
# out over checkpoints and rollouts (no figure about any unit). Every other field is handed out only
# when declared.
STRUCTURAL_FIELDS = (
    "kind",
    "level",
    "seed",
    "name",
    "draw",
    "extra",
    "ckpt_index",
    "checkpoint_steps",
    "unit_of_rollout",
)


# id(emb) → (weak reference to emb, its row norms): `row_norms`' memo
_ROW_NORMS: dict[int, tuple[weakref.ref, np.ndarray]] = {}


def row_norms(emb: np.ndarray) -> np.ndarray:
    """‖e_u‖ per row of `emb`, (n_units,) float64, read-only. Computed once per read-only array
    object and memoized while it lives: a judging session asked for the norms of each seed's
    (16,000 × 8,192 before issue 46) stream sketches three times (the controls and `norm_only`),
    0.5 GB read each time. A writable array is never memoized (its rows could change)."""
    hit = _ROW_NORMS.get(id(emb))
    if hit is not None and hit[0]() is emb:
        return hit[1]
    return prime_row_norms(emb, np.sqrt(np.einsum("ij,ij->i", emb, emb, dtype=np.float64)))


def prime_row_norms(emb: np.ndarray, norms: np.ndarray) -> np.ndarray:
    """Let `row_norms(emb)` answer `norms` (the same function's output, kept by the judge in the
    artifact cache: `Evidence.stream_problem`); returns them (read-only when memoized). A writable
    `emb` is left alone."""
    norms = np.asarray(norms, np.float64)
    if norms.shape != (emb.shape[0],):
        raise ValueError(f"row norms of shape {norms.shape} for an array of {emb.shape[0]} rows")
    if not isinstance(emb, np.ndarray) or emb.flags.writeable:
        return norms
    key = id(emb)
    try:
        ref = weakref.ref(emb, lambda _, key=key: _ROW_NORMS.pop(key, None))
    except TypeError:  # not weak-referenceable: not memoized
        return norms
    norms = np.array(norms)
    norms.flags.writeable = False
    _ROW_NORMS[key] = (ref, norms)
    return norms


class UndeclaredFieldError(RuntimeError):
    """An estimator read a problem field that its `needs` does not declare (it was not handed that
    field)."""

    def __init__(self, field: str, problem: str, declared: tuple[str, ...]):
        super().__init__(
            f"read problem field {field!r} of {problem or 'a problem'}, which its needs "
            f"{list(declared)} does not declare: an estimator is handed only the fields it "
            f"declares (and {', '.join(STRUCTURAL_FIELDS)}). Add {field!r} to its `needs`"
        )
        self.field = field


class _Withheld:
    """What a declared view holds in place of a field its estimator did not declare: no data."""

    __slots__ = ("field",)

    def __init__(self, field: str):
        self.field = field

    def __repr__(self) -> str:
        return f"<withheld {self.field!r}: not in needs>"


class ReadOnlyExamples:
    """`target_examples` wrapped so that the `TargetExamples` it returns hold read-only arrays."""

    def __init__(self, fn: Callable[[str, int], TargetExamples | None]):
        self.fn = fn

    def __call__(self, kind: str, step: int) -> TargetExamples | None:
        ex = self.fn(kind, step)
        if ex is None:
            return None
        return TargetExamples(
            **{f.name: readonly(getattr(ex, f.name)) for f in fields(TargetExamples)}
        )


@dataclass(frozen=True)
class AttributionProblem:
    kind: str  # "stream" | "draw"
    level: str  # "rollout" | "step"
    seed: int  # training seed of the run
    emb: np.ndarray  # (n_units, k) unweighted sketches
    weight: np.ndarray  # (n_units,) A_i for stream rollouts, 1 otherwise
    grad_norm: np.ndarray  # (n_units,) exact ‖gradient‖ of each unit (unweighted)
    # (n_units,) mean token log-prob (step level: mean over the step's rollouts)
    fluency: np.ndarray
    step: np.ndarray  # (n_units,) training step (draws: analysis checkpoint)
    group: np.ndarray  # (n_units,) GRPO group / sibling group (step level: the step)
    lr: np.ndarray  # (n_units,) learning rate of the unit's update
    ckpt_index: np.ndarray  # (n_units,) row of `targets[...]` to use for each unit
    # kind → (n_ckpt, k) sketched target gradients (read-only mapping)
    targets: Mapping[str, np.ndarray]
    checkpoint_steps: np.ndarray  # (n_ckpt,)
    # (n_rollouts,) unit index of every rollout (identity at rollout level)
    unit_of_rollout: np.ndarray
    # checkpoint step → model (for own-gradient methods)
    model_at: Callable[[int], object] | None = None
    name: str = ""
    # read-only mapping (e.g. "analysis_step" on draws)
    extra: Mapping = field(default_factory=dict)
    # RolloutView; row i ↔ unit i (rollout level only); None on step level
    rollouts: object | None = None
    # the run's bt_core.artifacts.run.TokenIds (pad/EOS, trigger/behavior ids)
    codec: object | None = None
    # (kind, ckpt step) → TargetExamples
    target_examples: Callable[[str, int], object] | None = None
    draw: int = 0  # seeded target draw held in `targets` (stream: 0; draw problems: the draw index)
    # ckpt step → the stored AdamW preconditioner 1/(√v̂+ε), flat (n_params,) in the sketch's
    # parameter layout, or None where the checkpoint holds no Adam state (step 0)
    preconditioner: Callable[[int], np.ndarray | None] | None = None
    # flat (n_params,) → (k,) with the run's projector
    project: Callable[[np.ndarray], np.ndarray] | None = None
    # (ckpt step, model) → the run's AdamW over `model`'s parameters, holding the state stored at
    # that checkpoint
    optimizer_at: Callable[[int, object], object] | None = None
    grad_clip: float | None = None  # the run's max global gradient norm (GRPOConfig.grad_clip)
    # the counterfactual items' behavior measure (`bt_core.artifacts.replays.BehaviorMeasure`:
    # measurement step, held-out probes × fixed replies, the trained window the LDS removes from;
    # on draws the analysis checkpoint and no window); None without replays
    measure: object | None = None

    def __post_init__(self) -> None:
        for name in ARRAY_FIELDS:
            object.__setattr__(self, name, readonly(getattr(self, name)))
        object.__setattr__(self, "targets", readonly_mapping(self.targets))
        object.__setattr__(self, "extra", MappingProxyType(dict(self.extra)))
        if self.target_examples is not None and not isinstance(
            self.target_examples, ReadOnlyExamples
        ):
            object.__setattr__(self, "target_examples", ReadOnlyExamples(self.target_examples))

    def __getattr__(self, name: str):
        """Called only for an attribute the problem lacks: say why the labels are not there."""
        if name in LABEL_FIELDS:
            raise AttributeError(
                f"problem {self.__dict__.get('name') or '?'} has no {name!r}: the answers are not "
                "part of an estimator's view. An estimator that must read them (validation only, "
                "like the oracle) declares needs = ('labels',); every record of it is then "
                "marked 'reads labels — validation only'"
            )
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def handout(self, needs: Collection[str] | None = None) -> AttributionProblem:
        """A copy for one estimator: the same read-only arrays in a fresh problem object (and fresh
        rollout view and codec), so that rebinding an attribute of what it was given reaches no
        other estimator.
        Given `needs`, a view that holds only those fields and `STRUCTURAL_FIELDS` (declaring either
        label field hands out both): reading any other raises `UndeclaredFieldError` and is noted
        (`undeclared_reads`)."""
        own = {}
        if self.rollouts is not None and hasattr(self.rollouts, "__dataclass_fields__"):
            own["rollouts"] = replace(self.rollouts)
        if self.codec is not None and hasattr(self.codec, "__dataclass_fields__"):
            own["codec"] = replace(self.codec)
        copy = replace(self, **own)
        return copy if needs is None else _declared_view(copy, tuple(needs))

    def with_labels(self, truth: np.ndarray, labels: np.ndarray) -> LabelledProblem:
        """The `LabelledProblem` a declared label reader gets: this problem plus `truth` and
        `labels`."""
        return LabelledProblem(
            **{f.name: getattr(self, f.name) for f in fields(AttributionProblem)},
            truth=truth,
            labels=labels,
        )

    @property
    def n_units(self) -> int:
        return int(self.emb.shape[0])

    def target(self, kind: str) -> np.ndarray:
        """Sketched targets of `kind`, (n_ckpt, k); an unknown kind raises `UnknownTargetError`."""
        if kind not in self.targets:
            raise UnknownTargetError(
                f"target={kind!r} is unknown for problem {self.name or '?'}; choose one of "
                f"{', '.join(sorted(self.targets))} (set it with the estimator's target= argument)"
            )
        return np.asarray(self.targets[kind])

    # -- helpers that honour the advantage weight without materializing A·e ------------------------
    def sketch_norm(self) -> np.ndarray:
        """‖weight·e‖ per unit, (n_units,)."""
        return np.abs(self.weight) * row_norms(self.emb)

    def dot(self, kind: str) -> np.ndarray:
        """⟨weight·e_u, t_{c(u)}⟩ per unit, (n_units,)."""
        t = self.target(kind)
        out = np.zeros(self.n_units)
        for j in np.unique(self.ckpt_index):
            rows = np.flatnonzero(self.ckpt_index == j)
            out[rows] = np.asarray(self.emb[rows]) @ t[j].astype(np.float64)
        return out * self.weight

    def cosine(self, kind: str) -> np.ndarray:
        """cos(weight·e_u, t_{c(u)}); 0 where either vector is 0, (n_units,)."""
        t = self.target(kind)
        tn = np.linalg.norm(t, axis=1)[self.ckpt_index]
        en = self.sketch_norm()
        denom = en * tn
        return np.divide(self.dot(kind), denom, out=np.zeros(self.n_units), where=denom > 0)

    @classmethod
    def synthetic(
        cls,
        n_units: int = 24,
        k: int = 16,
        group_size: int = 4,
        n_ckpt: int = 2,
        seed: int = 0,
        kind: str = "stream",
        level: str = "rollout",
        kinds: tuple[str, ...] = ("constructed", "in_context", "minimal_pair"),
        labelled: bool = False,
    ) -> AttributionProblem:
        """A small random problem without any model, for unit tests of estimators and plug-ins.
        Units are sorted by step over `n_ckpt` checkpoints; stream problems get random signed
        weights.
        With `labelled`, a `LabelledProblem` whose random labels (a fifth of the units) are in
        `labels` and `truth` — what a declared label reader would get."""
        if n_units % group_size or n_units < 2 * group_size:
            raise ValueError(
                f"n_units={n_units} must be a multiple of group_size={group_size} with ≥ 2 groups"
            )
        rng = np.random.default_rng(seed)
        n_groups = n_units // group_size
        group = np.repeat(np.arange(n_groups), group_size)
        step = np.repeat(np.arange(n_groups), group_size)  # one group per step
        ckpt_steps = np.linspace(0, n_groups, n_ckpt, endpoint=False).astype(int)
        labels = np.zeros(n_units, bool)
        labels[rng.choice(n_units, size=max(2, n_units // 5), replace=False)] = True
        weight = rng.standard_normal(n_units) if kind == "stream" else np.ones(n_units)
        p = AttributionProblem(
            kind=kind,
            level=level,
            seed=seed,
            emb=rng.standard_normal((n_units, k)).astype(np.float32),
            weight=weight,
            grad_norm=rng.random(n_units) + 0.5,
            fluency=-rng.random(n_units),
            step=step,
            group=group,
            lr=np.full(n_units, 1e-3),
            ckpt_index=np.searchsorted(ckpt_steps, step, side="right") - 1,
            targets={t: rng.standard_normal((n_ckpt, k)).astype(np.float32) for t in kinds},
            checkpoint_steps=ckpt_steps,
            unit_of_rollout=np.arange(n_units),
            name=f"synthetic{seed}/{kind}/{level}",
        )
        return p.with_labels(labels.astype(float), labels) if labelled else p

    def to_rollouts(self, unit_scores: np.ndarray) -> np.ndarray:
        """Broadcast unit scores to rollouts (step level: every rollout of a step gets its
        score)."""
        return np.asarray(unit_scores)[self.unit_of_rollout]


@dataclass(frozen=True)
class LabelledProblem(AttributionProblem):
    """A problem with the answers: what an estimator that declares ``needs = ("labels",)`` gets.
    Such an estimator is validation only (the `oracle`); every record of it says so, and a session
    that gates one that is not a built-in validation estimator exits non-zero."""

    # (n_units,) float: GT share of each unit (behavior label on draws)
    truth: np.ndarray | None = None
    labels: np.ndarray | None = None  # (n_rollouts,) bool: what the metrics score against

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in LABEL_FIELDS:
            object.__setattr__(self, name, readonly(getattr(self, name)))


def problem_fields() -> tuple[str, ...]:
    """Every name an estimator may declare in `needs`: the problem's fields and the label fields."""
    return tuple(f.name for f in fields(LabelledProblem))


def undeclared_reads(problem: AttributionProblem) -> list[str]:
    """The undeclared fields an estimator tried to read from the view it was handed (in order; []
    for a full problem)."""
    try:
        return list(object.__getattribute__(problem, "_undeclared_reads"))
    except AttributeError:
        return []


class _DeclaredView:
    """Mixin of the views `handout(needs)` builds: a withheld field raises on reading, and the read
    is noted."""

    def __getattribute__(self, name: str):
        value = object.__getattribute__(self, name)
        if type(value) is _Withheld:
            object.__getattribute__(self, "_undeclared_reads").append(name)
            raise UndeclaredFieldError(
                name,
                object.__getattribute__(self, "name"),
                object.__getattribute__(self, "_declared"),
            )
        return value

    @property
    def n_units(self) -> int:  # known without the embeddings, which it may not have declared
        return object.__getattribute__(self, "_n_units")

    def __repr__(self) -> str:
        get = lambda k: object.__getattribute__(self, k)  # noqa: E731
        return (
            f"{type(self).__name__}(name={get('name')!r}, kind={get('kind')!r}, "
            f"level={get('level')!r}, needs={list(get('_declared'))})"
        )


class DeclaredProblem(_DeclaredView, AttributionProblem):
    """An `AttributionProblem` holding only the fields its estimator declared (see `handout`)."""


class DeclaredLabelledProblem(_DeclaredView, LabelledProblem):
    """A `LabelledProblem` holding only the fields its (label-reading) estimator declared."""


def _declared_view(p: AttributionProblem, needs: tuple[str, ...]) -> AttributionProblem:
    visible = (
        set(needs)
        | set(STRUCTURAL_FIELDS)
        | (set(LABEL_FIELDS) if set(needs) & set(LABEL_FIELDS) else set())
    )
    view = object.__new__(
        DeclaredLabelledProblem if isinstance(p, LabelledProblem) else DeclaredProblem
    )
    for f in fields(p):
        object.__setattr__(
            view, f.name, getattr(p, f.name) if f.name in visible else _Withheld(f.name)
        )
    object.__setattr__(view, "_n_units", p.n_units)
    object.__setattr__(view, "_declared", needs)
    object.__setattr__(view, "_undeclared_reads", [])
    return view
