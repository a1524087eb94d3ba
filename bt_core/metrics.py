"""Attribution metrics (PAPER_NOTES "Metrics"). Pure functions of arrays and labels only.

Shapes: `scores`, `labels`, `groups`, `blocks`: (n,). Labels are booleans (ground truth or
behavior).
"""

from __future__ import annotations

import math

import numpy as np


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


def within_group_auc(
    scores: np.ndarray, labels: np.ndarray, groups: np.ndarray
) -> tuple[float, int]:
    """Share of (positive, negative) pairs in the same group where the positive scores higher; ties
    count 0.5. Returns (auc, n_pairs); auc is nan when no group holds both labels."""
    wins, pairs = _group_wins(
        np.asarray(scores, float), np.asarray(labels, bool), np.asarray(groups)
    )
    total = pairs.sum()
    return (float(wins.sum() / total) if total else float("nan")), int(total)


def _group_wins(
    scores: np.ndarray, labels: np.ndarray, groups: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per group (in `np.unique(groups)` order): (wins, pairs), with ties as half wins. The
    Mann-Whitney count from average ranks within each group, for all groups in one sort (a per-group
    `rankdata` loop cost ~20 s of a default suite: thousands of groups of 8)."""
    _, inv = np.unique(groups, return_inverse=True)
    n_groups = int(inv.max()) + 1 if inv.size else 0
    order = np.lexsort((scores, inv))  # by group, then score
    g, sc = inv[order], scores[order]
    new_block = (
        np.r_[True, (g[1:] != g[:-1]) | (sc[1:] != sc[:-1])] if g.size else np.zeros(0, bool)
    )
    block = np.cumsum(new_block) - 1
    pos = np.arange(g.size, dtype=np.float64)
    group_start = np.r_[0, np.flatnonzero(g[1:] != g[:-1]) + 1] if g.size else np.zeros(0, int)
    start_of = np.zeros(n_groups, np.int64)
    start_of[g[group_start]] = group_start
    # average rank of a tie block (1-based within its group) = mean of its positions − group start +
    # 1
    block_rank = np.bincount(block, weights=pos) / np.bincount(block)
    rank = block_rank[block] - start_of[g] + 1.0
    y = labels[order]
    n_pos = np.bincount(g, weights=y.astype(np.float64), minlength=n_groups)
    n_all = np.bincount(g, minlength=n_groups).astype(np.float64)
    n_neg = n_all - n_pos
    both = (n_pos > 0) & (n_neg > 0)
    wins = np.where(
        both, np.bincount(g, weights=rank * y, minlength=n_groups) - n_pos * (n_pos + 1) / 2, 0.0
    )
    return wins, np.where(both, n_pos * n_neg, 0.0)


def group_bootstrap_ci(
    scores: np.ndarray,
    labels: np.ndarray,
    groups: np.ndarray,
    n_boot: int = 1000,
    alpha: float = 0.05,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile CI of the within-group AUC, resampling whole groups (cluster bootstrap)."""
    wins, pairs = _group_wins(
        np.asarray(scores, float), np.asarray(labels, bool), np.asarray(groups)
    )
    keep = pairs > 0
    wins, pairs = wins[keep], pairs[keep]
    if not keep.any():
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(pairs), size=(n_boot, len(pairs)))
    aucs = wins[idx].sum(1) / pairs[idx].sum(1)
    return float(np.quantile(aucs, alpha / 2)), float(np.quantile(aucs, 1 - alpha / 2))


def paired_group_auc_diff(
    a: np.ndarray,
    b: np.ndarray,
    labels: np.ndarray,
    groups: np.ndarray,
    n_boot: int = 10_000,
    alpha: float = 0.05,
    seed: int = 0,
) -> dict:
    """Paired cluster bootstrap of the within-group AUC difference AUC(a) − AUC(b): whole groups are
    resampled and both scores are judged on the same resample. Returns the point difference and its
    percentile CI."""
    labels, groups = np.asarray(labels, bool), np.asarray(groups)
    wa, pairs = _group_wins(np.asarray(a, float), labels, groups)
    wb, _ = _group_wins(np.asarray(b, float), labels, groups)
    keep = pairs > 0
    if not keep.any():
        return {"diff": math.nan, "ci_lo": math.nan, "ci_hi": math.nan}
    wa, wb, pairs = wa[keep], wb[keep], pairs[keep]
    idx = np.random.default_rng(seed).integers(0, len(pairs), size=(n_boot, len(pairs)))
    d = (wa[idx].sum(1) - wb[idx].sum(1)) / pairs[idx].sum(1)
    lo, hi = percentile_ci(d, alpha)
    return {"diff": float((wa.sum() - wb.sum()) / pairs.sum()), "ci_lo": lo, "ci_hi": hi}


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


