"""Sketch stage: per-rollout gradient embeddings of every training rollout at the parameters that
produced it, step-level embeddings of each aggregated batch gradient, exact norms and fluency.

How "the parameters that produced it" are obtained: the run stores model + AdamW state at each
checkpoint; from each checkpoint we *replay* the recorded updates (`grpo.update` on the stored
rollouts, the same function training ran) and embed each step's rollouts before its update. The
replayed parameters are compared with the next stored checkpoint and the difference is reported
(`replay`).

Per-rollout gradients are computed in batches by a `bt_core.gradients.pergrad` engine (default
`hooks`: one batched backward, per-example parameter gradients from activations and output
gradients; `vmap`: torch.func) and handed to the projector one parameter block at a time, so the (B,
n_params) matrix is never assembled; no per-rollout backward loop in the hot path.
"""

from __future__ import annotations

import json
import mmap
import time
from pathlib import Path

import numpy as np
import torch

from bt_core.artifacts.rollouts import RolloutTable
from bt_core.artifacts.store import save_array
from bt_core.config import SketchConfig
from bt_core.gradients.coverage import coverage_report
from bt_core.gradients.layout import flat_grad
from bt_core.gradients.pergrad import GradEngine, get_engine
from bt_core.gradients.projectors import Projector, make_projector
from bt_core.progress import progress as progress_bar
from bt_core.training import grpo
from bt_core.training.checkpoints import TrainedRun
from bt_core.training.model import torch_threads
from bt_core.training.objective import Batch


def per_rollout_grads(
    model, batch: Batch, method: str = "hooks"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Gradients of −ℓ_i for each row, flattened: (B, n_params); and ℓ_i (fluency): (B,)."""
    return get_engine(method)(model, batch)


def embed_batch(
    model, batch: Batch, proj: Projector, engine: GradEngine
) -> tuple[torch.Tensor, ...]:
    """Sketch of ∇(−ℓ_i): (B, k); exact ‖∇(−ℓ_i)‖: (B,); ℓ_i: (B,). Fused: each parameter's
    per-example block goes straight into the projector (the (B, n_params) matrix is never
    assembled)."""
    blocks, ell = engine.blocks(model, batch)
    # one pass: exact norms (float64 sums of squares) on the way into the projector
    emb, norm2 = proj.project_blocks_with_norms(blocks, len(batch))
    return emb, norm2.sqrt().float(), ell


def embed_rows(
    model,
    table: RolloutTable,
    codec,
    proj: Projector,
    batch_size: int,
    out_emb: np.ndarray,
    out_norm: np.ndarray,
    out_flu: np.ndarray,
    offset: int,
    engine: GradEngine | None = None,
) -> None:
    """Write embeddings of `table`'s rows (at `model`'s current parameters) into the outputs."""
    engine = engine or get_engine("hooks")
    for lo in range(0, len(table), batch_size):
        part = table.select(np.arange(lo, min(lo + batch_size, len(table))))
        emb, norm, ell = embed_batch(model, grpo.batch_of(part, codec), proj, engine)
        sl = slice(offset + lo, offset + lo + len(part))
        out_emb[sl] = emb.numpy()
        out_norm[sl] = norm.numpy()
        out_flu[sl] = ell.numpy()


def sketch_run(run: TrainedRun, cfg: SketchConfig, out: Path, progress: bool = False) -> dict:
    """Embed every training rollout of `run` and every step's batch gradient into `out`."""
    with torch_threads(run.config.threads):
        return _sketch_run(run, cfg, out, progress)


def segments(run: TrainedRun) -> list[tuple[int, int]]:
    """The replay segments of `run`: (checkpoint step, next checkpoint step). Each starts from a
    stored checkpoint, so any contiguous range of them can be sketched alone (one rank of a
    distributed build)."""
    ck = run.checkpoint_steps
    return list(zip(ck[:-1], ck[1:], strict=False))


