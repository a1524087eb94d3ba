"""Small helpers shared by several test modules (imported as `helpers`, like `adversaries`)."""

from __future__ import annotations

import dataclasses
import tracemalloc

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
