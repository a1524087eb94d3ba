"""Throughput of the sketch stage: rollouts/s of per-rollout gradients with and without projection.

One run, one model, the same batches for every method:

* ``bare_backward``: the default per-example engine (hooks: one batched backward) and exact norms;
* ``countsketch`` / ``dense``: the same plus CountSketch / the dense TRAK-style projection at width
  k, fed block by block (`bt_core.gradients.sketch.embed_batch`, exactly what `sketch_run` does);
* ``traker``: the same gradients assembled into (B, n_params) and projected by traker's
  `BasicProjector` (Rademacher, its default block size) — None when traker is not installed;
* ``vmap_backward`` / ``loop_backward``: the torch.func engine and one backward per rollout, for
  comparison;
* ``countsketch_projection_only``: CountSketch alone on the precomputed blocks (its share of the
  cost).

On a big model (`scale="real"`: SmolLM2-135M, 134.5M parameters) a dense projection to k = 8192 is
n_params × k ≈ 1.1·10¹² random numbers and multiply-adds per batch — tens of minutes per pass on a
CPU, which is the point of the comparison but cannot be timed whole here. Above `full_limit`
coordinates, the dense and traker projections are therefore timed on the first `full_limit`
coordinates of the same gradients and scaled linearly to n_params (their cost is linear in the
coordinates for fixed B and k; reported as `*_extrapolated_from_coords`); the gradient computation
is always timed whole.
The torch.func engine is skipped there (None): it is a reference implementation, not a candidate.

Fast methods report the best of `repeats` interleaved passes (the least-disturbed pass on a shared
machine); the slow ones (dense, traker: seconds per batch) one pass. The default clock is the
process's CPU time (one thread), which a shared machine's load inflates far less than wall time; on
a quiet machine the two agree. Ratios are what to read; absolute rates depend on the machine and its
load.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from bt_core.gradients.pergrad import HookGrads, LoopGrads, VmapGrads, n_params
from bt_core.gradients.projectors import CountSketch, DenseProjector
from bt_core.gradients.scatter import kernel_for
from bt_core.training.objective import Batch


def workload(
    batch_size: int,
    n_batches: int,
    run_dir: str | None = None,
    seed: int = 0,
    scale: str = "default",
) -> tuple:
    """(model, [Batch]): a trained run's checkpoint-0 model and its first rollouts, or (no run) the
    `scale`'s model at its seeded init (pretrained: as shipped) with replies sampled from its prompt
    pool."""
    from bt_core.training import grpo

    if run_dir is not None:
        from bt_core.training.checkpoints import TrainedRun as Run

        run = Run(Path(run_dir))
        model, t = run.model_at(0), run.rollouts
        n = min(len(t), batch_size * n_batches)
        return model, [
            grpo.batch_of(t.select(np.arange(lo, min(lo + batch_size, n))), run.codec)
            for lo in range(0, n, batch_size)
        ]
    from bt_core.config import get_scale
    from bt_core.training.generate import sample
    from bt_core.training.loop import _pad
    from bt_core.training.model import build_codec, build_model
    from bt_core.training.objective import collate
    from bt_core.training.task_natural import make_task

    cfg = get_scale(scale).run
    codec, task = build_codec(cfg.model, cfg.task), make_task(cfg.task)
    model = build_model(cfg.model, codec.vocab_size, seed)
    prompts = task.pool_order(seed, batch_size * n_batches)
    gen = torch.Generator().manual_seed(seed)
    batches = []
    for lo in range(0, len(prompts), batch_size):
        enc = [codec.encode_prompt(p.text) for p in prompts[lo : lo + batch_size]]
        with torch.no_grad():
            rep, ln = sample(
                model,
                enc,
                max_new_tokens=cfg.grpo.max_new_tokens,
                eos_id=codec.eos_id,
                pad_id=codec.pad_id,
                generator=gen,
                temperature=cfg.grpo.temperature,
                top_p=cfg.grpo.top_p,
            )
        p, pl = _pad(enc)
        batches.append(collate(p, pl, np.asarray(rep), np.asarray(ln), codec.pad_id, codec.eos_id))
    return model, batches


def traker_projector(n: int, k: int):
    """traker's BasicProjector (CPU, Rademacher, default block size), or None when traker is
    absent."""
    try:
        from trak.projectors import BasicProjector, ProjectionType
    except ImportError:
        return None
    return BasicProjector(
        grad_dim=n,
        proj_dim=k,
        seed=0,
        proj_type=ProjectionType.rademacher,
        device=torch.device("cpu"),
    )


CLOCKS = {"cpu": time.process_time, "wall": time.perf_counter}


def _rates(
    fns: dict[str, Callable[[Batch], object]],
    batches: list[Batch],
    repeats: int,
    clock: str = "cpu",
) -> dict[str, float]:
    """Best rollouts/s of each fn over `repeats` passes over all batches. Passes are interleaved
    across the fns, so a change in the machine's load hits them alike."""
    now = CLOCKS[clock]
    n = sum(len(b) for b in batches)
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(repeats):
        for name, fn in fns.items():
            t0 = now()
            for b in batches:
                fn(b)
            best[name] = min(best[name], now() - t0)
    return {name: n / t for name, t in best.items()}


