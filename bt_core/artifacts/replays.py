"""Counterfactual replays of a run, as loaders: the `Replay` / `Replays` artifacts that hold what
replaying the logged stream without a subset measured. Which subsets are removed (the plan) and the
trained window are `bt_core.counterfactual.plan`'s; `bt_core.counterfactual.replay` builds the
replays and `bt_core.pipeline.build_replays` caches them (docs/items.md, "Counterfactual ground
truth", says what they mean).

A replay directory (``replays/<key>``, the key hashes the run's key, the subset's identity and the
measure's config, so a different subset never reuses another's bytes) holds ``replay.json`` (the
spec's identity and the measured behavior) and ``removed.npy`` (the removed row indices); the
``full`` replay also holds ``measure/``, the teacher-forced sequences of the behavior measure
(`TargetExamples` columns).
A seed's replays are indexed by a ``replaysets/<key>`` directory (key: run key + the whole
`CounterfactualConfig`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bt_core.artifacts.store import load_array, verify_dir
from bt_core.artifacts.targets import TargetExamples


@dataclass(frozen=True)
class BehaviorMeasure:
    """The behavior measure of the replays: mean NLL of the behavior tokens in `examples`
    (teacher-forced, coef 1/n each) at checkpoint `step`. Its gradient at `step` is a target like
    any other. `window` (N,) bool: the trained window, the rollouts the LDS subsets remove from
    (None where not given)."""

    step: int
    examples: TargetExamples
    window: np.ndarray | None = None


class Replay:
    """One replay directory (verified against its manifest)."""

    def __init__(self, d: Path):
        self.path = Path(d)
        verify_dir(self.path)
        self.info: dict = json.loads((self.path / "replay.json").read_text())
        self.removed = np.asarray(load_array(self.path / "removed.npy"))

    @property
    def nll(self) -> float:
        """Mean NLL of the behavior tokens on the held-out probes at the measurement step."""
        return float(self.info["nll"])

    @property
    def s_b(self) -> float:
        """Greedy behavior rate on the held-out probes at the measurement step."""
        return float(self.info["s_b"])


class Replays:
    """Every replay of one seed, by plan name (a `replaysets/<key>` index directory: ``plan.json``
    maps each plan name to its replay's key in ``replays/``, ``window.npy`` the trained window).
    `delta(name)` is the change in the behavior measure, NLL(without the subset) − NLL(full):
    positive when the removed rollouts had taught the behavior."""

    def __init__(self, set_dir: Path):
        self.path = Path(set_dir)
        verify_dir(self.path)
        index: dict = json.loads((self.path / "plan.json").read_text())
        replays_root = self.path.parent.parent / "replays"
        self.keys: dict[str, str] = dict(index["keys"])
        self.by_name = {name: Replay(replays_root / key) for name, key in self.keys.items()}
        # (N,) where LDS subsets come from
        self.window = np.asarray(load_array(self.path / "window.npy"), bool)
        self.n_rollouts = int(self.window.size)
        full = self.by_name["full"]
        self.measure = BehaviorMeasure(
            int(full.info["measure_step"]),
            TargetExamples(
                **{
                    f: np.asarray(load_array(full.path / "measure" / f"{f}.npy"))
                    for f in TargetExamples.__dataclass_fields__
                }
            ),
            self.window,
        )

    def __getitem__(self, name: str) -> Replay:
        if name not in self.by_name:
            raise KeyError(f"no replay {name!r}; replays: {', '.join(self.by_name)}")
        return self.by_name[name]

    def names(self, prefix: str) -> list[str]:
        """Plan names starting with `prefix` + '_' (e.g. 'lds', 'random'), in plan order."""
        return [n for n in self.by_name if n.startswith(prefix + "_")]

    def baseline(self, name: str) -> str:
        """The replay `name` is compared with: ``full_f64`` for a float64 replay, else ``full``."""
        return "full_f64" if self[name].info.get("dtype", "float32") == "float64" else "full"

    def delta(self, name: str) -> float:
        """NLL(`name`'s subset removed or reweighted) − NLL(its baseline), at the measure step."""
        return self[name].nll - self[self.baseline(name)].nll

    def delta_s_b(self, name: str) -> float:
        """Drop in s_b, s_b(full) − s_b(without): positive when the behavior weakened."""
        return self["full"].s_b - self[name].s_b

    def indicators(self, prefix: str = "lds") -> np.ndarray:
        """(M, N) bool: row m flags the rollouts subset m removed."""
        names = self.names(prefix)
        out = np.zeros((len(names), self.n_rollouts), bool)
        for m, name in enumerate(names):
            out[m, self[name].removed] = True
        return out
