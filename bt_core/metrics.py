"""Attribution metrics (PAPER_NOTES "Metrics"). Pure functions of arrays and labels only.

Shapes: `scores`, `labels`, `groups`, `blocks`: (n,). Labels are booleans (ground truth or behavior).
"""

from __future__ import annotations

import math

import numpy as np


def _tie_groups(scores: np.ndarray) -> list[np.ndarray]:
    """Indices grouped by equal score, in descending score order."""
    s = np.asarray(scores, dtype=np.float64)
    order = np.argsort(-s, kind="stable")
    sorted_s = s[order]
    cuts = np.flatnonzero(np.diff(sorted_s) != 0) + 1
    return np.split(order, cuts)


def precision_at_k(scores: np.ndarray, labels: np.ndarray, k: int | None = None) -> float:
    """Tie-aware fractional precision@k (k defaults to |GT|). Walk tie groups by descending score; a
    group contributes gt_in_group × slots_taken / group_size; divide by k.

    Vectorized: only the tie group that straddles position k contributes fractionally; every group
    before it is taken whole."""
    labels = np.asarray(labels, bool)
    k = int(labels.sum()) if k is None else int(k)
    if k <= 0:
        raise ValueError("precision@k needs k ≥ 1 (there is no ground truth to find)")
    if len(scores) != len(labels):
        raise ValueError(f"scores ({len(scores)}) and labels ({len(labels)}) differ in length")
    k = min(k, labels.size)
    s = np.asarray(scores, dtype=np.float64)
    order = np.argsort(-s, kind="stable")
    ss, ls = s[order], labels[order]
    starts = np.flatnonzero(np.r_[True, ss[1:] != ss[:-1]])  # first index of each tie group
    g = np.searchsorted(starts, k - 1, side="right") - 1  # the group holding position k-1
    lo = starts[g]
    hi = starts[g + 1] if g + 1 < starts.size else ss.size
    hit = ls[:lo].sum() + ls[lo:hi].sum() * (k - lo) / (hi - lo)
    return float(hit / k)


def chance(labels: np.ndarray) -> float:
    """Expected precision@|GT| of a random ranking: |GT| / N."""
    labels = np.asarray(labels, bool)
    return float(labels.sum() / labels.size)


def lift(precision: float, labels: np.ndarray) -> float:
    return precision / chance(labels)


def ceiling_precision(blocks: np.ndarray, labels: np.ndarray, k: int | None = None) -> float:
    """Best precision@k reachable when all items of a block must tie (e.g. all rollouts of a step):
    the same tie-aware rule with blocks sorted by GT density."""
    blocks = np.asarray(blocks)
    labels = np.asarray(labels, bool)
    uniq, inv = np.unique(blocks, return_inverse=True)
    density = np.bincount(inv, weights=labels.astype(float)) / np.bincount(inv)
    return precision_at_k(density[inv], labels, k)


def within_group_auc(scores: np.ndarray, labels: np.ndarray, groups: np.ndarray) -> tuple[float, int]:
    """Share of (positive, negative) pairs in the same group where the positive scores higher; ties
    count 0.5. Returns (auc, n_pairs); auc is nan when no group holds both labels."""
    wins, pairs = _group_wins(np.asarray(scores, float), np.asarray(labels, bool), np.asarray(groups))
    total = pairs.sum()
    return (float(wins.sum() / total) if total else float("nan")), int(total)


