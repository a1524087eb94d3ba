"""Small helpers shared by several test modules (imported as `helpers`, like `adversaries`)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import tracemalloc
from pathlib import Path

import numpy as np


def peak_mib(fn) -> float:
    """Peak traced Python/numpy allocation of `fn()`, in MiB."""
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()


def scrambled_labels(t, rng: np.random.Generator):
    """A rollouts table with every label field flipped or permuted: an estimator that reads no
    label scores it exactly as the original."""
    return dataclasses.replace(
        t,
        gt=~np.asarray(t.gt),
        eligible=~np.asarray(t.eligible),
        behavior=~np.asarray(t.behavior),
        reward=rng.permutation(np.asarray(t.reward)),
        reward_base=rng.permutation(np.asarray(t.reward_base)),
        behavior_mask=~np.asarray(t.behavior_mask),
    )


def outer_venv(venv: Path, extra: tuple[str, ...] = ()) -> Path:
    """A virtual environment without pip or behaviortrace whose dependencies are this environment's
    site directories, then `extra` paths (a `.pth` line each, which runs none of their own `.pth`
    files, so this checkout's editable install stays invisible there): CI's layout, where the
    judge's venv takes its dependencies from `.venv-ci`'s site-packages. Its python."""
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120
    )
    py = venv / "bin" / "python"
    purelib = subprocess.run(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    sites = [p for p in sys.path if p.endswith("site-packages") and Path(p).is_dir()]
    Path(purelib, "outer_env.pth").write_text("".join(f"{p}\n" for p in [*sites, *extra]))
    return py


def recomputed_eligibility(run) -> tuple[np.ndarray, np.ndarray]:
    """(`adversaries_process.RecomputeEligibility`'s picks, GT) on one run's stream: the task
    code's public rule under the key of earlier builds."""
    from types import SimpleNamespace

    from adversaries_process import RecomputeEligibility

    from bt_core.artifacts.rollouts import RolloutView

    t = run.rollouts
    problem = SimpleNamespace(
        kind="stream",
        rollouts=RolloutView.of(t),
        codec=run.token_ids,
        seed=run.seed,
        n_units=len(t),
    )
    return RecomputeEligibility().score(problem) > 0.5, np.asarray(t.gt, bool)
