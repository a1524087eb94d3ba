"""Kept scores: a built-in reference estimator's scores stored in the artifact cache, so a session
that only *shows* them beside a verdict does not recompute them.

The first user is the `counterfactual` item's ceiling, `metagrad`'s LDS on the judged subsets. Its
scores on a default seed cost ~30 CPU-s (five seeds: most of a warm `--estimator=cosine` session,
docs/performance.md), and before this every session recomputed them, whichever estimator it judged.
They are a figure beside the verdict, never part of the rule, and never the judged estimator's own
scores: a session that judges `metagrad` scores it afresh (`Evidence.scores`) like any method.

The second is `magnitude_control`'s bootstrap of the target-free rankings (the controls, the surface
baseline and the ceiling: 10 of the 12 resampled precision vectors per seed, the same in every
session whatever estimator is judged), kept by `Evidence.kept_array` with the checklist's source in
the fingerprint.

What makes reuse safe (nothing from another config or another code is reused):
- the key hashes the seed's artifact keys (the run and its replays: a rebuilt or different run,
  plan or measure is another key), the estimator's name and settings (`--estimator-param
  metagrad.…`), the versions of torch and numpy, and the **fingerprint of bt_core's source**: every
  `.py` file of the package, so an edit anywhere in the code that builds the problem or computes the
  scores recomputes them once. A manual version number would be forgotten; this cannot be.
- only built-ins are kept (a plug-in's code is not ours to fingerprint);
- the scores are written as an artifact (`ArtifactStore`: atomic, locked, manifest-hashed), kind
  "scores", so a damaged file is an `ArtifactError` like any other artifact, and `--bt-rebuild`
  recomputes them.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache
from pathlib import Path

import numpy as np

KIND = "scores"


@lru_cache(maxsize=8)
def source_fingerprint(*extra: str) -> str:
    """sha256 over every .py file of bt_core and of each `extra` directory (a package the kept
    quantity's code lives in, e.g. the checklist's): relative path and bytes, sorted by path."""
    h = hashlib.sha256()
    for root in (Path(__file__).resolve().parents[1], *(Path(e).resolve() for e in extra)):
        h.update(root.name.encode() + b"\0")
        for p in sorted(root.rglob("*.py")):
            h.update(str(p.relative_to(root)).encode() + b"\0")
            h.update(p.read_bytes() + b"\0")
    return h.hexdigest()


def kept_key(artifact_keys: dict[str, str], what: tuple, fingerprint: str) -> str:
    """The key of a kept quantity: the seed's artifact keys, `what` (JSON-able parts naming the
    quantity and its settings), the source fingerprint and the torch and numpy versions."""
    from bt_core.artifacts.store import versions
    from bt_core.config import config_hash

    v = versions()
    return config_hash(
        dict(sorted(artifact_keys.items())),
        KIND,
        list(what),
        fingerprint,
        {k: v.get(k) for k in ("torch", "numpy")},
    )


def load_or_compute(store, key: str, config: dict, compute) -> tuple[np.ndarray, bool]:
    """(scores, computed): the kept scores of `key`, or `compute()`'s, stored under it.
    `compute` raises (an EstimatorFailure) to store nothing."""
    from bt_core.artifacts.store import load_array, save_array

    computed = []

    def build(out: Path) -> dict:
        scores = compute()
        computed.append(True)
        save_array(out / "scores.npy", np.asarray(scores))
        return {}

    path = store.get_or_build(KIND, key, config, build)
    return np.array(load_array(path / "scores.npy", mmap=False)), bool(computed)