def _group_wins(scores: np.ndarray, labels: np.ndarray, groups: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per group: (wins, pairs), with ties as half wins. Rank-based, O(n log n) per group."""
    from scipy.stats import rankdata

    uniq = np.unique(groups)
    wins, pairs = np.zeros(len(uniq)), np.zeros(len(uniq))
    for j, g in enumerate(uniq):
        m = groups == g
        y, s = labels[m], scores[m]
        n_pos, n_neg = int(y.sum()), int((~y).sum())
        if n_pos and n_neg:
            r = rankdata(s)  # average ranks handle ties as 0.5
            wins[j] = r[y].sum() - n_pos * (n_pos + 1) / 2
            pairs[j] = n_pos * n_neg
    return wins, pairs


def group_bootstrap_ci(scores: np.ndarray, labels: np.ndarray, groups: np.ndarray, n_boot: int = 1000,
                       alpha: float = 0.05, seed: int = 0) -> tuple[float, float]:
    """Percentile CI of the within-group AUC, resampling whole groups (cluster bootstrap)."""
    wins, pairs = _group_wins(np.asarray(scores, float), np.asarray(labels, bool), np.asarray(groups))
    keep = pairs > 0
    wins, pairs = wins[keep], pairs[keep]
    if not keep.any():
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(pairs), size=(n_boot, len(pairs)))
    aucs = wins[idx].sum(1) / pairs[idx].sum(1)
    return float(np.quantile(aucs, alpha / 2)), float(np.quantile(aucs, 1 - alpha / 2))


def residualize(scores: np.ndarray, covariate: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """Centre score and covariate within each group, fit one pooled slope b = cov/var, return
    y_c − b·x_c (the reference's linear fluency control)."""
    y = np.asarray(scores, float)
    x = np.asarray(covariate, float)
    groups = np.asarray(groups)
    _, inv = np.unique(groups, return_inverse=True)
    counts = np.bincount(inv)
    yc = y - (np.bincount(inv, weights=y) / counts)[inv]
    xc = x - (np.bincount(inv, weights=x) / counts)[inv]
    var = float((xc * xc).sum())
    b = float((xc * yc).sum()) / var if var > 0 else 0.0
    return yc - b * xc


def paired_bootstrap_precision(a: np.ndarray, b: np.ndarray, labels: np.ndarray, clusters: np.ndarray,
                               n_boot: int = 500, alpha: float = 0.05, seed: int = 0) -> dict:
    """Paired cluster bootstrap of precision@|GT| for two rankings `a` and `b` of the same items.

    Whole clusters (e.g. optimizer steps, whose rollouts share parameters and GT status) are resampled
    with replacement; both rankings are scored on every resample with k = |GT| of that resample.
    Returns the point difference a − b and the percentile CI of the difference (in precision units)."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    labels = np.asarray(labels, bool)
    uniq, inv = np.unique(np.asarray(clusters), return_inverse=True)
    members = [np.flatnonzero(inv == j) for j in range(len(uniq))]
    rng = np.random.default_rng(seed)
    diffs = []
    for _ in range(n_boot):
        pick = rng.integers(0, len(uniq), size=len(uniq))
        idx = np.concatenate([members[j] for j in pick])
        y = labels[idx]
        if not y.any():
            continue
        diffs.append(precision_at_k(a[idx], y) - precision_at_k(b[idx], y))
    d = np.array(diffs)
    point = precision_at_k(a, labels) - precision_at_k(b, labels)
    if d.size == 0:
        return {"diff": point, "ci_lo": float("nan"), "ci_hi": float("nan"), "n_boot": 0}
    return {"diff": point, "ci_lo": float(np.quantile(d, alpha / 2)), "ci_hi": float(np.quantile(d, 1 - alpha / 2)),
            "n_boot": int(d.size)}


def random_spread(labels: np.ndarray, blocks: np.ndarray | None = None, n_perm: int = 200, q: float = 0.95,
                  seed: int = 0) -> float:
    """How far above chance a random ranking reaches: the q-quantile of (precision@|GT| − chance) over
    random rankings (ranking whole `blocks` together when given, e.g. steps at step level)."""
    labels = np.asarray(labels, bool)
    rng = np.random.default_rng(seed)
    ch = chance(labels)
    if blocks is None:
        vals = [precision_at_k(rng.random(labels.size), labels) for _ in range(n_perm)]
    else:
        _, inv = np.unique(np.asarray(blocks), return_inverse=True)
        vals = [precision_at_k(rng.random(inv.max() + 1)[inv], labels) for _ in range(n_perm)]
    return float(np.quantile(np.array(vals) - ch, q))


def residualize_bins(scores: np.ndarray, covariate: np.ndarray, groups: np.ndarray, n_bins: int = 5) -> np.ndarray:
    """Nonlinear fluency control: centre within groups, then subtract the mean centred score of the
    covariate's quantile bin (a step-function fit instead of one slope)."""
    y = np.asarray(scores, float)
    x = np.asarray(covariate, float)
    _, inv = np.unique(np.asarray(groups), return_inverse=True)
    counts = np.bincount(inv)
    yc = y - (np.bincount(inv, weights=y) / counts)[inv]
    xc = x - (np.bincount(inv, weights=x) / counts)[inv]
    edges = np.unique(np.quantile(xc, np.linspace(0, 1, n_bins + 1)[1:-1]))
    b = np.searchsorted(edges, xc, side="right")
    means = np.bincount(b, weights=yc, minlength=b.max() + 1) / np.maximum(np.bincount(b, minlength=b.max() + 1), 1)
    return yc - means[b]


def matched_pair_auc(scores: np.ndarray, labels: np.ndarray, groups: np.ndarray, covariate: np.ndarray,
                     caliper: float = 0.10) -> tuple[float, int]:
    """AUC over (positive, negative) pairs of the same group whose covariates differ by ≤ `caliper`
    (fluency-matched pairs); ties 0.5. Returns (auc, n_pairs); nan when no pair matches."""
    s, y, x, g = (np.asarray(a) for a in (scores, labels, covariate, groups))
    y = y.astype(bool)
    wins = pairs = 0.0
    for grp in np.unique(g):
        m = g == grp
        pos, neg = np.flatnonzero(m & y), np.flatnonzero(m & ~y)
        if not (pos.size and neg.size):
            continue
        close = np.abs(x[pos][:, None] - x[neg][None, :]) <= caliper
        diff = s[pos][:, None] - s[neg][None, :]
        wins += float(((diff > 0) + 0.5 * (diff == 0))[close].sum())
        pairs += float(close.sum())
    return (wins / pairs if pairs else float("nan")), int(pairs)


def cluster_bootstrap_mean_ci(values: np.ndarray, clusters: np.ndarray, n_boot: int = 1000, alpha: float = 0.05,
                              seed: int = 0) -> tuple[float, float]:
    """Percentile CI of the mean of `values`, resampling whole clusters; (nan, nan) when empty."""
    values, clusters = np.asarray(values, float), np.asarray(clusters)
    if values.size == 0:
        return math.nan, math.nan
    _, inv = np.unique(clusters, return_inverse=True)
    sums, counts = np.bincount(inv, weights=values), np.bincount(inv).astype(float)
    idx = np.random.default_rng(seed).integers(0, sums.size, size=(n_boot, sums.size))
    means = sums[idx].sum(1) / counts[idx].sum(1)
    return float(np.quantile(means, alpha / 2)), float(np.quantile(means, 1 - alpha / 2))
