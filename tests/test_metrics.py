"""Metrics against hand-computed cases (ties included) and their invariants."""

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from bt_core.metrics import (
    ceiling_precision,
    chance,
    group_bootstrap_ci,
    lift,
    precision_at_k,
    residualize,
    subset_sums,
    within_group_auc,
)


def test_precision_tie_group_straddling_k():
    # group {3}: 1 GT; tie group {2, 2} gets 1 of 2 slots and holds 1 GT → 0.5; (1 + 0.5) / 2
    assert precision_at_k(np.array([3, 2, 2, 1]), np.array([1, 1, 0, 0], bool)) == pytest.approx(
        0.75
    )


def test_precision_all_tied_equals_chance():
    labels = np.array([1, 0, 0, 0], bool)
    assert (
        precision_at_k(np.zeros(4), labels) == pytest.approx(chance(labels)) == pytest.approx(0.25)
    )


def test_precision_perfect_and_worst():
    labels = np.array([0, 1, 0, 1, 0], bool)
    assert precision_at_k(labels.astype(float), labels) == 1.0
    assert precision_at_k(-labels.astype(float), labels) == 0.0
    assert lift(1.0, labels) == pytest.approx(2.5)


def test_precision_explicit_k_and_errors():
    assert precision_at_k(
        np.array([4, 3, 2, 1]), np.array([1, 0, 1, 0], bool), k=3
    ) == pytest.approx(2 / 3)
    with pytest.raises(ValueError, match="k ≥ 1"):
        precision_at_k(np.ones(3), np.zeros(3, bool))
    with pytest.raises(ValueError, match="differ in length"):
        precision_at_k(np.ones(3), np.ones(2, bool))


def test_ceiling_sorts_blocks_by_density():
    # block 1 (density 1.0) fills 2 slots, block 0 (0.5) gives half of its 1 GT for the third slot
    assert ceiling_precision(np.array([0, 0, 1, 1]), np.array([1, 0, 1, 1], bool)) == pytest.approx(
        2.5 / 3
    )


def test_within_group_auc_hand_case():
    scores = np.array([3, 1, 3, 0, 2, 5, 5])
    labels = np.array([1, 0, 0, 1, 0, 1, 1], bool)
    groups = np.array([0, 0, 0, 1, 1, 2, 2])  # group 2 has no negatives → ignored
    auc, pairs = within_group_auc(scores, labels, groups)
    assert pairs == 3
    assert auc == pytest.approx((1 + 0.5 + 0) / 3)


def test_within_group_auc_undefined_without_mixed_groups():
    auc, pairs = within_group_auc(
        np.arange(4), np.array([1, 1, 0, 0], bool), np.array([0, 0, 1, 1])
    )
    assert pairs == 0 and np.isnan(auc)


@settings(max_examples=50, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 4), st.booleans(), st.integers(0, 3)), min_size=4, max_size=40
    )
)
def test_auc_of_negated_scores_is_complement(rows):
    s = np.array([r[0] for r in rows], float)
    y = np.array([r[1] for r in rows])
    g = np.array([r[2] for r in rows])
    auc, pairs = within_group_auc(s, y, g)
    auc_neg, _ = within_group_auc(-s, y, g)
    assume(pairs > 0)  # no mixed group: the AUC is undefined (tested above)
    assert auc + auc_neg == pytest.approx(1.0)


def test_bootstrap_ci_brackets_point_and_perfect_is_degenerate():
    rng = np.random.default_rng(0)
    groups = np.repeat(np.arange(30), 6)
    labels = rng.random(groups.size) < 0.5
    scores = labels + rng.normal(0, 1.0, groups.size)
    auc, _ = within_group_auc(scores, labels, groups)
    lo, hi = group_bootstrap_ci(scores, labels, groups, n_boot=500)
    assert lo <= auc <= hi and hi - lo > 0.01
    assert group_bootstrap_ci(labels.astype(float), labels, groups) == (1.0, 1.0)


def test_residualize_removes_the_covariate():
    rng = np.random.default_rng(1)
    groups = np.repeat(np.arange(10), 5)
    x = rng.normal(size=50)
    y = 2.0 * x + rng.normal(size=50)
    r = residualize(y, x, groups)
    xc = x - np.array([x[groups == g].mean() for g in groups])
    assert abs(float((r * xc).sum())) < 1e-8
    assert np.allclose(residualize(x, x, groups), 0.0, atol=1e-12)


