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

The stored rows and `TokenLevel.alignment` live in `bt_core.artifacts.targets`; this module collects them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from bt_core.artifacts.store import save_array
from bt_core.artifacts.targets import TARGET_KINDS, TargetExamples
from bt_core.gradients.layout import embedding_rows
from bt_core.targets.examples import sequences_per_backward
from bt_core.training.generate import sample
from bt_core.training.objective import collate

REPLIES_PER_PROBE = 8  # sampled replies per trigger probe and checkpoint (before keeping behavior ones)
BATCH = 64  # replies per batched per-example gradient


def rows_of_grads(model, batch, coords: np.ndarray) -> torch.Tensor:
    """Per-example gradients of −ℓ_i restricted to the global coordinates `coords`, (B, len(coords)), read
    from the engine's blocks one at a time: the same values as `per_rollout_grads(...)[0][:, coords]`
    without the (B, n_params) matrix (34 GB for 64 replies at the real scale)."""
    from bt_core.gradients.pergrad import get_engine

    order = np.argsort(coords, kind="stable")
    sorted_c = coords[order]
    out = torch.zeros(len(batch), len(coords))
    blocks, _ = get_engine("hooks").blocks(model, batch)
    for off, blk in blocks:
        lo, hi = np.searchsorted(sorted_c, [off, off + blk.shape[1]])
        if hi > lo:
            idx = torch.from_numpy(order[lo:hi])
            out[:, idx] = blk[:, torch.from_numpy(sorted_c[lo:hi] - off)]
    return out



def trigger_rows(model, codec) -> np.ndarray:
    """Global coordinates of the trigger token's embedding row(s)."""
    return embedding_rows(model, list(codec.trigger_ids))


def _cos(g: torch.Tensor, t: torch.Tensor | None) -> np.ndarray:
    if t is None:
        return np.full(g.shape[0], np.nan)
    denom = g.norm(dim=1) * t.norm()
    out = (g @ t) / denom
    return torch.where(denom > 0, out, torch.full_like(out, float("nan"))).numpy()


class TokenLevelCollector:
    """Accumulates token-level rows checkpoint by checkpoint during `build_targets`."""

    def __init__(self, run):
        self.run = run
        self.rows: np.ndarray | None = None
        self.ckpt, self.probe, self.gnorm = [], [], []
        self.cos: dict[str, list] = {}
        self.tnorm: dict[str, list] = {}

    def add(self, model, j: int, grads: dict[str, torch.Tensor], gen: torch.Generator) -> dict:
        """Sample replies at checkpoint row `j`, keep behavior ones, store their cosines with `grads`."""
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
        # a big model (the real scale: 134.5M parameters) in small batches: activations grow with B
        batch = sequences_per_backward(model, BATCH)
        for lo in range(0, len(keep), batch):
            part = ex.select(np.arange(lo, min(lo + batch, len(keep))))
            # the training collate (EOS masked): ℓ_i is exactly the rollout objective
            b = collate(part.prompts, part.prompt_len, part.replies, part.reply_len, codec.pad_id, codec.eos_id)
            g_parts.append(rows_of_grads(model, b, self.rows).double())
        g = torch.cat(g_parts)
        self.ckpt.append(np.full(len(keep), j)), self.probe.append(pid[keep]), self.gnorm.append(g.norm(dim=1).numpy())
        for k in TARGET_KINDS:
            self.cos.setdefault(k, []).append(_cos(g, t_r[k]))
        info["mean_cos"] = {k: _nanmean(self.cos[k][-1]) for k in TARGET_KINDS}
        return info

    def save(self, d: Path) -> None:
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
