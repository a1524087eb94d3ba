"""The `Sketches` artifact: gradient embeddings of one rollout set (the training stream or a draw),
as the gradient stage writes them (`bt_core.gradients.sketch`). Arrays are memory-mapped, read-only.

Files: ``emb.npy`` (N, k), ``grad_norm.npy`` (N,), ``fluency.npy`` (N,), ``report.json``; on the
stream also ``step_emb.npy`` (S, k), ``step_norm.npy`` (S,) and ``steps.npy`` (S,).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bt_core.artifacts.store import load_array, verify_dir


@dataclass
class Sketches:
    """Embeddings of one rollout set. Row i ↔ rollout i of its table."""

    emb: np.ndarray  # (N, k) float32 sketch of ∇(−ℓ_i) at the rollout's own parameters
    grad_norm: np.ndarray  # (N,) exact ‖∇(−ℓ_i)‖
    fluency: np.ndarray  # (N,) ℓ_i = mean reply-token log-prob at the rollout's own parameters
    step_emb: np.ndarray | None  # (S, k) sketch of each step's batch gradient ∇L_s (stream only)
    step_norm: np.ndarray | None  # (S,) exact ‖∇L_s‖
    steps: np.ndarray | None  # (S,) step ids of step_emb rows
    report: dict  # replay check, coverage (timings are in the artifact's manifest)
    path: Path | None = None  # the artifact directory (its manifest holds the SketchConfig)

    @classmethod
    def load(cls, d: Path, verify: bool = True) -> Sketches:
        """Load (memory-mapped) after checking `d` against its manifest; `verify=False` only for a
        directory written outside the store (e.g. `sketch_table_at` in a test)."""
        if verify:
            verify_dir(d)
        opt = lambda n: load_array(d / n) if (d / n).exists() else None
        return cls(
            load_array(d / "emb.npy"),
            load_array(d / "grad_norm.npy"),
            load_array(d / "fluency.npy"),
            opt("step_emb.npy"),
            opt("step_norm.npy"),
            opt("steps.npy"),
            json.loads((d / "report.json").read_text()),
            Path(d),
        )

    def config(self) -> dict:
        """The `SketchConfig` fields these sketches were built with (from the artifact's
        manifest)."""
        if self.path is None:
            raise ValueError(
                "these sketches were loaded without their directory: their SketchConfig is unknown"
            )
        return dict(json.loads((self.path / "manifest.json").read_text())["config"]["sketch"])
