"""The resampling behind the checklist's decisions: exact where it claims to be, and stable under
the bootstrap seed at the counts the items use (unit tier)."""

import numpy as np
import pytest
from behaviortrace.checklist import fluency_control, headroom, magnitude_control
from hypothesis import given, settings
from hypothesis import strategies as st

from bt_core.metrics import (
    chance,
    paired_bootstrap_precision,
    precision_at_k,
    precision_resamples,
    random_spread,
    resample_counts,
)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10_000))
def test_vectorized_resamples_equal_the_concatenated_resample(seed):
    """precision_resamples is precision_at_k of the literally concatenated resample (ties
    included)."""
    rng = np.random.default_rng(seed)
    n_clusters = int(rng.integers(2, 9))
    clusters = np.repeat(np.arange(n_clusters), rng.integers(1, 6, n_clusters))
    labels = rng.random(clusters.size) < 0.3
    scores = rng.integers(0, 4, clusters.size).astype(float)  # many ties
    inv, counts = resample_counts(clusters, 25, seed)
    got = precision_resamples(scores, labels, inv, counts, chunk=int(rng.integers(1, 30)))
    for b in range(25):
        idx = np.concatenate(
            [
                np.flatnonzero(inv == j).repeat(1)
                for j in range(n_clusters)
                for _ in range(counts[b, j])
            ]
        )
        want = precision_at_k(scores[idx], labels[idx]) if labels[idx].any() else np.nan
        assert got[b] == pytest.approx(want, nan_ok=True)


def test_vectorized_resamples_widen_the_prefix_when_a_resample_needs_it():
    """A large ranking whose top clusters many resamples drop: the first prefix (2k + 64 items) is
    too short for them and is widened; the figures stay those of the concatenated resample."""
    rng = np.random.default_rng(3)
    clusters = np.repeat(np.arange(300), 10)
    labels = rng.random(clusters.size) < 0.02
    scores = np.round(rng.standard_normal(clusters.size) + 3.0 * labels + 0.2 * (clusters < 20), 1)
    inv, counts = resample_counts(clusters, 40, 1)
    got = precision_resamples(scores, labels, inv, counts, chunk=16)
    for b in range(40):
        idx = np.concatenate(
            [np.flatnonzero(inv == j) for j in range(300) for _ in range(counts[b, j])]
        )
        assert got[b] == pytest.approx(precision_at_k(scores[idx], labels[idx]))


def test_random_spread_is_the_hypergeometric_quantile():
    """Without blocks the spread is exact; a Monte Carlo of random rankings lands on it."""
    rng = np.random.default_rng(0)
    labels = rng.random(400) < 0.1
    exact = random_spread(labels)
    mc = [precision_at_k(rng.random(labels.size), labels) - chance(labels) for _ in range(4000)]
    assert abs(np.quantile(mc, 0.95) - exact) <= 1.0 / labels.sum() + 1e-12  # within one hit


def _borderline():
    """A targeted ranking that beats a control by a small, real margin: 60 steps × 16 rollouts, 120
    GT."""
    rng = np.random.default_rng(1)
    clusters = np.repeat(np.arange(60), 16)
    labels = np.zeros(clusters.size, bool)
    labels[rng.choice(labels.size, 120, replace=False)] = True
    base = rng.standard_normal(labels.size)
    a = base + 0.55 * labels
    b = base + 0.5 * labels + 0.3 * rng.standard_normal(labels.size)
    return a, b, labels, clusters


def test_a_close_call_does_not_flip_with_the_bootstrap_seed():
    """The decision (CI lower bound > 0) is the same under 5 bootstrap seeds at the items' count,
    where the old count (200: the decision rested on the 5th-smallest resample) flipped on this very
    case."""
    a, b, labels, clusters = _borderline()
    decide = lambda n, s: (
        paired_bootstrap_precision(a, b, labels, clusters, n_boot=n, seed=s)["ci_lo"] > 0
    )  # noqa: E731
    at_items = {decide(magnitude_control.N_BOOT, s) for s in range(5)}
    assert len(at_items) == 1, "the verdict flips with the bootstrap seed"
    assert len({decide(200, s) for s in range(5)}) == 2  # why the count was raised


def test_every_item_resamples_enough():
    """A 95% percentile bound from B resamples rests on its 0.025·B-th order statistic: at least 100
    of them (B ≥ 4000) in every item that decides on a bootstrap or permutation quantile."""
    for n in (magnitude_control.N_BOOT, fluency_control.N_BOOT, headroom.N_PERM):
        assert 0.025 * n >= 100, n
