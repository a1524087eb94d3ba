"""The rollouts table: every training rollout (or fresh sibling) with its token ids and labels.

Columns are numpy arrays of equal length N, stored one ``.npy`` per column (no pickle). Token ids are
kept (not hashes), so every rollout's gradient can be recomputed at the parameters that produced it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np

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
        return RolloutTable(**{f.name: np.asarray(getattr(self, f.name))[idx] for f in fields(self)})

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
