"""`SeedArtifacts`: everything built for one training seed, as the attribution layer reads it."""

from __future__ import annotations

from dataclasses import dataclass

from bt_core.artifacts.draws import Draw
from bt_core.artifacts.replays import Replays
from bt_core.artifacts.run import Run
from bt_core.artifacts.sketches import Sketches
from bt_core.artifacts.targets import Targets


@dataclass
class SeedArtifacts:
    run: Run
    sketches: Sketches
    targets: Targets
    draws: list[Draw]
    # artifact name (run, sketches, targets, draw<i>, control, replays) → cache key
    keys: dict[str, str]
    replays: Replays | None = None  # counterfactual replays (None when the session built none)
    # the control run: the same config and seed trained with the contaminator's bonus at 0 (built
    # with the replays; None when the session built none)
    control: Run | None = None
