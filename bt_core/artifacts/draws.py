"""The `Draw` artifact: one seeded set of fresh sibling groups at the analysis checkpoint, with their
sketches (built by `bt_core.draws.build`). Files: ``rollouts/``, the `Sketches` files, ``draw.json``."""

from __future__ import annotations

import json
from pathlib import Path

from bt_core.artifacts.rollouts import RolloutTable
from bt_core.artifacts.sketches import Sketches
from bt_core.artifacts.store import verify_dir


class Draw:
    def __init__(self, d: Path):
        verify_dir(d)  # a draw loaded directly is checked like one loaded through the store
        self.rollouts = RolloutTable.load(d / "rollouts")
        self.sketches = Sketches.load(d)
        self.info = json.loads((d / "draw.json").read_text())

    @property
    def analysis_step(self) -> int:
        return int(self.info["analysis_step"])
