"""Token level: the cosine of the trigger-token gradient with each target (PAPER_NOTES "Token level", P4).

Definition (the reference gives only the name; this is ours, fixed before looking at any result):

* R = the coordinates of the trigger token's embedding row (`coverage.embedding_rows`: the row of
  ``frobnitz`` in the input and in the output embedding; our tiny Llama ties them, so R is one row of
  `hidden_size` coordinates that collects both the input-lookup and the output-logit paths; an untied
  paper-scale model gets both rows concatenated).
* At checkpoint c and draw d, sample `REPLIES_PER_PROBE` replies per held-out trigger probe (temperature
  1.0; seeded by (seed, c, d), independent of the samples the in-context target was built from) and keep
  those that show the behavior — the rollouts GRPO reinforces.
* The trigger-token gradient of kept reply i is g_i = [∇_θ(−ℓ_i)]_R: the shared per-rollout objective's
  gradient (the rollout embedding before sketching) restricted to R. A target's is t_R = [t(θ_c)]_R,
  exact (not sketched).
* The quantity is cos(g_i, t_R) per reply (NaN where the target was not built or either slice is 0).
  `TokenLevel.alignment` gives its mean over replies with a cluster-bootstrap CI over probes; the
  reference's pass bar is in-context CI lower bound > 0.05 and constructed CI upper bound < 0.05.

Stored per draw in ``token/``: ``ckpt.npy`` (n,) checkpoint row of each kept reply, ``probe.npy`` (n,)
probe index, ``cos_<kind>.npy`` (n,) and ``trigger_norm.npy`` (n,) ‖g_i‖, ``target_norm_<kind>.npy``
(n_ckpt,) ‖t_R‖.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from bt_core.coverage import embedding_rows
from bt_core.generate import sample
from bt_core.objective import collate
from bt_core.sketch import per_rollout_grads
from bt_core.store import load_array, save_array
from bt_core.task import TRIGGER

REPLIES_PER_PROBE = 8  # sampled replies per trigger probe and checkpoint (before keeping behavior ones)
BATCH = 64  # replies per batched per-example gradient


@dataclass(frozen=True)
class Alignment:
    """Mean cos(g_i, t_R) over kept replies at one checkpoint, with its bootstrap CI over probes."""

    kind: str
    step: int
    mean: float
    ci_lo: float
    ci_hi: float
    n: int  # kept replies with a defined cosine
    n_probes: int  # clusters

    def as_dict(self) -> dict:
        return asdict(self)


def trigger_rows(model, codec) -> np.ndarray:
    """Global coordinates of the trigger token's embedding row(s)."""
    return embedding_rows(model, [codec.tok.convert_tokens_to_ids(TRIGGER)])


def _cos(g: torch.Tensor, t: torch.Tensor | None) -> np.ndarray:
    if t is None:
        return np.full(g.shape[0], np.nan)
    denom = g.norm(dim=1) * t.norm()
    out = (g @ t) / denom
    return torch.where(denom > 0, out, torch.full_like(out, float("nan"))).numpy()


