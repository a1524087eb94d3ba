"""The `Draw` artifact: one seeded set of fresh sibling groups at the analysis checkpoint, with
their sketches (built by `bt_core.draws.build`). Files: ``rollouts/``, the `Sketches` files,
``draw.json`` and ``effect.npy`` (the causal label: each sibling's one-step effect on the behavior
measure, an answer the attribution layer keeps from estimators like the behavior flag)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from bt_core.artifacts.readonly import readonly
from bt_core.artifacts.rollouts import RolloutTable
from bt_core.artifacts.sketches import Sketches
from bt_core.artifacts.store import load_array, verify_dir


class Draw:
    def __init__(self, d: Path):
        verify_dir(d)  # a draw loaded directly is checked like one loaded through the store
        self.rollouts = RolloutTable.load(d / "rollouts")
        self.sketches = Sketches.load(d)
        self.info = json.loads((d / "draw.json").read_text())
        self.effect: np.ndarray = readonly(load_array(d / "effect.npy"))  # (n,)

    @property
    def analysis_step(self) -> int:
        return int(self.info["analysis_step"])
