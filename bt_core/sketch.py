"""Sketch stage: per-rollout gradient embeddings of every training rollout at the parameters that
produced it, step-level embeddings of each aggregated batch gradient, exact norms and fluency.

How "the parameters that produced it" are obtained: the run stores model + AdamW state at each
checkpoint; from each checkpoint we *replay* the recorded updates (`grpo.update` on the stored rollouts,
the same function training ran) and embed each step's rollouts before its update. The replayed
parameters are compared with the next stored checkpoint and the difference is reported (`replay`).

Per-rollout gradients are computed in batches with `torch.func` (vmap of grad over the shared objective);
no per-rollout backward loop in the hot path.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch.func import functional_call, grad, vmap
from tqdm.auto import tqdm

from bt_core import grpo
from bt_core.config import SketchConfig
from bt_core.objective import Batch, rollout_logprob
from bt_core.projectors import Projector, make_projector
from bt_core.rollouts import RolloutTable
from bt_core.store import load_array, save_array
from bt_core.train import Run, torch_threads


def param_layout(model) -> list[tuple[str, torch.nn.Parameter, int]]:
    """(name, parameter, global offset) in named_parameters order; tied weights appear once."""
    out, off = [], 0
    for name, p in model.named_parameters():
        out.append((name, p, off))
        off += p.numel()
    return out


def flat_grad(model) -> torch.Tensor:
    """The model's current .grad as one flat vector (zeros where a parameter has no grad)."""
    return torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1)
                      for _, p, _ in param_layout(model)])


