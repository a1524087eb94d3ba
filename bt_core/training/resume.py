"""Resumable training: a journal of complete checkpoints kept in the run's work directory.

The store gives a resumable build a stable work directory (``.<key>.partial/``, owned under the
key's file lock) with the artifact being assembled in ``artifact/``. Training writes each
checkpoint's model and AdamW state into ``artifact/checkpoints/`` as usual; the journal adds, per
checkpoint step c, a *segment* ``journal/ckpt_<c>/`` holding what else is needed to continue exactly
from c:

    rollouts/          the rollouts of the steps since the previous checkpoint (one .npy per column)
    generator.npy      the sampling generator's state before step c's generation (uint8)
    segment.json       step, probes so far, extra fields (SFT loss), and the sha256 of every file of
                       the segment and of checkpoint c's two safetensors files

A segment is written under a temporary name and renamed: it exists only once complete. On restart
the journal accepts the longest run of consecutive segments whose files all match their hashes,
deletes everything else (later checkpoints, half-written files), and training continues from the
last accepted checkpoint with the same parameters, optimizer state, generator state and prompt order
— so the finished run is byte-identical to an uninterrupted one (tests/test_reliability.py kills it
with SIGKILL to show it).
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from bt_core.artifacts.rollouts import RolloutTable
from bt_core.artifacts.store import ArtifactError, load_array, save_array, sha256_file
from bt_core.faults import fault_point

JOURNAL = "journal"
SEGMENT = "segment.json"


def ckpt_name(step: int) -> str:
    return f"step_{step:06d}"


def ckpt_files(out: Path, step: int) -> list[Path]:
    """Model and optimizer files of checkpoint `step` (the run directory's layout)."""
    base = out / "checkpoints" / ckpt_name(step)
    return [base.with_suffix(".safetensors"), Path(str(base) + ".optim.safetensors")]


@dataclass
class Restored:
    """What a resumed training needs besides the model and optimizer tensors."""

    step: int  # the checkpoint to continue from (its update not yet applied)
    parts: list[RolloutTable]  # rollouts of every step before `step`, one table per segment
    probes: list[dict]  # probe evaluations of every checkpoint ≤ `step`
    extra: dict = field(default_factory=dict)  # fields the summary needs (e.g. the SFT loss)
    generator_state: np.ndarray | None = None  # (n,) uint8


class TrainJournal:
    """Commits and restores checkpoint segments. With `work=None` (no resumable directory, e.g. a
    direct `train_run` call) every method is a no-op and training runs from scratch."""

    def __init__(self, work: Path | None, out: Path, steps: list[int]):
        self.dir = None if work is None else Path(work) / JOURNAL
        self.out = Path(out)
        self.steps = list(steps)  # all checkpoint steps, ascending

    # ------------------------------------------------------------------ commit
    def commit(
        self,
        step: int,
        new_parts: list[RolloutTable],
        gen: torch.Generator,
        probes: list[dict],
        extra: dict,
    ) -> None:
        """Record checkpoint `step` (its model/optimizer files already written) as complete."""
        if self.dir is None:
            return
        self.dir.mkdir(exist_ok=True)
        final = self.dir / ckpt_name(step)
        tmp = self.dir / f".{ckpt_name(step)}.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        if new_parts:
            RolloutTable.concat(new_parts).save(tmp / "rollouts")
        save_array(tmp / "generator.npy", gen.get_state().numpy())
        files = {
            str(p.relative_to(tmp)): sha256_file(p) for p in sorted(tmp.rglob("*")) if p.is_file()
        }
        ckpt = {p.name: sha256_file(p) for p in ckpt_files(self.out, step)}
        meta = {"step": step, "probes": probes, "extra": extra, "files": files, "checkpoint": ckpt}
        (tmp / SEGMENT).write_text(json.dumps(meta, indent=1))  # keep key order: probes.json bytes
        fault_point("train.segment")
        os.rename(tmp, final)

    # ------------------------------------------------------------------ restore
    def restore(self) -> Restored | None:
        """The last complete checkpoint, or None (start from scratch). Removes everything past
        it."""
        if self.dir is None:
            return None
        accepted: list[dict] = []
        if self.dir.exists():
            for step in self.steps:
                meta = self._valid_segment(step)
                if meta is None:
                    break
                accepted.append(meta)
        self._prune({m["step"] for m in accepted})
        if not accepted:
            return None
        last = accepted[-1]
        parts = [
            RolloutTable.load(self.dir / ckpt_name(m["step"]) / "rollouts")
            for m in accepted
            if (self.dir / ckpt_name(m["step"]) / "rollouts").exists()
        ]
        gen = np.asarray(
            load_array(self.dir / ckpt_name(last["step"]) / "generator.npy", mmap=False)
        )
        return Restored(last["step"], parts, last["probes"], last["extra"], gen)

    def _valid_segment(self, step: int) -> dict | None:
        seg = self.dir / ckpt_name(step)
        try:
            meta = json.loads((seg / SEGMENT).read_text())
        except (OSError, json.JSONDecodeError):
            return None
        checks = [(seg / rel, h) for rel, h in meta.get("files", {}).items()]
        checks += [(p, meta.get("checkpoint", {}).get(p.name)) for p in ckpt_files(self.out, step)]
        try:
            ok = meta.get("step") == step and all(
                p.is_file() and sha256_file(p) == h for p, h in checks
            )
        except OSError:
            ok = False
        return meta if ok else None

    def _prune(self, keep: set[int]) -> None:
        """Delete journal entries and artifact files that are not part of the accepted prefix."""
        if self.dir.exists():
            for p in self.dir.iterdir():
                if not (p.name.startswith("step_") and int(p.name[5:]) in keep):
                    _remove(p)
        keep_files = {p for s in keep for p in ckpt_files(self.out, s)}
        for p in sorted(self.out.rglob("*"), reverse=True):
            if p.is_file() and p not in keep_files:
                p.unlink()
            elif p.is_dir() and not any(p.iterdir()) and p.name != "checkpoints":
                p.rmdir()

    @staticmethod
    def load_state(
        restored: Restored, model, opt: torch.optim.Optimizer, gen: torch.Generator, out: Path
    ) -> None:
        """Put checkpoint `restored.step`'s parameters, optimizer and generator state in place."""
        from bt_core.training.model import load_optimizer, load_params

        model_file, opt_file = ckpt_files(out, restored.step)
        try:
            load_params(model, model_file)
            load_optimizer(opt, opt_file)
        # hashes matched, so the code changed shape
        except (ValueError, KeyError, RuntimeError) as e:
            raise ArtifactError(
                f"cannot resume from {model_file} ({e}); delete {out.parent} or rerun "
                "with --bt-rebuild"
            ) from e
        gen.set_state(torch.from_numpy(np.ascontiguousarray(restored.generator_state)))


def _remove(p: Path) -> None:
    if p.is_dir():
        shutil.rmtree(p, ignore_errors=True)
    else:
        p.unlink(missing_ok=True)