def bench_sketch(
    k: int = 8192,
    batch_size: int = 64,
    n_batches: int = 2,
    repeats: int = 5,
    run_dir: str | None = None,
    threads: int = 1,
    slow: bool = True,
    clock: str = "cpu",
    scale: str = "default",
    full_limit: int = 1 << 18,
) -> dict:
    """Rollouts/s of each method on the same batches (see module docstring) and the ratios. `clock`:
    cpu (this process's CPU time: on a shared machine it is not inflated by waiting for a core) or
    wall.
    Dense projections of models above `full_limit` parameters are timed on a slice and scaled
    (docstring)."""
    if clock not in CLOCKS:
        raise ValueError(f"clock={clock!r} is unknown; choose one of {', '.join(CLOCKS)}")
    from bt_core.gradients.sketch import embed_batch
    from bt_core.training.model import torch_threads

    with torch_threads(threads):
        model, batches = workload(batch_size, n_batches, run_dir, scale=scale)
        n = n_params(model)
        sliced = n > full_limit
        m = min(n, full_limit)  # coordinates the dense projections are timed on
        hooks, vm = HookGrads(), VmapGrads()
        cs, dense, tp = CountSketch(n, k), DenseProjector(m, k), traker_projector(m, k)

        def bare(b):
            # consumed one block at a time, as embed_batch does
            blocks, ell = hooks.blocks(model, b)
            return [torch.linalg.vector_norm(x, dim=1) for _, x in blocks], ell

        # for the projection-only timing (first batch)
        pre = list(hooks.blocks(model, batches[0])[0])
        fast = {
            "bare_backward": bare,
            "countsketch": lambda b: embed_batch(model, b, cs, hooks),
            "loop_backward": lambda b: LoopGrads().blocks(model, b),
        }
        if not sliced:
            fast["vmap_backward"] = lambda b: vm.blocks(model, b)
        for fn in fast.values():
            fn(batches[0])  # warm-up
        rates: dict[str, float | None] = dict(_rates(fast, batches, repeats, clock))
        rates["countsketch_projection_only"] = _rates(
            {"p": lambda b: cs.project_blocks(pre, len(b))}, batches[:1], repeats, clock
        )["p"]
        rates.setdefault("vmap_backward", None)
        rates.update({"dense": None, "traker": None})
        if slow:
            rates.update(_dense_rates(model, batches, hooks, dense, tp, m, clock))
    return {
        **{key: _round(v) for key, v in rates.items()},
        "ratios": _ratios(rates),
        "k": k,
        "n_params": n,
        "batch_size": batch_size,
        "n_rollouts": sum(len(b) for b in batches),
        "seq_len": [int(b.input_ids.shape[1]) for b in batches],
        "threads": threads,
        "clock": clock,
        "repeats_fast": repeats,
        "scale": scale,
        "workload": run_dir or f"{scale}-scale model (seeded init or as shipped), sampled replies",
        "dense_extrapolated_from_coords": m if sliced else None,
        "traker_installed": tp is not None,
        # the CountSketch path a batch of this size takes (bt_core.gradients.scatter)
        "scatter_kernel": kernel_for(batch_size, batch_size * n),
    }


def _dense_rates(
    model, batches: list[Batch], hooks: HookGrads, dense: DenseProjector, tp, m: int, clock: str
) -> dict[str, float]:
    """Rollouts/s with a dense projection (ours, traker's): gradients assembled to (B, n_params) and
    projected. One pass. When m < n_params the projection is timed on the first m coordinates and
    scaled by n_params / m; the gradient computation is timed whole."""
    now, n = CLOCKS[clock], n_params(model)
    t_grad = t_dense = t_trak = 0.0
    for b in batches:
        t0 = now()
        flat, _ = hooks(model, b)
        flat.norm(dim=1)
        t_grad += now() - t0
        part = flat[:, :m].contiguous()
        del flat
        t0 = now()
        dense.project(part)
        t_dense += now() - t0
        if tp is not None:
            t0 = now()
            tp.project(part, model_id=0)
            t_trak += now() - t0
    scale, total = n / m, sum(len(b) for b in batches)
    out = {"dense": total / (t_grad + t_dense * scale)}
    if tp is not None:
        out["traker"] = total / (t_grad + t_trak * scale)
    return out


def _round(v: float | None) -> float | None:
    """4 significant figures: a dense projection of a big model runs at ~10⁻⁴ rollouts/s."""
    return None if v is None else float(f"{v:.4g}")


def _ratios(r: dict[str, float | None]) -> dict[str, float | None]:
    bare, cs = r["bare_backward"], r["countsketch"]

    def div(a, b):
        return None if a is None or b is None else round(a / b, 3)

    return {
        "countsketch_over_traker": div(cs, r.get("traker")),
        "countsketch_over_dense": div(cs, r.get("dense")),
        "countsketch_overhead_vs_bare": None if cs is None else round(bare / cs - 1, 3),
        "dense_overhead_vs_bare": None
        if r.get("dense") is None
        else round(bare / r["dense"] - 1, 3),
        "hooks_over_vmap": div(bare, r.get("vmap_backward")),
        "hooks_over_loop": div(bare, r.get("loop_backward")),
        "countsketch_projection_time_over_bare": div(bare, r.get("countsketch_projection_only")),
    }