def segment_rows(run: TrainedRun, segs: list[tuple[int, int]]) -> tuple[int, int]:
    """[first, last + 1) rows of the rollouts table trained in `segs` (rows are ordered by step)."""
    step_col = np.asarray(run.rollouts.step)
    rows = (
        np.flatnonzero((step_col >= segs[0][0]) & (step_col < segs[-1][1]))
        if segs
        else np.zeros(0, int)
    )
    return (int(rows[0]), int(rows[-1]) + 1) if rows.size else (0, 0)


def sketch_segments(
    run: TrainedRun,
    cfg: SketchConfig,
    segs: list[tuple[int, int]],
    emb: np.ndarray,
    progress: bool = False,
) -> dict:
    """Sketch the rollouts and step gradients of the replay segments `segs` (contiguous). `emb`
    receives the rollout embeddings of rows [segment_rows) (its row 0 = the first of them). Returns
    the other arrays of those rows/steps, the replay report per segment and the embedding time."""
    table = run.rollouts
    lo, hi = segment_rows(run, segs)
    step_col = np.asarray(table.step)
    steps = np.unique(step_col[lo:hi])
    model = run.model_at(segs[0][0]) if segs else None
    n_params = sum(p.numel() for p in model.parameters()) if model is not None else 0
    proj = (
        make_projector(cfg.projector, n_params, cfg.k, cfg.hash_seed) if model is not None else None
    )
    engine = get_engine(cfg.grad_method)
    gnorm, flu = np.zeros(hi - lo, np.float32), np.zeros(hi - lo, np.float32)
    step_emb = np.zeros((len(steps), cfg.k if proj is None else proj.k), np.float32)
    step_norm = np.zeros(len(steps), np.float32)
    replay: list[dict] = []
    t_embed = 0.0
    bar = progress_bar(
        total=len(steps), desc=f"sketch seed {run.seed}", unit="step", enabled=progress
    )
    for c, c_next in segs:
        opt = run.optimizer_at(c, model)  # `model` holds the stored parameters of checkpoint c
        for s in range(c, c_next):
            rows = np.flatnonzero(step_col == s)
            part = table.select(rows)
            t0 = time.perf_counter()
            embed_rows(
                model,
                part,
                run.codec,
                proj,
                cfg.batch_size,
                emb,
                gnorm,
                flu,
                int(rows[0]) - lo,
                engine,
            )
            t_embed += time.perf_counter() - t0
            i = int(np.searchsorted(steps, s))

            def on_grad(m, i=i):
                g = flat_grad(m)
                step_emb[i] = proj.project(g[None])[0].numpy()
                step_norm[i] = float(g.norm())

            grpo.update(model, opt, part, run.codec, run.config.grpo.grad_clip, on_grad=on_grad)
            bar.update(1)
        stored = run.model_at(c_next)
        with torch.no_grad():
            diff = max(
                float((a - b).abs().max())
                for a, b in zip(model.parameters(), stored.parameters(), strict=True)
            )
        replay.append({"from": c, "to": c_next, "max_abs_diff": diff})
        # the next segment starts from the stored checkpoint, not the replayed parameters
        model = stored
        release_pages(emb)
    bar.close()
    return {
        "rows": (lo, hi),
        "grad_norm": gnorm,
        "fluency": flu,
        "step_emb": step_emb,
        "step_norm": step_norm,
        "steps": steps.astype(np.int32),
        "replay": replay,
        "embed_s": t_embed,
    }


