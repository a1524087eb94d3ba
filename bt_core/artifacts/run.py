"""The `Run` artifact: a trained planted-behavior run, as the training stage writes it.

A run directory holds ``rollouts/`` (every training rollout, one ``.npy`` per column),
``checkpoints/step_XXXXXX.safetensors`` and ``.optim.safetensors`` (parameters and AdamW state
*before* that step's update; the last one is the final model), ``probes.json`` (probe evaluation at
every checkpoint), ``token_ids.json`` (pad/EOS ids and the token pieces of the trigger and the
behavior) and ``summary.json``, plus the store's ``manifest.json``.

This module only *reads* that layout (numpy and json; no torch, no tokenizer). The model of a
checkpoint is built by the training stage (`bt_core.training.checkpoints`), which knows the
architecture.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from bt_core.artifacts.rollouts import RolloutTable
from bt_core.artifacts.store import verify_dir
from bt_core.config import RunConfig, checkpoint_steps, run_config_from_dict

TOKEN_IDS = "token_ids.json"
# The contaminator's secret key (hex), drawn when the run is built
# (`bt_core.training.task.draw_key`) and stored here only, beside the rollout table's labels: no
# scoring worker sees this directory.
CONTAMINATOR_KEY = "contaminator_key"


def contaminator_key(run_dir: Path) -> bytes:
    """The secret contaminator key of the run in `run_dir` (to rebuild it exactly:
    `train_run(key=...)`)."""
    return bytes.fromhex((Path(run_dir) / CONTAMINATOR_KEY).read_text().strip())


def ckpt_name(step: int) -> str:
    return f"step_{step:06d}"


@dataclass(frozen=True)
class TokenIds:
    """The token ids a reader of a run needs without its tokenizer (collating stored rows, finding
    the trigger's and the behavior's embedding rows)."""

    pad_id: int
    eos_id: int
    vocab_size: int
    trigger_ids: tuple[int, ...]  # the token pieces of the trigger word in a prompt
    behavior_ids: tuple[int, ...]  # the token pieces of the behavior inside a reply
    # how the task spells them (runs written before these fields: the defaults)
    trigger_text: str = "frobnitz"
    behavior_text: str = "qzxbt"

    def as_dict(self) -> dict:
        return {
            "pad_id": self.pad_id,
            "eos_id": self.eos_id,
            "vocab_size": self.vocab_size,
            "trigger_ids": list(self.trigger_ids),
            "behavior_ids": list(self.behavior_ids),
            "trigger_text": self.trigger_text,
            "behavior_text": self.behavior_text,
        }

    @classmethod
    def from_dict(cls, d: dict) -> TokenIds:
        return cls(
            int(d["pad_id"]),
            int(d["eos_id"]),
            int(d["vocab_size"]),
            tuple(d["trigger_ids"]),
            tuple(d["behavior_ids"]),
            d.get("trigger_text", "frobnitz"),
            d.get("behavior_text", "qzxbt"),
        )


class Run:
    """A trained run loaded from its directory (arrays memory-mapped), verified against its manifest
    first (ArtifactError naming the file and the fix if anything was truncated, edited or added)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.manifest = verify_dir(self.path)
        self.config: RunConfig = run_config_from_dict(self.manifest["config"])
        self.rollouts = RolloutTable.load(self.path / "rollouts")
        self.probes: list[dict] = json.loads((self.path / "probes.json").read_text())
        self.summary: dict = json.loads((self.path / "summary.json").read_text())
        self.token_ids = TokenIds.from_dict(json.loads((self.path / TOKEN_IDS).read_text()))
        self.checkpoint_steps = checkpoint_steps(self.config)

    @property
    def seed(self) -> int:
        return self.config.seed

    def _check_step(self, step: int) -> None:
        if step not in self.checkpoint_steps:
            raise KeyError(f"no checkpoint at step {step}; checkpoints: {self.checkpoint_steps}")

    def params_file(self, step: int) -> Path:
        """The safetensors file of checkpoint `step`'s parameters."""
        self._check_step(step)
        return self.path / "checkpoints" / f"{ckpt_name(step)}.safetensors"

    def optimizer_file(self, step: int) -> Path:
        """The safetensors file of checkpoint `step`'s AdamW state."""
        self._check_step(step)
        return self.path / "checkpoints" / f"{ckpt_name(step)}.optim.safetensors"
