"""The `Targets` artifact: sketched target gradients per checkpoint and seeded draw, the
teacher-forced examples that define them, and the token-level alignment rows (written by
`bt_core.targets.build`).

Layout: ``steps.npy`` (n_ckpt,), ``report.json`` and one ``draw{d}/`` per draw holding
``<kind>.npy`` (n_ckpt, k), ``<kind>_norm.npy`` (n_ckpt,) exact ‖t‖, ``examples_<kind>/``
(`TargetExamples` columns plus ``ckpt.npy``, the row of `steps` each example belongs to) and
``token/`` (`TokenLevel`). Draw 0 is the target set of the training stream.

The kinds are defined here, with the artifact that holds them, so that estimators can check a
`target=` argument without importing the builders (torch, the tokenizer, the training stack).

Token level (PAPER_NOTES P4): the cosine of the whole-parameter behavior-token gradient with each
target, per sampled behavior response (definition in `bt_core.targets.token_level`). Stored per draw
in ``token/``: ``ckpt.npy`` (n,) checkpoint row of each kept response, ``prompt.npy`` (n,) its
prompt's index (`bt_core.targets.examples.behavior_prompts`), ``cos_<kind>.npy`` (n,),
``grad_norm.npy`` (n,) ‖q_i‖, ``target_norm_<kind>.npy`` (n_ckpt,) exact ‖t‖ and ``responses/`` (the
responses, `TargetExamples`).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import numpy as np

from bt_core.artifacts.store import load_array, save_array, verify_dir
from bt_core.metrics import cluster_bootstrap_mean_ci

# The target kinds (PAPER_NOTES "Targets"); what each one is: `bt_core.targets.examples`.
TARGET_KINDS = ("constructed", "in_context", "minimal_pair")


class UnknownTargetError(ValueError):
    """An estimator asked for a target kind that does not exist or the problem does not hold."""


def check_kind(kind: str) -> str:
    """Return `kind` if it is a target kind, else raise `UnknownTargetError` listing the kinds."""
    if kind not in TARGET_KINDS:
        raise UnknownTargetError(
            f"target={kind!r} is unknown; choose one of {', '.join(TARGET_KINDS)}"
        )
    return kind


@dataclass(frozen=True)
class TargetExamples:
    """Teacher-forced sequences defining a target, t = Σ_j coef_j ∇(−m_j). Shapes: n rows; prompts
    and replies right-padded; `mask` (n, Lr) flags the reply positions counted in m_j."""

    prompts: np.ndarray  # (n, Lp) int32
    prompt_len: np.ndarray  # (n,) int32
    replies: np.ndarray  # (n, Lr) int32
    reply_len: np.ndarray  # (n,) int32
    mask: np.ndarray  # (n, Lr) bool
    coef: np.ndarray  # (n,) float64

    def __len__(self) -> int:
        return int(self.coef.shape[0])

    @classmethod
    def build(
        cls,
        prompts: list[list[int]],
        replies: list[list[int]],
        masks: list[list[bool]],
        coef: list[float],
    ) -> TargetExamples:
        def pad(seqs, dtype):
            arr = np.zeros((len(seqs), max([len(x) for x in seqs] + [1])), dtype)
            for i, x in enumerate(seqs):
                arr[i, : len(x)] = x
            return arr

        return cls(
            pad(prompts, np.int32),
            np.array([len(p) for p in prompts], np.int32),
            pad(replies, np.int32),
            np.array([len(r) for r in replies], np.int32),
            pad(masks, bool),
            np.asarray(coef, np.float64),
        )

    def save(self, d: Path, ckpt: np.ndarray) -> None:
        d.mkdir(parents=True, exist_ok=True)
        for f in fields(self):
            save_array(d / f"{f.name}.npy", getattr(self, f.name))
        save_array(d / "ckpt.npy", np.asarray(ckpt, np.int32))

    @classmethod
    def concat(cls, parts: list[TargetExamples]) -> TargetExamples:
        out = {}
        for f in fields(cls):
            arrays = [getattr(p, f.name) for p in parts]
            if arrays[0].ndim == 2:
                width = max(a.shape[1] for a in arrays)
                arrays = [np.pad(a, ((0, 0), (0, width - a.shape[1]))) for a in arrays]
            out[f.name] = np.concatenate(arrays)
        return cls(**out)

    def select(self, rows: np.ndarray) -> TargetExamples:
        return TargetExamples(
            **{f.name: np.asarray(getattr(self, f.name))[rows] for f in fields(self)}
        )


@dataclass(frozen=True)
class Alignment:
    """Mean cos(q_i, t) over kept behavior responses at one checkpoint, with its bootstrap CI over
    responses."""

    kind: str
    step: int
    mean: float
    ci_lo: float
    ci_hi: float
    n: int  # kept responses with a defined cosine
    n_prompts: int  # distinct prompts among them

    def as_dict(self) -> dict:
        return asdict(self)


class TokenLevel:
    """Stored token-level rows of one draw (the definition: `bt_core.targets.token_level`)."""

    def __init__(self, d: Path, steps: np.ndarray, kinds: tuple[str, ...]):
        self.path = Path(d)
        self.steps = np.asarray(steps)
        self.ckpt = np.asarray(load_array(d / "ckpt.npy"))
        self.prompt = np.asarray(load_array(d / "prompt.npy"))
        self.grad_norm = np.asarray(load_array(d / "grad_norm.npy"))
        self.cos = {k: np.asarray(load_array(d / f"cos_{k}.npy")) for k in kinds}
        self.target_norm = {k: np.asarray(load_array(d / f"target_norm_{k}.npy")) for k in kinds}

    @classmethod
    def load(cls, d: Path, steps: np.ndarray) -> TokenLevel:
        return cls(d, steps, TARGET_KINDS)

    def responses(self, step: int) -> TargetExamples | None:
        """The kept behavior responses at checkpoint `step` (mask = the behavior positions), in row
        order."""
        d = self.path / "responses"
        if not d.exists():
            return None
        rows = np.flatnonzero(np.asarray(load_array(d / "ckpt.npy")) == self._row(step))
        cols = {
            f.name: np.asarray(load_array(d / f"{f.name}.npy"))[rows]
            for f in fields(TargetExamples)
        }
        return TargetExamples(**cols) if rows.size else None

    def _row(self, step: int) -> int:
        hit = np.flatnonzero(self.steps == step)
        if hit.size == 0:
            raise KeyError(f"no checkpoint at step {step}; checkpoints: {self.steps.tolist()}")
        return int(hit[0])

    def cosines(self, kind: str, step: int) -> tuple[np.ndarray, np.ndarray]:
        """(cos, prompt) of the kept responses at checkpoint `step` with a defined cosine: (n,),
        (n,)."""
        j = self._row(step)
        if kind not in self.cos:
            raise KeyError(
                f"target kind {kind!r} has no token-level data; kinds: {sorted(self.cos)}"
            )
        sel = (self.ckpt == j) & np.isfinite(self.cos[kind])
        return self.cos[kind][sel], self.prompt[sel]

    def alignment(
        self, kind: str, step: int, n_boot: int = 1000, alpha: float = 0.05, seed: int = 0
    ) -> Alignment:
        """Mean cosine and its percentile bootstrap CI, each response its own resampling unit (the
        reference's CI)."""
        cos, prompt = self.cosines(kind, step)
        lo, hi = cluster_bootstrap_mean_ci(
            cos, np.arange(cos.size), n_boot=n_boot, alpha=alpha, seed=seed
        )
        mean = float(cos.mean()) if cos.size else math.nan
        return Alignment(kind, int(step), mean, lo, hi, int(cos.size), int(np.unique(prompt).size))


class Targets:
    """Sketched targets per checkpoint and draw, their examples, and the token-level alignment.

    `vectors[kind]` / `norms[kind]` are draw 0's (the stream's), (n_ckpt, k) / (n_ckpt,); a zero row
    means the target could not be built there (e.g. no sampled reply showed the behavior)."""

    def __init__(self, d: Path):
        self.path = Path(d)
        # loaded directly or through the store, the files match their manifest
        verify_dir(self.path)
        self.steps = np.asarray(load_array(self.path / "steps.npy"))
        self.report = json.loads((self.path / "report.json").read_text())
        self.n_draws = int(self.report["n_draws"])
        self.kinds = tuple(self.report["kinds"])
        self.vectors = self.for_draw(0)
        self.norms = self.norms_for_draw(0)
        self._token: dict[int, object] = {}
        self._examples: dict[tuple[int, str], dict[str, np.ndarray] | None] = {}

    def _draw_dir(self, draw: int) -> Path:
        if not 0 <= draw < self.n_draws:
            raise IndexError(
                f"draw={draw} is out of range: targets were built for {self.n_draws} draw(s); "
                "rebuild with more draws (DrawConfig.n_draws)"
            )
        return self.path / f"draw{draw}"

    def for_draw(self, draw: int) -> dict[str, np.ndarray]:
        """kind → (n_ckpt, k) sketched targets of seeded draw `draw`."""
        d = self._draw_dir(draw)
        return {k: load_array(d / f"{k}.npy") for k in self.kinds}

    def norms_for_draw(self, draw: int) -> dict[str, np.ndarray]:
        d = self._draw_dir(draw)
        return {k: np.asarray(load_array(d / f"{k}_norm.npy")) for k in self.kinds}

    def examples(self, kind: str, step: int, draw: int = 0) -> TargetExamples | None:
        """The teacher-forced sequences of target `kind` at checkpoint `step` (None if not built
        there)."""
        check_kind(kind)
        j = self.checkpoint_row(step)
        cols = self._example_columns(kind, draw)
        if cols is None:
            return None
        rows = np.flatnonzero(cols["ckpt"] == j)
        if rows.size == 0:
            return None
        return TargetExamples(**{f.name: cols[f.name][rows] for f in fields(TargetExamples)})

    def _example_columns(self, kind: str, draw: int) -> dict[str, np.ndarray] | None:
        """The stored example columns of (kind, draw), read once per object: a judging session asks
        for them per problem and checkpoint (2,730 times in a warm default --estimator=cosine
        session, each reading whole files), and they are small (token ids of the examples)."""
        key = (draw, kind)
        if key not in self._examples:
            d = self._draw_dir(draw) / f"examples_{kind}"
            self._examples[key] = (
                {
                    name: np.asarray(load_array(d / f"{name}.npy"))
                    for name in ("ckpt", *(f.name for f in fields(TargetExamples)))
                }
                if d.exists()
                else None
            )
        return self._examples[key]

    def token_level(self, draw: int = 0):
        """The stored token-level data of `draw` (`TokenLevel`)."""
        if draw not in self._token:
            self._token[draw] = TokenLevel.load(self._draw_dir(draw) / "token", self.steps)
        return self._token[draw]

    def token_alignment(
        self,
        kind: str,
        step: int,
        draw: int = 0,
        n_boot: int = 1000,
        alpha: float = 0.05,
        seed: int = 0,
    ):
        """Mean cosine of the behavior-token gradient with target `kind` at checkpoint `step`, with
        a bootstrap CI over responses; see `TokenLevel`."""
        return self.token_level(draw).alignment(
            check_kind(kind), step, n_boot=n_boot, alpha=alpha, seed=seed
        )

    def checkpoint_row(self, step: int) -> int:
        hit = np.flatnonzero(self.steps == step)
        if hit.size == 0:
            raise KeyError(f"no checkpoint at step {step}; checkpoints: {self.steps.tolist()}")
        return int(hit[0])

    def index_of(self, steps: np.ndarray) -> np.ndarray:
        """Index of the greatest checkpoint ≤ each step."""
        return np.searchsorted(self.steps, steps, side="right") - 1