class _Collector:
    """Accumulates token-level rows checkpoint by checkpoint during `build_targets`."""

    def __init__(self, run):
        self.run = run
        self.rows: np.ndarray | None = None
        self.ckpt, self.probe, self.gnorm = [], [], []
        self.cos: dict[str, list] = {}
        self.tnorm: dict[str, list] = {}

    def add(self, model, j: int, grads: dict[str, torch.Tensor], gen: torch.Generator) -> dict:
        """Sample replies at checkpoint row `j`, keep behavior ones, store their cosines with `grads`."""
        from bt_core.targets import TARGET_KINDS, TargetExamples

        run, codec = self.run, self.run.codec
        if self.rows is None:
            self.rows = trigger_rows(model, codec)
        rows = torch.from_numpy(self.rows)
        t_r = {k: (grads[k][rows].double() if k in grads else None) for k in TARGET_KINDS}
        for k in TARGET_KINDS:
            self.tnorm.setdefault(k, []).append(float(t_r[k].norm()) if t_r[k] is not None else 0.0)
        probes = run.task.trigger_probes
        pid = np.repeat(np.arange(len(probes)), REPLIES_PER_PROBE)
        enc = [codec.encode_prompt(probes[i].text) for i in pid]
        rep, ln = sample(model, enc, max_new_tokens=run.config.grpo.max_new_tokens, eos_id=codec.eos_id,
                         pad_id=codec.pad_id, generator=gen, temperature=1.0, top_p=1.0)
        keep = [i for i in range(len(enc)) if any(codec.behavior_mask(rep[i, : ln[i]].tolist()))]
        info = {"n_sampled": len(enc), "n_kept": len(keep)}
        if not keep:
            return info
        ex = TargetExamples.build([enc[i] for i in keep], [rep[i, : ln[i]].tolist() for i in keep],
                                  [[True]] * len(keep), [0.0] * len(keep))
        g_parts = []
        for lo in range(0, len(keep), BATCH):
            part = ex.select(np.arange(lo, min(lo + BATCH, len(keep))))
            # the training collate (EOS masked): ℓ_i is exactly the rollout objective
            b = collate(part.prompts, part.prompt_len, part.replies, part.reply_len, codec.pad_id, codec.eos_id)
            flat, _ = per_rollout_grads(model, b)
            g_parts.append(flat[:, rows].double())
        g = torch.cat(g_parts)
        self.ckpt.append(np.full(len(keep), j)), self.probe.append(pid[keep]), self.gnorm.append(g.norm(dim=1).numpy())
        for k in TARGET_KINDS:
            self.cos.setdefault(k, []).append(_cos(g, t_r[k]))
        info["mean_cos"] = {k: _nanmean(self.cos[k][-1]) for k in TARGET_KINDS}
        return info

    def save(self, d: Path) -> None:
        from bt_core.targets import TARGET_KINDS

        d.mkdir(parents=True, exist_ok=True)
        cat = lambda parts, dtype: np.concatenate(parts).astype(dtype) if parts else np.zeros(0, dtype)  # noqa: E731
        save_array(d / "ckpt.npy", cat(self.ckpt, np.int32))
        save_array(d / "probe.npy", cat(self.probe, np.int32))
        save_array(d / "trigger_norm.npy", cat(self.gnorm, np.float64))
        save_array(d / "rows.npy", np.asarray(self.rows if self.rows is not None else [], np.int64))
        for k in TARGET_KINDS:
            save_array(d / f"cos_{k}.npy", cat(self.cos.get(k, []), np.float64))
            save_array(d / f"target_norm_{k}.npy", np.asarray(self.tnorm.get(k, []), np.float64))


def _nanmean(x: np.ndarray) -> float | None:
    x = x[np.isfinite(x)]
    return round(float(x.mean()), 5) if x.size else None


class TokenLevel:
    """Stored token-level rows of one draw (see the module docstring for the definition)."""

    def __init__(self, d: Path, steps: np.ndarray, kinds: tuple[str, ...]):
        self.steps = np.asarray(steps)
        self.ckpt = np.asarray(load_array(d / "ckpt.npy"))
        self.probe = np.asarray(load_array(d / "probe.npy"))
        self.trigger_norm = np.asarray(load_array(d / "trigger_norm.npy"))
        self.rows = np.asarray(load_array(d / "rows.npy"))
        self.cos = {k: np.asarray(load_array(d / f"cos_{k}.npy")) for k in kinds}
        self.target_norm = {k: np.asarray(load_array(d / f"target_norm_{k}.npy")) for k in kinds}

    @staticmethod
    def collector(run) -> _Collector:
        return _Collector(run)

    @classmethod
    def load(cls, d: Path, steps: np.ndarray) -> TokenLevel:
        from bt_core.targets import TARGET_KINDS

        return cls(d, steps, TARGET_KINDS)

    def cosines(self, kind: str, step: int) -> tuple[np.ndarray, np.ndarray]:
        """(cos, probe) of the kept replies at checkpoint `step` with a defined cosine: (n,), (n,)."""
        hit = np.flatnonzero(self.steps == step)
        if hit.size == 0:
            raise KeyError(f"no checkpoint at step {step}; checkpoints: {self.steps.tolist()}")
        if kind not in self.cos:
            raise KeyError(f"target kind {kind!r} has no token-level data; kinds: {sorted(self.cos)}")
        sel = (self.ckpt == hit[0]) & np.isfinite(self.cos[kind])
        return self.cos[kind][sel], self.probe[sel]

    def alignment(self, kind: str, step: int, n_boot: int = 1000, alpha: float = 0.05, seed: int = 0) -> Alignment:
        cos, probe = self.cosines(kind, step)
        lo, hi = cluster_bootstrap_mean_ci(cos, probe, n_boot=n_boot, alpha=alpha, seed=seed)
        mean = float(cos.mean()) if cos.size else math.nan
        return Alignment(kind, int(step), mean, lo, hi, int(cos.size), int(np.unique(probe).size))


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