def within_group_ranks(scores: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """Each score's rank within its group scaled to [0, 1] ((rank − 1)/(size − 1), ties averaged;
    0.5 in a group of one): the score's within-group order with its scale removed, so that groups
    whose scores are a thousand times larger do not dominate a pooled fit (`residualize`). One sort
    for all groups."""
    y = np.asarray(scores, float)
    n = y.size
    if n == 0:
        return np.zeros(0)
    _, g = np.unique(np.asarray(groups), return_inverse=True)
    order = np.lexsort((y, g))  # by group, then by score
    ys, gs = y[order], g[order]
    # runs of equal (group, score): ties share the mean of their positions
    new_run = np.r_[True, (gs[1:] != gs[:-1]) | (ys[1:] != ys[:-1])]
    run = np.cumsum(new_run) - 1
    pos = np.arange(n, dtype=float)
    mean_pos = (np.bincount(run, weights=pos) / np.bincount(run))[run]
    start = np.r_[0, np.flatnonzero(gs[1:] != gs[:-1]) + 1]
    size = np.diff(np.r_[start, n])
    first = np.repeat(start, size).astype(float)
    span = np.repeat(size, size).astype(float) - 1.0
    ranked = np.where(span > 0, (mean_pos - first) / np.where(span > 0, span, 1.0), 0.5)
    out = np.empty(n)
    out[order] = ranked
    return out


def resample_counts(
    clusters: np.ndarray, n_boot: int, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """A cluster bootstrap as multiplicities: (inv (n,) cluster index of each item, counts (n_boot,
    m) how often each of the m clusters is drawn in each resample; every row sums to m)."""
    _, inv = np.unique(np.asarray(clusters), return_inverse=True)
    m = int(inv.max()) + 1 if inv.size else 0
    pick = np.random.default_rng(seed).integers(0, m, size=(n_boot, m))
    counts = np.bincount((pick + (np.arange(n_boot) * m)[:, None]).ravel(), minlength=n_boot * m)
    return inv, counts.reshape(n_boot, m).astype(np.int32)


def precision_resamples(
    scores: np.ndarray, labels: np.ndarray, inv: np.ndarray, counts: np.ndarray, chunk: int = 1000
) -> np.ndarray:
    """precision@|GT| of `scores` on every resample of `resample_counts`: (n_boot,), NaN where a
    resample holds no GT. Exactly `precision_at_k` of the concatenated resample (an item drawn c
    times is c tied copies), computed without building it: items are sorted once into tie groups; a
    resample's weight of each tie group (how many copies it holds) and its GT weight are the sparse
    product of the resample's cluster multiplicities with the (tie group × cluster) item counts.
    Only the top of the ranking is read — the shortest run of tie groups whose weight reaches k in
    every resample — so the cost is O(n_boot × prefix items), not O(n_boot × n). Every sum is of
    integers: exact (float32 while a resample's total weight stays below 2^24, float64 beyond)."""
    import scipy.sparse

    s, y = np.asarray(scores, np.float64), np.asarray(labels, bool)
    counts = np.asarray(counts)
    n_boot, m = counts.shape
    order = np.argsort(-s, kind="stable")
    ss, ys, cl = s[order], y[order].astype(np.float64), np.asarray(inv)[order]
    new_group = np.r_[True, ss[1:] != ss[:-1]] if ss.size else np.zeros(0, bool)
    group = np.cumsum(new_group) - 1  # tie group of each sorted item
    ends = np.r_[np.flatnonzero(new_group)[1:], ss.size]  # item index one past each tie group
    k = counts @ np.bincount(inv, weights=y, minlength=m)  # (n_boot,) |GT| of each resample
    out = np.full(n_boot, np.nan)
    if ss.size == 0:
        return out
    # First prefix: the tie groups holding 1.15·max k + 64 items. A resample's weight of a prefix of
    # t items has mean t and SD ≈ √(Σ_c n_c²) (n_c items of cluster c in it), far below 0.15·t at
    # the suite's sizes; a chunk whose resamples fall short widens it (×1.5 each time) and is
    # redone.
    need = 1.15 * max(float(k.max()), 1.0) + 64
    n_groups = int(np.searchsorted(ends, min(need, ends[-1]), side="left")) + 1
    # (n_boot,) items in each resample: the largest sum below
    total = counts @ np.bincount(inv, minlength=m)
    exact = np.float32 if total.max() < 2**24 else np.float64
    counts_t = counts.T.astype(exact)  # (m, n_boot)
    lo = 0
    while lo < n_boot:
        n_groups = min(n_groups, ends.size)
        t = int(ends[n_groups - 1])
        shape = (n_groups, m)
        # duplicates sum
        a_w = scipy.sparse.csr_matrix((np.ones(t, exact), (group[:t], cl[:t])), shape=shape)
        a_g = scipy.sparse.csr_matrix((ys[:t].astype(exact), (group[:t], cl[:t])), shape=shape)
        while lo < n_boot:
            # (n_groups, b): resamples along columns, so the running sums over groups need no
            # transpose
            w = a_w @ counts_t[:, lo : lo + chunk]  # copies of each tie group in each resample
            cum_w = np.cumsum(w, axis=0)
            kk = k[lo : lo + chunk]
            if n_groups < ends.size and not (cum_w[-1] >= kk).all():
                n_groups = int(n_groups * 1.5) + 1
                break  # widen the prefix and redo this chunk
            g = a_g @ counts_t[:, lo : lo + chunk]  # GT copies of each tie group
            cols = np.arange(w.shape[1])
            # first group reaching k
            star = np.minimum((cum_w < kk[None, :]).sum(axis=0), n_groups - 1)
            w_star = w[star, cols].astype(np.float64)
            before_w = cum_w[star, cols].astype(np.float64) - w_star
            g_star = g[star, cols].astype(np.float64)
            before_g = np.cumsum(g, axis=0)[star, cols].astype(np.float64) - g_star
            with np.errstate(invalid="ignore", divide="ignore"):
                hits = before_g + g_star * (kk - before_w) / w_star
                out[lo : lo + chunk] = np.where(kk > 0, hits / kk, np.nan)
            lo += chunk
    return out


def percentile_ci(values: np.ndarray, alpha: float = 0.05) -> tuple[float, float]:
    """Two-sided percentile interval of the finite `values`; (nan, nan) when there are none."""
    v = np.asarray(values, float)
    v = v[np.isfinite(v)]
    if v.size == 0:
        return math.nan, math.nan
    return float(np.quantile(v, alpha / 2)), float(np.quantile(v, 1 - alpha / 2))


def paired_bootstrap_precision(
    a: np.ndarray,
    b: np.ndarray,
    labels: np.ndarray,
    clusters: np.ndarray,
    n_boot: int = 10_000,
    alpha: float = 0.05,
    seed: int = 0,
) -> dict:
    """Paired cluster bootstrap of precision@|GT| for two rankings `a` and `b` of the same items.

    Whole clusters (e.g. optimizer steps, whose rollouts share parameters and GT status) are
    resampled with replacement; both rankings are scored on every resample with k = |GT| of that
    resample.
    Returns the point difference a − b and the percentile CI of the difference (in precision units).
    Vectorized (`precision_resamples`): 10,000 resamples of 16,000 rollouts take about a second."""
    labels = np.asarray(labels, bool)
    inv, counts = resample_counts(clusters, n_boot, seed)
    d = precision_resamples(a, labels, inv, counts) - precision_resamples(b, labels, inv, counts)
    point = precision_at_k(a, labels) - precision_at_k(b, labels)
    lo, hi = percentile_ci(d, alpha)
    return {"diff": point, "ci_lo": lo, "ci_hi": hi, "n_boot": int(np.isfinite(d).sum())}


def random_spread(
    labels: np.ndarray,
    blocks: np.ndarray | None = None,
    n_perm: int = 10_000,
    q: float = 0.95,
    seed: int = 0,
) -> float:
    """How far above chance a random ranking reaches: the q-quantile of (precision@|GT| − chance)
    over random rankings. Without `blocks` it is exact: a random ranking's top |GT| is a random
    |GT|-subset, so its hits are hypergeometric. With `blocks` (e.g. steps at step level), whole
    blocks are ranked together and the quantile is estimated from `n_perm` random block orders."""
    labels = np.asarray(labels, bool)
    n, k = labels.size, int(labels.sum())
    ch = chance(labels)
    if blocks is None:
        from scipy.stats import hypergeom

        return float(hypergeom.ppf(q, n, k, k) / k - ch)
    _, inv = np.unique(np.asarray(blocks), return_inverse=True)
    size = np.bincount(inv).astype(float)
    gt = np.bincount(inv, weights=labels.astype(float))
    rng = np.random.default_rng(seed)
    vals = []
    for lo in range(0, n_perm, 1000):
        order = np.argsort(rng.random((min(1000, n_perm - lo), size.size)), axis=1)
        w, g = size[order], gt[order]
        cum = np.cumsum(w, axis=1)
        star = (cum < k).sum(axis=1)
        rows = np.arange(order.shape[0])
        before_g = np.cumsum(g, axis=1)[rows, star] - g[rows, star]
        vals.append(
            (before_g + g[rows, star] * (k - (cum[rows, star] - w[rows, star])) / w[rows, star]) / k
        )
    return float(np.quantile(np.concatenate(vals) - ch, q))


def t_mean_ci(values: np.ndarray, alpha: float = 0.05) -> tuple[float, float]:
    """Student-t interval of the mean of a few values (e.g. one figure per seed); (nan, nan) for
    fewer than two. With equal values the interval is the value itself."""
    from scipy.stats import t

    v = np.asarray([x for x in values if x == x], float)
    if v.size < 2:
        return math.nan, math.nan
    half = float(t.ppf(1 - alpha / 2, v.size - 1) * v.std(ddof=1) / math.sqrt(v.size))
    return float(v.mean() - half), float(v.mean() + half)


def residualize_bins(
    scores: np.ndarray, covariate: np.ndarray, groups: np.ndarray, n_bins: int = 5
) -> np.ndarray:
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
    means = np.bincount(b, weights=yc, minlength=b.max() + 1) / np.maximum(
        np.bincount(b, minlength=b.max() + 1), 1
    )
    return yc - means[b]


def matched_pair_auc(
    scores: np.ndarray,
    labels: np.ndarray,
    groups: np.ndarray,
    covariate: np.ndarray,
    caliper: float = 0.10,
) -> tuple[float, int]:
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


def within_group_spearman(scores: np.ndarray, y: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """Spearman ρ of `scores` with `y` inside each group (`np.unique(groups)` order), (n_groups,);
    NaN for a group of fewer than 3 members or a constant score or `y` in it."""
    scores, y = np.asarray(scores, np.float64), np.asarray(y, np.float64)
    groups = np.asarray(groups)
    _, inv = np.unique(groups, return_inverse=True)
    out = np.full(int(inv.max()) + 1 if inv.size else 0, np.nan)
    for g in range(out.size):
        rows = inv == g
        if rows.sum() >= 3:
            out[g] = spearman_rows(scores[rows], y[rows])
    return out


def cluster_bootstrap_mean_ci(
    values: np.ndarray, clusters: np.ndarray, n_boot: int = 1000, alpha: float = 0.05, seed: int = 0
) -> tuple[float, float]:
    """Percentile CI of the mean of `values`, resampling whole clusters; (nan, nan) when empty."""
    values, clusters = np.asarray(values, float), np.asarray(clusters)
    if values.size == 0:
        return math.nan, math.nan
    _, inv = np.unique(clusters, return_inverse=True)
    sums, counts = np.bincount(inv, weights=values), np.bincount(inv).astype(float)
    idx = np.random.default_rng(seed).integers(0, sums.size, size=(n_boot, sums.size))
    means = sums[idx].sum(1) / counts[idx].sum(1)
    return float(np.quantile(means, alpha / 2)), float(np.quantile(means, 1 - alpha / 2))


# --------------------------------------------------------------------------- linear datamodeling
# score (LDS)
def spearman_rows(pred: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Spearman ρ of each row of `pred` (..., M) with `y` (..., M) (broadcast): Pearson of average
    ranks (`scipy.stats.rankdata`, ties averaged). A constant row gives NaN."""
    from scipy.stats import rankdata

    rp = rankdata(np.asarray(pred, np.float64), axis=-1)
    ry = rankdata(np.asarray(y, np.float64), axis=-1)
    rp = rp - rp.mean(-1, keepdims=True)
    ry = ry - ry.mean(-1, keepdims=True)
    den = np.sqrt((rp * rp).sum(-1) * (ry * ry).sum(-1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, (rp * ry).sum(-1) / np.where(den > 0, den, 1.0), np.nan)


def subset_sums(indicators: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """Σ of `scores` (N,) over the items each row of `indicators` (M, N) bool flags, (M,), correctly
    rounded (`math.fsum`): a subset's sum depends neither on summation order nor on BLAS threads, so
    predictions built from tied scores stay exactly tied (a threaded `x @ scores` broke such ties
    with rounding noise, which Spearman then ranked as if it were signal)."""
    x = np.asarray(indicators, bool)
    s = np.asarray(scores, np.float64)
    return np.array([math.fsum(s[row]) for row in x], np.float64)


def lds_bootstrap(
    pred: np.ndarray, measured: np.ndarray, n_boot: int = 2000, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """LDS of each predictor and its bootstrap over subsets, with the SAME resample indices for
    every row (so differences between rows are paired). `pred` (K, M): each predictor's predicted
    change per subset; `measured` (M,). Returns (lds (K,), boot (K, n_boot)); a degenerate resample
    gives NaN."""
    pred = np.atleast_2d(np.asarray(pred, np.float64))
    y = np.asarray(measured, np.float64)
    if pred.shape[1] != y.size:
        raise ValueError(f"pred has {pred.shape[1]} subsets, measured {y.size}")
    idx = np.random.default_rng(seed).integers(0, y.size, size=(n_boot, y.size))
    return spearman_rows(pred, y), spearman_rows(pred[:, idx], y[idx][None, :, :])


def ridge_fit_predict(
    x_fit: np.ndarray,
    y_fit: np.ndarray,
    x_eval: np.ndarray,
    lambdas: tuple[float, ...] = (1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0, 1e3),
) -> np.ndarray:
    """Ridge regression (intercept unpenalized, features standardized on the fit set) with λ chosen
    by the closed-form leave-one-out error on the fit set; returns predictions for `x_eval`.
    Hand-written (a few lines of numpy) because scikit-learn is not a dependency."""
    mu, sd = x_fit.mean(0), x_fit.std(0)
    sd = np.where(sd > 0, sd, 1.0)
    a, b = (x_fit - mu) / sd, (x_eval - mu) / sd
    ym = y_fit.mean()
    yc = y_fit - ym
    u, s, _ = np.linalg.svd(a, full_matrices=False)
    best, best_err = lambdas[0], np.inf
    for lam in lambdas:
        h = (u * (s**2 / (s**2 + lam))) @ u.T  # hat matrix of the centred problem
        loo = (yc - h @ yc) / np.clip(1 - np.diag(h) - 1.0 / len(yc), 1e-9, None)
        err = float(np.mean(loo**2))
        if err < best_err:
            best, best_err = lam, err
    w = np.linalg.solve(a.T @ a + best * np.eye(a.shape[1]), a.T @ yc)
    return b @ w + ym


def datamodel_ceiling(features: np.ndarray, measured: np.ndarray, seed: int = 0) -> float:
    """The LDS a linear datamodel reaches: ridge on the subsets' `features` (M, d) fitted on one
    half of the subsets, Spearman on the other half, both ways round (mean of the two folds)."""
    y = np.asarray(measured, np.float64)
    perm = np.random.default_rng(seed).permutation(y.size)
    halves = (perm[: y.size // 2], perm[y.size // 2 :])
    out = []
    for fit, ev in (halves, halves[::-1]):
        pred = ridge_fit_predict(
            np.asarray(features[fit], np.float64), y[fit], np.asarray(features[ev], np.float64)
        )
        out.append(float(spearman_rows(pred, y[ev])))
    return float(np.nanmean(out))