def _precision_reference(scores, labels, k):
    """Literal transcription of the rule: walk tie groups by descending score."""
    left, hit = k, 0.0
    for v in sorted(set(scores), reverse=True):
        idx = [i for i, s in enumerate(scores) if s == v]
        if left <= 0:
            break
        take = min(left, len(idx))
        hit += sum(labels[i] for i in idx) * take / len(idx)
        left -= take
    return hit / k


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 5), st.booleans()), min_size=1, max_size=40),
    st.integers(1, 40),
)
def test_vectorized_precision_matches_the_literal_rule(rows, k):
    scores = [r[0] for r in rows]
    labels = [r[1] for r in rows]
    k = min(k, len(rows))
    assert precision_at_k(np.array(scores), np.array(labels), k) == pytest.approx(
        _precision_reference(scores, labels, k)
    )


@settings(max_examples=80, deadline=None)
@given(st.integers(0, 10_000))
def test_within_group_auc_counts_every_pair(seed):
    """The one-sort rank computation equals the pair count by definition (ties half), group by
    group."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 60))
    groups = rng.integers(0, int(rng.integers(1, 8)), n) * 5 - 2
    scores = rng.integers(0, 3, n).astype(float) if seed % 2 else rng.standard_normal(n)
    labels = rng.random(n) < rng.random()
    wins = pairs = 0.0
    for i in range(n):
        for j in range(n):
            if groups[i] == groups[j] and labels[i] and not labels[j]:
                pairs += 1
                wins += 1.0 if scores[i] > scores[j] else 0.5 if scores[i] == scores[j] else 0.0
    auc, n_pairs = within_group_auc(scores, labels, groups)
    assert n_pairs == pairs
    assert (auc == pytest.approx(wins / pairs)) if pairs else np.isnan(auc)


def test_subset_sums_keep_tied_predictions_tied():
    """Subsets of equal size over tied scores sum to exactly the same value, whatever the item
    order: the LDS never ranks rounding noise (a threaded matrix product did, for the local-buffer
    control)."""
    rng = np.random.default_rng(0)
    scores = np.full(2000, 0.1) + np.r_[np.zeros(1000), rng.standard_normal(1000)]
    x = np.zeros((50, scores.size), bool)
    for row in x:
        row[rng.choice(1000, 500, replace=False)] = True  # only the tied half
    sums = subset_sums(x, scores)
    assert np.ptp(sums) == 0.0
    perm = rng.permutation(scores.size)
    assert np.array_equal(subset_sums(x[:, perm], scores[perm]), sums)
    assert subset_sums(x[:1], scores)[0] == pytest.approx(0.1 * 500, rel=1e-15)


def test_within_group_ranks_keep_each_group_s_order_and_drop_its_scale():
    """Scaled ranks per group (ties averaged, a lone member at 0.5): a group scored a thousand times
    larger gets the same ranks as the same order at scale 1."""
    import numpy as np

    from bt_core.metrics import within_group_ranks

    g = np.array([0, 0, 0, 1, 1, 1, 2, 3, 3])
    x = np.array([3.0, 1.0, 2.0, 3000.0, 1000.0, 2000.0, 7.0, 5.0, 5.0])
    r = within_group_ranks(x, g)
    assert np.allclose(r, [1.0, 0.0, 0.5, 1.0, 0.0, 0.5, 0.5, 0.5, 0.5])


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 4), st.integers(-3, 3)),  # (group, score): few values, many ties
        min_size=1,
        max_size=40,
    )
)
def test_within_group_ranks_equal_each_group_s_own_rankdata(pairs):
    """The one-sort ranking equals scipy's per-group rankdata (ties averaged), scaled to [0, 1]."""
    import numpy as np
    from scipy.stats import rankdata

    from bt_core.metrics import within_group_ranks

    g = np.array([p[0] for p in pairs])
    x = np.array([p[1] for p in pairs], float)
    want = np.empty(x.size)
    for k in np.unique(g):
        m = g == k
        n = int(m.sum())
        want[m] = (rankdata(x[m]) - 1.0) / (n - 1) if n > 1 else 0.5
    assert np.allclose(within_group_ranks(x, g), want)