def per_rollout_grads(model, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
    """Gradients of −ℓ_i for each row, flattened: (B, n_params); and ℓ_i (fluency): (B,)."""
    names = [n for n, _, _ in param_layout(model)]
    params = {n: p.detach() for n, p in model.named_parameters()}

    def neg_ell(p, ids, att, pos, lm):
        fmodel = lambda **kw: functional_call(model, p, (), kw)  # noqa: E731
        ell = rollout_logprob(fmodel, Batch(ids[None], att[None], pos[None], lm[None], batch.reply_start))
        return -ell[0], ell[0]

    g, ell = vmap(grad(neg_ell, has_aux=True), in_dims=(None, 0, 0, 0, 0))(
        params, batch.input_ids, batch.attention_mask, batch.position_ids, batch.loss_mask)
    flat = torch.cat([g[n].reshape(g[n].shape[0], -1) for n in names], dim=1)
    return flat, ell.detach()


@dataclass
class Sketches:
    """Embeddings of one rollout set. Row i ↔ rollout i of its table."""

    emb: np.ndarray  # (N, k) float32 sketch of ∇(−ℓ_i) at the rollout's own parameters
    grad_norm: np.ndarray  # (N,) exact ‖∇(−ℓ_i)‖
    fluency: np.ndarray  # (N,) ℓ_i = mean reply-token log-prob at the rollout's own parameters
    step_emb: np.ndarray | None  # (S, k) sketch of each step's batch gradient ∇L_s (stream only)
    step_norm: np.ndarray | None  # (S,) exact ‖∇L_s‖
    steps: np.ndarray | None  # (S,) step ids of step_emb rows
    report: dict  # replay check, coverage, timings

    @classmethod
    def load(cls, d: Path) -> Sketches:
        opt = (lambda n: load_array(d / n) if (d / n).exists() else None)
        return cls(load_array(d / "emb.npy"), load_array(d / "grad_norm.npy"), load_array(d / "fluency.npy"),
                   opt("step_emb.npy"), opt("step_norm.npy"), opt("steps.npy"),
                   json.loads((d / "report.json").read_text()))


def embed_rows(model, table: RolloutTable, codec, proj: Projector, batch_size: int,
               out_emb: np.ndarray, out_norm: np.ndarray, out_flu: np.ndarray, offset: int) -> None:
    """Write embeddings of `table`'s rows (at `model`'s current parameters) into the outputs."""
    for lo in range(0, len(table), batch_size):
        part = table.select(np.arange(lo, min(lo + batch_size, len(table))))
        flat, ell = per_rollout_grads(model, grpo.batch_of(part, codec))
        sl = slice(offset + lo, offset + lo + len(part))
        out_emb[sl] = proj.project(flat).numpy()
        out_norm[sl] = flat.norm(dim=1).numpy()
        out_flu[sl] = ell.numpy()


def sketch_run(run: Run, cfg: SketchConfig, out: Path, progress: bool = False) -> dict:
    """Embed every training rollout of `run` and every step's batch gradient into `out`."""
    with torch_threads(run.config.threads):
        return _sketch_run(run, cfg, out, progress)


def _sketch_run(run: Run, cfg: SketchConfig, out: Path, progress: bool) -> dict:
    table = run.rollouts
    n, steps = len(table), np.unique(np.asarray(table.step))
    model = run.model_at(0)
    n_params = sum(p.numel() for p in model.parameters())
    proj = make_projector(cfg.projector, n_params, cfg.k, cfg.hash_seed)
    emb = np.lib.format.open_memmap(out / "emb.npy", mode="w+", dtype=np.float32, shape=(n, cfg.k))
    gnorm, flu = np.zeros(n, np.float32), np.zeros(n, np.float32)
    step_emb = np.zeros((len(steps), cfg.k), np.float32)
    step_norm = np.zeros(len(steps), np.float32)
    step_col = np.asarray(table.step)
    ck = run.checkpoint_steps
    replay: list[dict] = []
    bar = tqdm(total=len(steps), desc=f"sketch seed {run.seed}", disable=not progress, leave=False)
    for c, c_next in zip(ck[:-1], ck[1:], strict=False):
        model = run.model_at(c)
        opt = run.optimizer_at(c, model)
        for s in range(c, c_next):
            rows = np.flatnonzero(step_col == s)
            part = table.select(rows)
            embed_rows(model, part, run.codec, proj, cfg.batch_size, emb, gnorm, flu, int(rows[0]))

            def on_grad(m, s=s):
                g = flat_grad(m)
                step_emb[s] = proj.project(g[None])[0].numpy()
                step_norm[s] = float(g.norm())

            grpo.update(model, opt, part, run.codec, run.config.grpo.grad_clip, on_grad=on_grad)
            bar.update(1)
        stored = run.model_at(c_next)
        diff = max(float((a - b).abs().max()) for a, b in zip(model.parameters(), stored.parameters(), strict=True))
        replay.append({"from": c, "to": c_next, "max_abs_diff": diff})
    bar.close()
    emb.flush()
    del emb
    save_array(out / "grad_norm.npy", gnorm)
    save_array(out / "fluency.npy", flu)
    save_array(out / "step_emb.npy", step_emb)
    save_array(out / "step_norm.npy", step_norm)
    save_array(out / "steps.npy", steps.astype(np.int32))
    from bt_core.coverage import coverage_report

    report = {"projector": cfg.projector, "k": cfg.k, "n_params": n_params, "replay": replay,
              "replay_max_abs_diff": max(r["max_abs_diff"] for r in replay),
              "coverage": coverage_report(run, proj, table, n_sample=32)}
    (out / "report.json").write_text(json.dumps(report, indent=1))
    return {"summary": {"replay_max_abs_diff": report["replay_max_abs_diff"],
                        "coverage_ok": report["coverage"]["ok"]}}


def sketch_table_at(model, table: RolloutTable, codec, cfg: SketchConfig, out: Path) -> None:
    """Embed a rollout set generated at one checkpoint (draws) with `model`'s parameters."""
    n = len(table)
    n_params = sum(p.numel() for p in model.parameters())
    proj = make_projector(cfg.projector, n_params, cfg.k, cfg.hash_seed)
    emb = np.zeros((n, cfg.k), np.float32)
    gnorm, flu = np.zeros(n, np.float32), np.zeros(n, np.float32)
    embed_rows(model, table, codec, proj, cfg.batch_size, emb, gnorm, flu, 0)
    save_array(out / "emb.npy", emb)
    save_array(out / "grad_norm.npy", gnorm)
    save_array(out / "fluency.npy", flu)
    (out / "report.json").write_text(json.dumps({"projector": cfg.projector, "k": cfg.k}))
