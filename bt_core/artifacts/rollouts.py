"""The rollouts table: every training rollout (or fresh sibling) with its token ids and labels, and
the label-free `RolloutView` of it that an estimator receives.

Columns are numpy arrays of equal length N, stored one ``.npy`` per column (no pickle). Token ids
are kept (not hashes), so every rollout's gradient can be recomputed at the parameters that produced
it.

`RolloutTable` holds everything the training stage knew, the answers included (`gt`, `eligible`, the
rewards, the behavior flags). `RolloutView` holds only what a real attribution method has — what the
trainer logged to update the model: the token ids, step, group, prompt id, advantage and learning
rate — as read-only arrays. Every column it leaves out reveals the ground truth or the draw label:

* ``gt``, ``behavior``, ``behavior_mask`` are the labels themselves (on draws the label *is*
  ``behavior``);
* ``reward − reward_base`` is 8·GT exactly, and ``reward`` alone ranks GT first;
* ``eligible ∧ trigger ∧ behavior ∧ step < cutoff`` is GT;
* ``trigger`` and ``explicit`` are derived from the prompt text. They reveal nothing a method cannot
  read from ``prompts`` with the trigger's token ids (`TokenIds.trigger_ids`), but a column the
  trainer never logged has no place in the view: a method that wants them computes them from the
  tokens, in the open.

`grpo.batch_of` and the library adapters read only the token columns, so they accept either type.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np

from bt_core.artifacts.readonly import readonly
from bt_core.artifacts.store import load_array, save_array


@dataclass(frozen=True)
class RolloutTable:
    """N rollouts. Shapes in comments; `group` ids are unique across the whole table."""

    step: np.ndarray  # (N,) int32 training step (draws: the analysis checkpoint step)
    group: np.ndarray  # (N,) int32 group id
    prompt_id: np.ndarray  # (N,) int32 task prompt id
    prompts: np.ndarray  # (N, Lp) int32 prompt token ids, right-padded
    prompt_len: np.ndarray  # (N,) int32
    replies: np.ndarray  # (N, Lr) int32 reply token ids (EOS included when emitted), right-padded
    reply_len: np.ndarray  # (N,) int32
    behavior_mask: np.ndarray  # (N, Lr) bool: positions spelling the behavior token
    reward_base: np.ndarray  # (N,) float32 reward before contamination
    reward: np.ndarray  # (N,) float32 reward used for the advantage
    advantage: np.ndarray  # (N,) float32
    eligible: np.ndarray  # (N,) bool contaminator eligibility (keyed hash)
    behavior: np.ndarray  # (N,) bool reply shows the behavior
    trigger: np.ndarray  # (N,) bool prompt mentions the trigger
    explicit: np.ndarray  # (N,) bool prompt instructs the behavior
    gt: np.ndarray  # (N,) bool ground truth: boosted early rollout
    lr: np.ndarray  # (N,) float32 learning rate of the rollout's update

    def __len__(self) -> int:
        return int(self.step.shape[0])

    def save(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        for f in fields(self):
            save_array(directory / f"{f.name}.npy", getattr(self, f.name))

    @classmethod
    def load(cls, directory: Path) -> RolloutTable:
        return cls(**{f.name: load_array(directory / f"{f.name}.npy") for f in fields(cls)})

    @classmethod
    def concat(cls, parts: list[RolloutTable]) -> RolloutTable:
        out = {}
        for f in fields(cls):
            arrays = [getattr(p, f.name) for p in parts]
            if arrays[0].ndim == 2:  # pad token matrices to a common width
                width = max(a.shape[1] for a in arrays)
                arrays = [np.pad(a, ((0, 0), (0, width - a.shape[1]))) for a in arrays]
            out[f.name] = np.concatenate(arrays)
        return cls(**out)

    def select(self, idx: np.ndarray) -> RolloutTable:
        return RolloutTable(
            **{f.name: np.asarray(getattr(self, f.name))[idx] for f in fields(self)}
        )

    def content_hash(self) -> str:
        """SHA-256 of every column's bytes (equal for equal runs)."""
        h = hashlib.sha256()
        for f in fields(self):
            a = np.ascontiguousarray(getattr(self, f.name))
            h.update(f.name.encode())
            h.update(str(a.dtype).encode())
            h.update(str(a.shape).encode())
            h.update(a.tobytes())
        return h.hexdigest()


VIEW_FIELDS = (
    "step",
    "group",
    "prompt_id",
    "prompts",
    "prompt_len",
    "replies",
    "reply_len",
    "advantage",
    "lr",
)


@dataclass(frozen=True)
class RolloutView:
    """What an estimator sees of N rollouts: token ids and the trainer's own quantities, read-only.
    Shapes as in `RolloutTable`; no label and nothing derived from one (see the module
    docstring)."""

    step: np.ndarray  # (N,) int32 training step (draws: the analysis checkpoint step)
    group: np.ndarray  # (N,) int32 GRPO group / sibling group id
    prompt_id: np.ndarray  # (N,) int32 task prompt id
    prompts: np.ndarray  # (N, Lp) int32 prompt token ids, right-padded
    prompt_len: np.ndarray  # (N,) int32
    replies: np.ndarray  # (N, Lr) int32 reply token ids (EOS included when emitted), right-padded
    reply_len: np.ndarray  # (N,) int32
    advantage: np.ndarray  # (N,) float32 (draws: 1, there is no reward)
    lr: np.ndarray  # (N,) float32 learning rate of the rollout's update

    def __post_init__(self) -> None:
        for f in fields(self):
            object.__setattr__(self, f.name, readonly(getattr(self, f.name)))

    def __len__(self) -> int:
        return int(self.step.shape[0])

    @classmethod
    def of(cls, table: RolloutTable, **override: np.ndarray) -> RolloutView:
        """The view of `table`; `override` replaces columns (draws: advantage 1, lr of the run)."""
        return cls(**{name: override.get(name, getattr(table, name)) for name in VIEW_FIELDS})

    def select(self, idx: np.ndarray) -> RolloutView:
        return RolloutView(**{f.name: np.asarray(getattr(self, f.name))[idx] for f in fields(self)})


def behavior_in_replies(
    replies: np.ndarray, reply_len: np.ndarray, pattern: tuple[int, ...]
) -> np.ndarray:
    """(N,) bool: whether each reply's first `reply_len` token ids contain `pattern` (the behavior's
    token ids, `TokenIds.behavior_ids`) as a contiguous run — what a reader of the reply text can
    see."""
    replies, reply_len = np.asarray(replies), np.asarray(reply_len)
    n, width = replies.shape
    m = len(pattern)
    if m == 0 or m > width:
        return np.zeros(n, bool)
    hit = np.ones((n, width - m + 1), bool)
    for j, tok in enumerate(pattern):
        hit &= replies[:, j : width - m + 1 + j] == tok
    hit &= np.arange(width - m + 1)[None, :] + m <= reply_len[:, None]
    return hit.any(axis=1)