def write_sketches(
    run: TrainedRun, cfg: SketchConfig, out: Path, parts: list[dict], t_start: float
) -> dict:
    """Write the arrays of `parts` (in segment order; `emb.npy` already holds every row) and the
    report with the coverage check into `out`. The same bytes whether the parts came from one
    process or several."""
    cat = {
        name: np.concatenate([p[name] for p in parts])
        for name in ("grad_norm", "fluency", "step_emb", "step_norm", "steps")
    }
    for name, arr in cat.items():
        save_array(out / f"{name}.npy", arr)
    replay = [r for p in parts for r in p["replay"]]
    t_embed = sum(p["embed_s"] for p in parts)
    model = run.model_at(run.checkpoint_steps[0])
    n_params = sum(p.numel() for p in model.parameters())
    proj = make_projector(cfg.projector, n_params, cfg.k, cfg.hash_seed)
    engine = get_engine(cfg.grad_method)
    t_cov = time.perf_counter()
    coverage = coverage_report(run, proj, run.rollouts, n_sample=32, engine=engine)
    n = len(run.rollouts)
    timings = {
        "embed_s": round(t_embed, 3),
        "coverage_s": round(time.perf_counter() - t_cov, 3),
        "wall_s": round(time.perf_counter() - t_start, 3),
        "rollouts_per_s_embed": round(n / max(t_embed, 1e-9), 1),
    }
    report = {
        "projector": cfg.projector,
        "k": proj.k,
        "n_params": n_params,
        "grad_method": engine.name,
        "replay": replay,
        "replay_max_abs_diff": max(r["max_abs_diff"] for r in replay),
        "coverage": coverage,
    }
    # Timings go to the manifest, not report.json: artifact files must be the same bytes on every
    # rebuild.
    (out / "report.json").write_text(json.dumps(report, indent=1))
    return {
        "summary": {
            "replay_max_abs_diff": report["replay_max_abs_diff"],
            "coverage_ok": report["coverage"]["ok"],
            "wall_s": timings["wall_s"],
        },
        "timings": timings,
    }


def release_pages(arr: np.ndarray) -> None:
    """Drop a memory-mapped array's pages from this process's resident set (`MADV_DONTNEED`). The
    map is shared with its file, so what was written stays in the page cache and reaches the file;
    a later read maps it back. The sketch stage writes each rollout's row once, in order: without
    this, every written row (512 MB of embeddings per default seed) stays resident until the map
    closes, and two seeds sketched side by side held 1 GB between them. A plain array is left
    alone."""
    mm = getattr(arr, "_mmap", None)
    if isinstance(arr, np.memmap) and mm is not None and hasattr(mm, "madvise"):
        mm.madvise(mmap.MADV_DONTNEED)


def open_emb(path: Path, n: int, k: int) -> np.ndarray:
    """A writable memory-mapped (n, k) float32 `.npy` (the rollout embeddings never sit in RAM
    whole)."""
    return np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(n, k))


def _sketch_run(run: TrainedRun, cfg: SketchConfig, out: Path, progress: bool) -> dict:
    t_start = time.perf_counter()
    emb = open_emb(out / "emb.npy", len(run.rollouts), cfg.k)
    part = sketch_segments(run, cfg, segments(run), emb, progress)
    emb.flush()
    del emb
    return write_sketches(run, cfg, out, [part], t_start)


def sketch_table_at(model, table: RolloutTable, codec, cfg: SketchConfig, out: Path) -> None:
    """Embed a rollout set generated at one checkpoint (draws) with `model`'s parameters."""
    n = len(table)
    n_params = sum(p.numel() for p in model.parameters())
    proj = make_projector(cfg.projector, n_params, cfg.k, cfg.hash_seed)
    emb = np.zeros((n, proj.k), np.float32)
    gnorm, flu = np.zeros(n, np.float32), np.zeros(n, np.float32)
    embed_rows(
        model, table, codec, proj, cfg.batch_size, emb, gnorm, flu, 0, get_engine(cfg.grad_method)
    )
    save_array(out / "emb.npy", emb)
    save_array(out / "grad_norm.npy", gnorm)
    save_array(out / "fluency.npy", flu)
    (out / "report.json").write_text(
        json.dumps({"projector": cfg.projector, "k": proj.k, "grad_method": cfg.grad_method})
    )
