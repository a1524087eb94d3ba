"""Attribution metrics (PAPER_NOTES "Metrics"). Pure functions of arrays and labels only.

Shapes: `scores`, `labels`, `groups`, `blocks`: (n,). Labels are booleans (ground truth or behavior).
"""

from __future__ import annotations

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
    group contributes gt_in_group × slots_taken / group_size; divide by k."""
    labels = np.asarray(labels, bool)
    k = int(labels.sum()) if k is None else int(k)
    if k <= 0:
        raise ValueError("precision@k needs k ≥ 1 (there is no ground truth to find)")
    if len(scores) != len(labels):
        raise ValueError(f"scores ({len(scores)}) and labels ({len(labels)}) differ in length")
    left, hit = k, 0.0
    for idx in _tie_groups(scores):
        if left <= 0:
            break
        take = min(left, idx.size)
        hit += labels[idx].sum() * take / idx.size
        left -= take
    return hit / k


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
