"""The counterfactual plan of one seed: which rollout subsets are removed from the logged stream,
the trained window they are drawn from, and the measurement step.

The plan is a deterministic function of the run and a `CounterfactualConfig`:

* ``full``: nothing removed — the baseline every other replay is compared with;
* ``gt_out``: every ground-truth (boosted) rollout removed;
* ``random_<i>`` (``n_random``): as many rollouts as GT, uniformly from the trained window, GT
  included at its share of the window — the window holds every GT rollout; a draw from the whole
  stream would put most removals after the measurement step, where they cannot act, and make the
  control trivially zero;
* ``no_bonus``: nothing removed, rewards without the contaminator's bonus, advantages recomputed;
* ``lds_<i>`` (``n_lds``): round(lds_fraction × n) rollouts of the trained window, uniformly;
* ``local_<i>`` (``n_local``): round(local_fraction × n) rollouts (n: the window's size) drawn
  uniformly from the window without its first step (`local_pool`; the counterfactual item says why);
* ``full_f64``: nothing removed, replayed in float64 from step 0 — the baseline of the reweightings;
* ``reweight_<i>`` (``n_reweight``): the i-th local subset's draw, its rollouts kept at weight
  1 − reweight_delta instead of removed, replayed in float64 from step 0 (what the counterfactual
  item judges; float32 rounding moved a δ = 0.01 response by 7% on default seed 1);
* ``linear_<k>_<i>`` (``n_linearity`` per rung of ``linearity_deltas``): the i-th judged subset at
  weight 1 − linearity_deltas[k], float64 — the linearity ladder, reported: how far beyond the
  judged δ the response stays first order.

Trained window (`trained_window`, the one definition: the LDS subsets draw from it, the pipeline
writes it to ``window.npy`` and the headroom item judges inside it): the rollouts of steps before
the contaminator's cutoff whose batch has a nonzero advantage. The measurement step is the first
checkpoint at or after the cutoff: every GT rollout and every window rollout acts before it.

A replay directory (``replays/<key>``, the key hashes the run's key, the subset's identity and the
measure's config, so a different subset never reuses another's bytes) holds ``replay.json`` (the
spec's identity and the measured behavior) and ``removed.npy`` (the removed row indices); the
``full`` replay also holds ``measure/``, the teacher-forced sequences of the behavior measure
(`TargetExamples` columns).
A seed's replays are indexed by a ``replaysets/<key>`` directory (key: run key + the whole
`CounterfactualConfig`); `bt_core.artifacts.replays` loads them.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from bt_core.artifacts.rollouts import RolloutTable
from bt_core.config import CounterfactualConfig, RunConfig, checkpoint_steps

# remove: rows out of the loss, logged advantages | no_bonus: see above
MODES = ("remove", "no_bonus")
DTYPES = ("float32", "float64")  # float32: the run's arithmetic (bit-exact) | float64: from step 0


@dataclass(frozen=True)
class ReplaySpec:
    """One counterfactual: the rows `removed` (sorted row indices of the run's rollouts table) keep
    weight `weight` in the loss (0: they leave it; in (0, 1): a reweighting, their term A_i·ℓ_i
    scaled by it); `mode="no_bonus"` also recomputes every advantage from the rewards without the
    bonus. `dtype="float64"` replays in float64 from the step-0 checkpoint (cast), to be compared
    with the float64 `full_f64`."""

    name: str  # the plan name (full, gt_out, ..., reweight_<i>): not part of the identity
    mode: str
    removed: np.ndarray  # (n_removed,) int64, sorted, unique
    measure_step: int
    weight: float = 0.0
    dtype: str = "float32"

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(
                f"replay mode={self.mode!r} is unknown; choose one of {', '.join(MODES)}"
            )
        if not 0.0 <= self.weight < 1.0:
            raise ValueError(
                f"replay weight={self.weight} must lie in [0, 1): the weight the "
                "subset's rows keep (0 removes them; 1 would change nothing)"
            )
        if self.dtype not in DTYPES:
            raise ValueError(
                f"replay dtype={self.dtype!r} is unknown; choose one of {', '.join(DTYPES)}"
            )

    def identity(self) -> dict:
        """What the replay's bytes depend on besides the run and the measure (its cache key hashes
        this). A float32 removal has the identity it had before reweightings existed (its cached
        bytes stay valid)."""
        r = np.ascontiguousarray(self.removed, dtype="<i8")
        out = {
            "mode": self.mode,
            "n_removed": int(r.size),
            "measure_step": int(self.measure_step),
            "removed_sha256": hashlib.sha256(r.tobytes()).hexdigest(),
        }
        if self.weight:
            out["weight"] = float(self.weight)
        if self.dtype != "float32":
            out["dtype"] = self.dtype
        return out


def measure_step(cfg: RunConfig) -> int:
    """The first checkpoint at or after the contaminator's cutoff (the final step if none is
    earlier)."""
    return next(c for c in checkpoint_steps(cfg) if c >= min(cfg.task.cutoff_step, cfg.grpo.steps))


def trained_window(rollouts: RolloutTable, cfg: RunConfig) -> np.ndarray:
    """(N,) bool: rollouts of steps before the cutoff whose batch has a nonzero advantage.

    The reference's rule is "nonzero steps before the cutoff", a step being nonzero when its
    gradient embedding has ‖e‖ > 1e-6 × the median nonzero norm (PAPER_NOTES "Metrics"). The GRPO
    loss the sketches and the replays differentiate (`training.objective.grpo_loss`) is Σ A·log π
    with no KL term, so a step's gradient is exactly 0 when every advantage of its batch is (all
    groups flat) and, in practice, nowhere near 0 otherwise: the two rules select the same steps
    (every seed of the smoke and default caches: over all sketched steps, every all-zero-advantage
    step has norm exactly 0 and every other is ≥ 0.29 × the median; `tests/test_counterfactual.py`
    checks it).
    This form is used because it is exact (no threshold) and read from the run alone (no sketch, no
    projector), so it is the same window whatever the sketch config and where no replays were
    built."""
    step = np.asarray(rollouts.step)
    live = np.unique(step[np.asarray(rollouts.advantage) != 0])
    return np.isin(step, live) & (step < cfg.task.cutoff_step)


def local_pool(rollouts: RolloutTable, window: np.ndarray) -> np.ndarray:
    """(N,) bool: the trained window without its first step — the first update with a nonzero
    gradient, where AdamW's second moment is that gradient's own square, so its update is ≈
    lr·sign(g) per coordinate and a removal acts through sign flips that no derivative prices
    (checklist/counterfactual.py)."""
    step = np.asarray(rollouts.step)
    window = np.asarray(window, bool)
    return window & (step > step[window].min()) if window.any() else window


def plan(rollouts: RolloutTable, cfg: RunConfig, cf: CounterfactualConfig) -> list[ReplaySpec]:
    """Every replay one seed needs, in a fixed order (names above)."""
    t = measure_step(cfg)
    in_window = trained_window(rollouts, cfg)
    window = np.flatnonzero(in_window)
    pool = np.flatnonzero(local_pool(rollouts, in_window))
    gt = np.flatnonzero(np.asarray(rollouts.gt))
    none = np.zeros(0, np.int64)

    def draw(i: int, tag: int, size: int, among: np.ndarray = window) -> np.ndarray:
        rng = np.random.default_rng([cfg.seed, cf.subset_seed, tag, i])
        return np.sort(rng.choice(among, size=min(size, among.size), replace=False)).astype(
            np.int64
        )

    specs = [
        ReplaySpec("full", "remove", none, t),
        ReplaySpec("gt_out", "remove", gt.astype(np.int64), t),
    ]
    specs += [
        ReplaySpec(f"random_{i}", "remove", draw(i, 0xA1, gt.size), t) for i in range(cf.n_random)
    ]
    specs.append(ReplaySpec("no_bonus", "no_bonus", none, t))
    n_lds = int(round(cf.lds_fraction * window.size))
    specs += [ReplaySpec(f"lds_{i}", "remove", draw(i, 0x1D5, n_lds), t) for i in range(cf.n_lds)]
    n_local = max(1, int(round(cf.local_fraction * window.size)))
    specs += [
        ReplaySpec(f"local_{i}", "remove", draw(i, 0x10C, n_local, pool), t)
        for i in range(cf.n_local)
    ]
    specs.append(ReplaySpec("full_f64", "remove", none, t, dtype="float64"))
    w = 1.0 - cf.reweight_delta
    specs += [
        ReplaySpec(
            f"reweight_{i}", "remove", draw(i, 0x10C, n_local, pool), t, weight=w, dtype="float64"
        )
        for i in range(cf.n_reweight)
    ]
    specs += [
        ReplaySpec(
            f"linear_{k}_{i}",
            "remove",
            draw(i, 0x10C, n_local, pool),
            t,
            weight=1.0 - d,
            dtype="float64",
        )
        for k, d in enumerate(cf.linearity_deltas)
        for i in range(cf.n_linearity)
    ]
    return specs


def measure_config(cf: CounterfactualConfig) -> dict:
    """The fields of `cf` one replay's bytes depend on (the subset counts and seeds do not)."""
    return {"n_probes": cf.n_probes, "replies_per_probe": cf.replies_per_probe}
